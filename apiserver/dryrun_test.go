package apiserver

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/everynode/everynode/resources"
)

// dryRunKind is one kind for TestDryRunEveryKindAndVerb: a valid object of
// it and a status patch (empty: the kind has no status subresource).
type dryRunKind struct {
	r           *resources.Resource
	name        string
	body        string
	statusPatch string
}

func dryRunKinds(t *testing.T) []dryRunKind {
	return []dryRunKind{
		{resources.Namespaces, "dry-ns", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"dry-ns"}}`,
			`{"status":{"conditions":[{"type":"NamespaceDeletionDiscoveryFailure","status":"False","reason":"R"}]}}`},
		{resources.Nodes, "dry-node", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"dry-node"}}`,
			`{"status":{"capacity":{"pods":"10"}}}`},
		{resources.Pods, "dry-pod", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"dry-pod"},"spec":{"containers":[{"name":"c","image":"busybox:1.36"}]}}`,
			`{"status":{"message":"dry"}}`},
		{resources.Events, "dry-ev", `{"apiVersion":"v1","kind":"Event","metadata":{"name":"dry-ev"},"involvedObject":{"kind":"Pod","name":"x","namespace":"default"},"reason":"R","message":"m","type":"Normal","source":{"component":"c"}}`, ""},
		{resources.ConfigMaps, "dry-cm", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dry-cm"},"data":{"k":"v"}}`, ""},
		{resources.Secrets, "dry-secret", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"dry-secret"},"stringData":{"k":"v"}}`, ""},
		{resources.ServiceAccounts, "dry-sa", `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"dry-sa"}}`, ""},
		{resources.DaemonSets, "dry-ds", toJSONString(t, newDS("dry-ds")), `{"status":{"numberMisscheduled":1}}`},
		{resources.ControllerRevisions, "dry-cr", `{"apiVersion":"apps/v1","kind":"ControllerRevision","metadata":{"name":"dry-cr"},"revision":1,"data":{"a":"b"}}`, ""},
		{resources.PriorityClasses, "dry-pc", `{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"dry-pc"},"value":1000}`, ""},
		{resources.Services, "dry-svc", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"dry-svc"},"spec":{"ports":[{"port":80}]}}`,
			`{"status":{"loadBalancer":{"ingress":[{"ip":"10.0.0.1"}]}}}`},
		{resources.Endpoints, "dry-ep", `{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"dry-ep"}}`, ""},
		{resources.EndpointSlices, "dry-eps", `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"dry-eps"},"addressType":"IPv4","endpoints":[]}`, ""},
		{resources.NetworkPolicies, "dry-np", `{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"dry-np"},"spec":{"podSelector":{}}}`, ""},
		{resources.PodDisruptionBudgets, "dry-pdb", `{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"dry-pdb"},"spec":{"minAvailable":1}}`,
			`{"status":{"currentHealthy":1}}`},
		{resources.Deployments, "dry-deploy", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"dry-deploy"},"spec":{"selector":{"matchLabels":{"app":"d"}},"template":{"metadata":{"labels":{"app":"d"}},"spec":{"containers":[{"name":"c","image":"busybox:1.36"}]}}}}`,
			`{"status":{"replicas":1}}`},
		{resources.StorageClasses, "dry-sc", `{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"dry-sc"},"provisioner":"example.com/p"}`, ""},
		{resources.CSIDrivers, "dry.csi.example.com", `{"apiVersion":"storage.k8s.io/v1","kind":"CSIDriver","metadata":{"name":"dry.csi.example.com"},"spec":{}}`, ""},
		{resources.CustomResourceDefinitions, "widgets.example.com", `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.example.com"},"spec":{"group":"example.com","names":{"plural":"widgets","kind":"Widget"},"scope":"Namespaced","versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object"}}}]}}`, ""},
		{resources.ValidatingWebhookConfigurations, "dry-vwc", `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"dry-vwc"}}`, ""},
		{resources.Roles, "dry-role", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"dry-role"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]}`, ""},
		{resources.ClusterRoles, "dry-crole", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"dry-crole"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]}`, ""},
		{resources.RoleBindings, "dry-rb", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"dry-rb"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},"subjects":[{"kind":"ServiceAccount","name":"default","namespace":"default"}]}`, ""},
		{resources.ClusterRoleBindings, "dry-crb", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"dry-crb"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},"subjects":[{"kind":"ServiceAccount","name":"default","namespace":"default"}]}`, ""},
		{resources.MutatingWebhookConfigurations, "dry-mwc", `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingWebhookConfiguration","metadata":{"name":"dry-mwc"}}`, ""},
	}
}

// TestDryRunEveryKindAndVerb: for every served kind and every write verb,
// dryRun=All stores nothing (etcd's revision and the stored object stay as
// they were) and answers exactly what the same request without dryRun then
// answers, but for the uid a create makes and the resourceVersion a write
// makes — as kube-apiserver answers `kubectl --dry-run=server`.
func TestDryRunEveryKindAndVerb(t *testing.T) {
	now := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	e := newEnv(t, func(c *Config) { c.Now = func() time.Time { return now } })
	kinds := dryRunKinds(t)
	if len(kinds) != len(resources.All()) {
		t.Fatalf("%d kinds tested, %d served: add the new kind", len(kinds), len(resources.All()))
	}
	for _, k := range kinds {
		t.Run(k.r.Name, func(t *testing.T) {
			coll := collectionPath(k.r)
			item := coll + "/" + k.name
			sep := func(p string) string {
				if strings.Contains(p, "?") {
					return p + "&dryRun=All"
				}
				return p + "?dryRun=All"
			}
			// same sends r with dryRun=All, checks that nothing was stored,
			// then sends it for real and compares the answers.
			same := func(what string, r req, code int) {
				t.Helper()
				before := e.etcdRevision(t)
				stored := e.get(item)
				dr := r
				dr.path = sep(r.path)
				dry := e.do(dr)
				if dry.code != code {
					t.Fatalf("dry-run %s: code %d, want %d: %s", what, dry.code, code, dry.body)
				}
				if after := e.etcdRevision(t); after != before {
					t.Errorf("dry-run %s wrote to etcd: revision %d -> %d", what, before, after)
				}
				if now := e.get(item); now.code != stored.code || string(now.body) != string(stored.body) {
					t.Errorf("dry-run %s changed the stored object:\n%s\n->\n%s", what, stored.body, now.body)
				}
				real := e.do(r)
				if real.code != code {
					t.Fatalf("%s: code %d, want %d: %s", what, real.code, code, real.body)
				}
				if d, w := normalized(t, dry.body), normalized(t, real.body); !reflect.DeepEqual(d, w) {
					t.Errorf("dry-run %s answered\n%s\nthe write answered\n%s", what, toJSONString(t, d), toJSONString(t, w))
				}
			}
			same("create", req{method: "POST", path: coll, body: k.body}, http.StatusCreated)
			same("create of a taken name", req{method: "POST", path: coll, body: k.body}, http.StatusConflict)

			var cur map[string]any
			e.get(item).must(t, http.StatusOK, &cur)
			md := cur["metadata"].(map[string]any)
			md["labels"] = map[string]any{"dry": "run"}
			same("update", req{method: "PUT", path: item, body: toJSONString(t, cur)}, http.StatusOK)
			same("merge patch", req{method: "PATCH", path: item, contentType: "application/merge-patch+json",
				body: `{"metadata":{"labels":{"m":"p"}}}`}, http.StatusOK)
			same("strategic merge patch", req{method: "PATCH", path: item, contentType: "application/strategic-merge-patch+json",
				body: `{"metadata":{"annotations":{"s":"p"}}}`}, http.StatusOK)
			same("JSON patch", req{method: "PATCH", path: item, contentType: "application/json-patch+json",
				body: `[{"op":"add","path":"/metadata/labels/j","value":"p"}]`}, http.StatusOK)
			applied := strings.Replace(k.body, `"metadata":{`, `"metadata":{"labels":{"a":"s"},`, 1)
			same("server-side apply", req{method: "PATCH", path: item + "?fieldManager=dry-test&force=true",
				contentType: "application/apply-patch+yaml", body: applied}, http.StatusOK)
			if k.statusPatch != "" {
				same("status patch", req{method: "PATCH", path: item + "/status", contentType: "application/merge-patch+json",
					body: k.statusPatch}, http.StatusOK)
			}
			if k.r.Namespaced {
				before := e.etcdRevision(t)
				e.do(req{method: "DELETE", path: coll + "?dryRun=All&labelSelector=dry%3Drun"}).must(t, http.StatusOK, nil)
				if after := e.etcdRevision(t); after != before {
					t.Errorf("dry-run deletecollection wrote to etcd: revision %d -> %d", before, after)
				}
				e.get(item).must(t, http.StatusOK, nil)
			}
			same("delete", req{method: "DELETE", path: item}, http.StatusOK)
		})
	}

	// A server-side apply that creates: 201, nothing stored.
	before := e.etcdRevision(t)
	var out map[string]any
	e.do(req{method: "PATCH", path: dsPath + "/applied?fieldManager=m&dryRun=All", contentType: "application/apply-patch+yaml",
		body: toJSONString(t, newDS("applied"))}).must(t, http.StatusCreated, &out)
	if after := e.etcdRevision(t); after != before {
		t.Errorf("dry-run apply-create wrote to etcd: revision %d -> %d", before, after)
	}
	e.get(dsPath+"/applied").must(t, http.StatusNotFound, nil)
}

// etcdRevision is etcd's current revision: any write moves it.
func (e *env) etcdRevision(t testing.TB) int64 {
	t.Helper()
	res, err := e.st.Client().Get(testCtx(t), "/everynode-dry-run-probe")
	if err != nil {
		t.Fatal(err)
	}
	return res.Header.Revision
}

// collectionPath is r's collection in the default namespace (or cluster-wide).
func collectionPath(r *resources.Resource) string {
	p := groupVersionPath(r.GroupVersion())
	if r.Namespaced {
		p += "/namespaces/default"
	}
	return p + "/" + r.Name
}

// normalized is a response body without what only a stored write has: the
// resourceVersion, the uid a create makes, and managedFields' times.
func normalized(t testing.TB, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "resourceVersion")
		delete(md, "uid")
		mfs, _ := md["managedFields"].([]any)
		for _, mf := range mfs {
			delete(mf.(map[string]any), "time") // the field manager's own clock, to the second
		}
	}
	// A Service's cluster IP is picked at random by each create, dry run
	// or not, as kube-apiserver's allocator does: compare that there is one.
	if spec, ok := m["spec"].(map[string]any); ok && m["kind"] == "Service" {
		if ip, _ := spec["clusterIP"].(string); strings.HasPrefix(ip, "10.43.") {
			spec["clusterIP"], spec["clusterIPs"] = "<allocated>", "<allocated>"
		}
	}
	return m
}
