package apiserver

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// corpusFile is a published manifest of the shared test corpus (kept beside
// the repository, unchanged from upstream).
func corpusFile(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join("..", "..", "shared", "corpus", name)
	if _, err := filepath.Abs(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// warnings are the "Warning: " lines kubectl printed on stderr.
func warnings(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if w, ok := strings.CutPrefix(l, "Warning: "); ok {
			out = append(out, w)
		}
	}
	return out
}

// TestKubectlCorpusStoredKinds: real kubectl applies two published manifests
// unchanged (a Deployment, Services, ConfigMaps and DaemonSets; client-side
// validation on, as by default), prints for each stored-only object the
// Warning that everynode does not act on it, reapplies them unchanged without
// a write, and prints the stored kinds with kube-apiserver's columns.
func TestKubectlCorpusStoredKinds(t *testing.T) {
	k := newKubectlEnv(t)
	if err := k.s.EnsurePriorityClasses(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	otel := corpusFile(t, "otel-collector-agent.yaml")
	r := k.run("", nil, "apply", "-f", otel)
	if r.code != 0 {
		t.Fatalf("apply %s: %d\n%s\n%s", otel, r.code, r.out, r.err)
	}
	wantContains(t, r.out, "configmap/otel-agent-conf created", "daemonset.apps/otel-agent created",
		"configmap/otel-collector-conf created", "service/otel-collector created", "deployment.apps/otel-collector created")
	want := []string{
		"everynode stores services but does not act on them: a cluster IP is allocated but no traffic is routed to it",
		"everynode stores deployments.apps but does not act on them: no ReplicaSets or pods are created for it",
	}
	if got := warnings(r.err); !slices.Equal(got, want) {
		t.Errorf("warnings %q, want %q\nstderr:\n%s", got, want, r.err)
	}
	// Reapplied: nothing changes. kubectl still sends the Deployment a patch
	// (and says "configured"), as it does against kube-apiserver, because
	// the file's `cpu: 1` is a number and the stored quantity the string "1";
	// the server finds nothing to change and keeps the resourceVersion.
	rv := k.get(resources.Deployments, "default", "otel-collector").GetResourceVersion()
	r = k.run("", nil, "apply", "-f", otel)
	wantContains(t, r.out, "service/otel-collector unchanged", "daemonset.apps/otel-agent unchanged",
		"deployment.apps/otel-collector configured")
	if r.code != 0 || !slices.Equal(warnings(r.err), want[1:]) {
		t.Errorf("reapply: %d, stderr %s", r.code, r.err)
	}
	if got := k.get(resources.Deployments, "default", "otel-collector").GetResourceVersion(); got != rv {
		t.Errorf("reapply wrote the Deployment: resourceVersion %s, was %s", got, rv)
	}

	dcgm := corpusFile(t, "dcgm-exporter.yaml")
	r = k.run("", nil, "apply", "-f", dcgm)
	if r.code != 0 {
		t.Fatalf("apply %s: %d\n%s\n%s", dcgm, r.code, r.out, r.err)
	}
	wantContains(t, r.out, "daemonset.apps/dcgm-exporter created", "service/dcgm-exporter created")
	if got := warnings(r.err); len(got) != 1 || !strings.HasPrefix(got[0], "everynode stores services ") {
		t.Errorf("dcgm warnings %q", got)
	}

	out := noAge(k.ok("get", "svc", "-o", "wide"))
	wantContains(t, out, "NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) SELECTOR")
	// The cluster IP kube-apiserver would allocate, from the service range.
	if !regexp.MustCompile(`dcgm-exporter ClusterIP 10\.43\.\d+\.\d+ <none> 9400/TCP app.kubernetes.io/name=dcgm-exporter`).MatchString(out) {
		t.Errorf("dcgm-exporter's row:\n%s", out)
	}
	out = noAge(k.ok("get", "deploy"))
	wantContains(t, out, "NAME READY UP-TO-DATE AVAILABLE", "otel-collector 0/1 0 0")
	out = noAge(k.ok("get", "pc"))
	wantContains(t, out, "NAME VALUE GLOBAL-DEFAULT PREEMPTIONPOLICY",
		"system-cluster-critical 2000000000 false PreemptLowerPriority",
		"system-node-critical 2000001000 false PreemptLowerPriority")
	out = k.ok("get", "all")
	wantContains(t, out, "service/otel-collector", "deployment.apps/otel-collector", "daemonset.apps/dcgm-exporter")
}

// unknownKindManifest holds a kind no server serves.
const unknownKindManifest = `apiVersion: example.com/v1
kind: Widget
metadata:
  name: w
  namespace: default
spec: {}
`

// TestKubectlUnknownKind: an object of a kind everynode does not serve gets
// kubectl's usual "no matches for kind" error and nothing else happens.
func TestKubectlUnknownKind(t *testing.T) {
	k := newKubectlEnv(t)
	path := writeFile(t, "widget.yaml", unknownKindManifest)
	errOut := k.fails("", "apply", "-f", path)
	wantContains(t, errOut, `no matches for kind "Widget" in version "example.com/v1"`)
}

// validatedManifest holds a ServiceAccount, a Service and a PriorityClass, as
// published manifests do (ClusterRoleBindings are served by the RBAC kinds).
const validatedManifest = `apiVersion: v1
kind: ServiceAccount
metadata:
  name: exporter
  namespace: kube-system
---
apiVersion: v1
kind: Service
metadata:
  name: exporter
  namespace: kube-system
spec:
  selector: {app: exporter}
  ports:
  - {name: metrics, port: 9100, targetPort: metrics}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: exporter-critical
value: 1000000
description: node exporters
`

// TestKubectlValidateExplain: client-side validation (true and strict)
// accepts a manifest of served kinds and rejects an unknown field the way
// kubectl does; kubectl explain reads the served schemas, stored-only kinds
// included; api-resources -o wide shows each resource's verbs and
// categories.
func TestKubectlValidateExplain(t *testing.T) {
	k := newKubectlEnv(t)
	path := writeFile(t, "exporter.yaml", validatedManifest)
	for _, v := range []string{"--validate=true", "--validate=strict"} {
		out := k.ok("apply", v, "-f", path)
		wantContains(t, out, "serviceaccount/exporter", "service/exporter", "priorityclass.scheduling.k8s.io/exporter-critical")
	}
	bad := writeFile(t, "bad.yaml", strings.Replace(validatedManifest, "  selector: {app: exporter}", "  selectr: {app: exporter}", 1))
	errOut := k.fails("", "apply", "--validate=strict", "-f", bad)
	wantContains(t, errOut, `unknown field "spec.selectr"`)

	out := k.ok("explain", "daemonset.spec.updateStrategy")
	wantContains(t, out, "KIND:       DaemonSet", "FIELD: updateStrategy <DaemonSetUpdateStrategy>", "rollingUpdate\t<RollingUpdateDaemonSet>")
	out = k.ok("explain", "svc.spec.ports")
	wantContains(t, out, "KIND:       Service", "FIELD: ports <[]ServicePort>", "port\t<integer> -required-")
	out = k.ok("explain", "crd.spec.versions")
	wantContains(t, out, "GROUP:      apiextensions.k8s.io", "KIND:       CustomResourceDefinition")

	wide := k.ok("api-resources", "-o", "wide")
	for _, row := range []string{
		"services svc v1 true Service create,delete,deletecollection,get,list,patch,update,watch all",
		"deployments deploy apps/v1 true Deployment create,delete,deletecollection,get,list,patch,update,watch all",
		"customresourcedefinitions crd,crds apiextensions.k8s.io/v1 false CustomResourceDefinition create,delete,deletecollection,get,list,patch,update,watch api-extensions",
		"priorityclasses pc scheduling.k8s.io/v1 false PriorityClass create,delete,deletecollection,get,list,patch,update,watch",
	} {
		if !slices.ContainsFunc(lines(wide), func(f []string) bool { return strings.Join(f, " ") == row }) {
			t.Errorf("no row %q in\n%s", row, wide)
		}
	}
}

// TestKubectlGetStoredKinds: kubectl prints every new kind with
// kube-apiserver's columns, the fields nothing fills in as upstream prints
// them empty.
func TestKubectlGetStoredKinds(t *testing.T) {
	k := newKubectlEnv(t)
	for _, obj := range storedSamples() {
		if _, err := k.c.Create(testCtx(t), obj, client.WriteOptions{}); err != nil {
			t.Fatalf("create %s: %v", obj.GetName(), err)
		}
	}
	for kind, want := range map[string][]string{
		"pc":                              {"NAME VALUE GLOBAL-DEFAULT PREEMPTIONPOLICY", "high 1000 false PreemptLowerPriority"},
		"svc":                             {"NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S)", "web ClusterIP 10.43.0.10 <none> 80/TCP"},
		"ep":                              {"NAME ENDPOINTS", "web 10.0.0.1:80"},
		"endpointslices":                  {"NAME ADDRESSTYPE PORTS ENDPOINTS", "web-1 IPv4 80 10.0.0.1"},
		"netpol":                          {"NAME POD-SELECTOR", "deny app=web"},
		"pdb":                             {"NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS", "web 1 N/A 0"},
		"deploy":                          {"NAME READY UP-TO-DATE AVAILABLE", "web 0/1 0 0"},
		"sc":                              {"NAME PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE ALLOWVOLUMEEXPANSION", "fast csi.example.com Delete Immediate false"},
		"csidrivers":                      {"NAME ATTACHREQUIRED PODINFOONMOUNT STORAGECAPACITY TOKENREQUESTS REQUIRESREPUBLISH MODES", "csi.example.com true false false <unset> false Persistent"},
		"crd":                             {"NAME CREATED AT", "widgets.example.com"},
		"validatingwebhookconfigurations": {"NAME WEBHOOKS", "check 1"},
		"mutatingwebhookconfigurations":   {"NAME WEBHOOKS", "mutate 1"},
	} {
		out := noAge(k.ok("get", kind))
		wantContains(t, out, want...)
	}
}
