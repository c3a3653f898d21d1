package apiserver

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Node credentials of the node authorization suite.
const (
	n1Token = "node-n1-token"
	n2Token = "node-n2-token"
)

// nodeEnv is an API server with the node authorizer, nodes n1 and n2, and
// in namespace default a pod of each node referring to a Secret, a
// ConfigMap and a ServiceAccount of its own (mine: n1, theirs: n2).
func nodeEnv(t *testing.T, opts ...func(*Config)) *env {
	t.Helper()
	e := newEnv(t, append([]func(*Config){func(c *Config) {
		c.Authorizer = NewNodeRestriction(StoreGraph(c.Store))
		c.Authenticator = tokens{
			adminToken: {Name: "admin", Groups: []string{mastersGroup}},
			n1Token:    {Name: "system:node:n1", Groups: []string{nodesGroup}},
			n2Token:    {Name: "system:node:n2", Groups: []string{nodesGroup}},
		}
	}}, opts...)...)
	for _, n := range []string{"n1", "n2"} {
		node := &corev1.Node{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"zone": "a"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "edge", Effect: corev1.TaintEffectNoSchedule}}},
		}
		e.do(req{method: "POST", path: "/api/v1/nodes", body: toJSON(t, node)}).must(t, http.StatusCreated, nil)
	}
	for name, node := range map[string]string{"mine": "n1", "theirs": "n2"} {
		for path, kind := range map[string]string{secretPath: "Secret", cmPath: "ConfigMap", saPath: "ServiceAccount"} {
			obj := map[string]any{"apiVersion": "v1", "kind": kind, "metadata": map[string]any{"name": strings.ToLower(kind) + "-" + name}}
			e.do(req{method: "POST", path: path, body: toJSON(t, obj)}).must(t, http.StatusCreated, nil)
		}
		p := newPod(name, node)
		p.Spec.ServiceAccountName = "serviceaccount-" + name
		p.Spec.Containers[0].Env = []corev1.EnvVar{
			{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "secret-" + name}, Key: "k"}}},
			{Name: "C", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "configmap-" + name}, Key: "k"}}},
		}
		e.createPod(p)
	}
	return e
}

// mirrorPod is a mirror pod n1 may create once mutate leaves it so.
func (e *env) mirrorPod(mutate func(*corev1.Pod)) string {
	e.t.Helper()
	var node corev1.Node
	e.get("/api/v1/nodes/n1").must(e.t, http.StatusOK, &node)
	p := newPod("static-n1", "n1")
	p.Annotations = map[string]string{mirrorPodAnnotation: "hash"}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: node.UID, Controller: ptr.To(true)}}
	if mutate != nil {
		mutate(p)
	}
	return toJSON(e.t, p)
}

// snapshot is every stored object the suite's attacks aim at, as the admin
// reads them.
func (e *env) snapshot() string {
	e.t.Helper()
	var b bytes.Buffer
	for _, p := range []string{"/api/v1/nodes", "/api/v1/pods", secretPath, cmPath, saPath, "/api/v1/namespaces", dsPath} {
		r := e.get(p).must(e.t, http.StatusOK, nil)
		b.Write(r.body)
	}
	return b.String()
}

const mergePatch = "application/merge-patch+json"

// TestNodeAuthorizerAttacks is the node authorizer and NodeRestriction
// suite, by attack (docs/security.md §3): each request a node credential
// could make before is refused with kube-apiserver's code and message, and
// no stored object changes.
func TestNodeAuthorizerAttacks(t *testing.T) {
	e := nodeEnv(t)
	const user = `User "system:node:n1"`
	cases := []struct {
		name string
		r    req
		msg  string
	}{
		// Pods of other nodes: reads (AuthorizeNodeWithSelectors).
		{"list all pods", req{method: "GET", path: "/api/v1/pods"},
			`pods is forbidden: ` + user + ` cannot list resource "pods" in API group "" at the cluster scope: can only list/watch pods with spec.nodeName field selector`},
		{"list pods of a namespace", req{method: "GET", path: podsPath},
			`pods is forbidden: ` + user + ` cannot list resource "pods" in API group "" in the namespace "default": can only list/watch pods with spec.nodeName field selector`},
		{"list another node's pods", req{method: "GET", path: "/api/v1/pods?fieldSelector=spec.nodeName%3Dn2"},
			`pods is forbidden: ` + user + ` cannot list resource "pods" in API group "" at the cluster scope: can only list/watch pods with spec.nodeName field selector`},
		{"watch all pods", req{method: "GET", path: "/api/v1/pods?watch=true"},
			`pods is forbidden: ` + user + ` cannot watch resource "pods" in API group "" at the cluster scope: can only list/watch pods with spec.nodeName field selector`},
		{"get another node's pod", req{method: "GET", path: podsPath + "/theirs"},
			`pods "theirs" is forbidden: ` + user + ` cannot get resource "pods" in API group "" in the namespace "default": no relationship found between node 'n1' and this object`},
		{"watch another node's pod by name", req{method: "GET", path: podsPath + "?watch=true&fieldSelector=metadata.name%3Dtheirs"},
			`pods is forbidden: ` + user + ` cannot watch resource "pods" in API group "" in the namespace "default": no relationship found between node 'n1' and this object`},
		{"another node's pod logs", req{method: "GET", path: podsPath + "/theirs/log"},
			`pods "theirs" is forbidden: ` + user + ` cannot get resource "pods/log" in API group "" in the namespace "default"`},
		{"own pod logs through the API", req{method: "GET", path: podsPath + "/mine/log"},
			`pods "mine" is forbidden: ` + user + ` cannot get resource "pods/log" in API group "" in the namespace "default"`},
		// Nodes.
		{"list nodes", req{method: "GET", path: "/api/v1/nodes"},
			`nodes is forbidden: ` + user + ` cannot list resource "nodes" in API group "" at the cluster scope: node 'n1' cannot read all nodes, only its own Node object`},
		{"get another node", req{method: "GET", path: "/api/v1/nodes/n2"},
			`nodes "n2" is forbidden: ` + user + ` cannot get resource "nodes" in API group "" at the cluster scope: node 'n1' cannot read 'n2', only its own Node object`},
		{"patch another node", req{method: "PATCH", path: "/api/v1/nodes/n2", contentType: mergePatch, body: `{"metadata":{"labels":{"x":"y"}}}`},
			`nodes "n2" is forbidden: node "n1" is not allowed to modify node "n2"`},
		{"another node's status", req{method: "PATCH", path: "/api/v1/nodes/n2/status", contentType: mergePatch, body: `{"status":{"phase":"Terminated"}}`},
			`nodes "n2" is forbidden: node "n1" is not allowed to modify node "n2"`},
		{"delete another node", req{method: "DELETE", path: "/api/v1/nodes/n2"},
			`nodes "n2" is forbidden: node "n1" is not allowed to modify node "n2"`},
		{"create another node", req{method: "POST", path: "/api/v1/nodes", body: `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n3"}}`},
			`nodes "n3" is forbidden: node "n1" is not allowed to modify node "n3"`},
		// NodeRestriction: labels and taints.
		{"node-role label", req{method: "PATCH", path: "/api/v1/nodes/n1", contentType: mergePatch, body: `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`},
			`nodes "n1" is forbidden: is not allowed to modify labels: node-role.kubernetes.io/control-plane`},
		{"node-restriction label", req{method: "PATCH", path: "/api/v1/nodes/n1", contentType: mergePatch, body: `{"metadata":{"labels":{"node-restriction.kubernetes.io/secure":"true"}}}`},
			`nodes "n1" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/secure`},
		{"subdomain of node-restriction", req{method: "PATCH", path: "/api/v1/nodes/n1", contentType: mergePatch, body: `{"metadata":{"labels":{"a.node-restriction.kubernetes.io/b":"c","k8s.io/x":"y"}}}`},
			`nodes "n1" is forbidden: is not allowed to modify labels: a.node-restriction.kubernetes.io/b, k8s.io/x`},
		{"remove own taints", req{method: "PATCH", path: "/api/v1/nodes/n1", contentType: mergePatch, body: `{"spec":{"taints":null}}`},
			`nodes "n1" is forbidden: node "n1" is not allowed to modify taints`},
		{"add a taint", req{method: "PATCH", path: "/api/v1/nodes/n1", contentType: "application/json-patch+json", body: `[{"op":"add","path":"/spec/taints/-","value":{"key":"k","effect":"NoSchedule"}}]`},
			`nodes "n1" is forbidden: node "n1" is not allowed to modify taints`},
		// NodeRestriction: pods.
		{"delete another node's pod", req{method: "DELETE", path: podsPath + "/theirs"},
			`pods "theirs" is forbidden: node "n1" can only delete pods with spec.nodeName set to itself`},
		{"another node's pod status", req{method: "PATCH", path: podsPath + "/theirs/status", contentType: mergePatch, body: `{"status":{"phase":"Failed"}}`},
			`pods "theirs" is forbidden: node "n1" can only update pod status for pods with spec.nodeName set to itself`},
		{"update own pod spec", req{method: "PATCH", path: podsPath + "/mine", contentType: mergePatch, body: `{"spec":{"activeDeadlineSeconds":5}}`},
			`pods "mine" is forbidden: ` + user + ` cannot patch resource "pods" in API group "" in the namespace "default"`},
		{"delete all pods", req{method: "DELETE", path: podsPath},
			`pods is forbidden: ` + user + ` cannot deletecollection resource "pods" in API group "" in the namespace "default"`},
		{"create a plain pod", req{method: "POST", path: podsPath, body: toJSON(t, newPod("plain", "n1"))},
			`pods "plain" is forbidden: pod does not have "kubernetes.io/config.mirror" annotation, node "n1" can only create mirror pods`},
		{"mirror pod on another node", req{method: "POST", path: podsPath, body: e.mirrorPod(func(p *corev1.Pod) { p.Spec.NodeName = "n2" })},
			`pods "static-n1" is forbidden: node "n1" can only create pods with spec.nodeName set to itself`},
		{"mirror pod owned by a DaemonSet", req{method: "POST", path: podsPath, body: e.mirrorPod(func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "u", Controller: ptr.To(true)}}
		})}, `pods "static-n1" is forbidden: node "n1" can only create pods with an owner reference set to itself`},
		{"mirror pod without owner", req{method: "POST", path: podsPath, body: e.mirrorPod(func(p *corev1.Pod) { p.OwnerReferences = nil })},
			`pods "static-n1" is forbidden: node "n1" can only create pods with an owner reference set to itself`},
		{"mirror pod with a second owner", req{method: "POST", path: podsPath, body: e.mirrorPod(func(p *corev1.Pod) {
			p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "u"})
		})}, `pods "static-n1" is forbidden: node "n1" can only create pods with a single owner reference set to itself`},
		{"mirror pod owner not controller", req{method: "POST", path: podsPath, body: e.mirrorPod(func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil })},
			`pods "static-n1" is forbidden: node "n1" can only create pods with a controller owner reference set to itself`},
		{"mirror pod owned by an old Node", req{method: "POST", path: podsPath, body: e.mirrorPod(func(p *corev1.Pod) { p.OwnerReferences[0].UID = "old" })},
			`pods "static-n1" is forbidden: node n1 UID mismatch: expected old got `},
		{"mirror pod with a ServiceAccount", req{method: "POST", path: podsPath, body: e.mirrorPod(func(p *corev1.Pod) { p.Spec.ServiceAccountName = "serviceaccount-theirs" })},
			`pods "static-n1" is forbidden: node "n1" can not create pods that reference a service account`},
		{"mirror pod with a Secret", req{method: "POST", path: podsPath, body: e.mirrorPod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "secret-theirs"}}}}
		})}, `pods "static-n1" is forbidden: node "n1" can not create pods that reference secrets`},
		{"mirror pod with a ConfigMap", req{method: "POST", path: podsPath, body: e.mirrorPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "configmap-theirs"}}}}
		})}, `pods "static-n1" is forbidden: node "n1" can not create pods that reference configmaps`},
		// What other nodes' pods refer to.
		{"another node's Secret", req{method: "GET", path: secretPath + "/secret-theirs"},
			`secrets "secret-theirs" is forbidden: ` + user + ` cannot get resource "secrets" in API group "" in the namespace "default": no relationship found between node 'n1' and this object`},
		{"list Secrets", req{method: "GET", path: secretPath},
			`secrets is forbidden: ` + user + ` cannot list resource "secrets" in API group "" in the namespace "default": No Object name found`},
		{"list Secrets everywhere", req{method: "GET", path: "/api/v1/secrets"},
			`secrets is forbidden: ` + user + ` cannot list resource "secrets" in API group "" at the cluster scope: can only read namespaced object of this type`},
		{"watch another node's Secret", req{method: "GET", path: secretPath + "?watch=true&fieldSelector=metadata.name%3Dsecret-theirs"},
			`secrets is forbidden: ` + user + ` cannot watch resource "secrets" in API group "" in the namespace "default": no relationship found between node 'n1' and this object`},
		{"write a referenced Secret", req{method: "PATCH", path: secretPath + "/secret-mine", contentType: mergePatch, body: `{"data":{"k":"eA=="}}`},
			`secrets "secret-mine" is forbidden: ` + user + ` cannot patch resource "secrets" in API group "" in the namespace "default": can only read resources of this type`},
		{"another node's ConfigMap", req{method: "GET", path: cmPath + "/configmap-theirs"},
			`configmaps "configmap-theirs" is forbidden: ` + user + ` cannot get resource "configmaps" in API group "" in the namespace "default": no relationship found between node 'n1' and this object`},
		{"another node's ServiceAccount", req{method: "GET", path: saPath + "/serviceaccount-theirs"},
			`serviceaccounts "serviceaccount-theirs" is forbidden: ` + user + ` cannot get resource "serviceaccounts" in API group "" in the namespace "default": no relationship found between node 'n1' and this object`},
		// Everything else.
		{"metrics", req{method: "GET", path: "/metrics"}, `forbidden: ` + user + ` cannot get path "/metrics"`},
		{"list DaemonSets", req{method: "GET", path: dsPath},
			`daemonsets.apps is forbidden: ` + user + ` cannot list resource "daemonsets" in API group "apps" in the namespace "default"`},
		{"create a DaemonSet", req{method: "POST", path: dsPath, body: toJSON(t, newDS("evil"))},
			`daemonsets.apps "evil" is forbidden: ` + user + ` cannot create resource "daemonsets" in API group "apps" in the namespace "default"`},
		{"list namespaces", req{method: "GET", path: "/api/v1/namespaces"},
			`namespaces is forbidden: ` + user + ` cannot list resource "namespaces" in API group "" at the cluster scope`},
	}
	before := e.snapshot()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.r.token = n1Token
			r := e.do(c.r)
			if r.code != http.StatusForbidden {
				t.Fatalf("code %d, want 403: %s", r.code, r.body)
			}
			st := r.status(t)
			if st.Reason != metav1.StatusReasonForbidden || !strings.HasPrefix(st.Message, c.msg) {
				t.Errorf("reason %s message\n%q, want\n%q", st.Reason, st.Message, c.msg)
			}
		})
	}
	if after := e.snapshot(); after != before {
		t.Errorf("the refused requests changed stored objects")
	}
}

// TestNodeAuthorizerAllows is the legitimate path of the suite: what an
// agent does for its own node still works.
func TestNodeAuthorizerAllows(t *testing.T) {
	e := nodeEnv(t)
	as := func(r req, code int, out any) resp {
		t.Helper()
		r.token = n1Token
		return e.do(r).must(t, code, out)
	}
	var pods corev1.PodList
	as(req{method: "GET", path: "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1"}, http.StatusOK, &pods)
	if len(pods.Items) != 1 || pods.Items[0].Name != "mine" {
		t.Errorf("own pods: %v", pods.Items)
	}
	as(req{method: "GET", path: podsPath + "?fieldSelector=spec.nodeName%3Dn1,metadata.namespace%3Ddefault"}, http.StatusOK, nil)
	as(req{method: "GET", path: "/api/v1/pods?watch=true&timeoutSeconds=1&fieldSelector=spec.nodeName%3Dn1"}, http.StatusOK, nil)
	as(req{method: "GET", path: podsPath + "/mine"}, http.StatusOK, nil)
	as(req{method: "GET", path: podsPath + "/missing"}, http.StatusNotFound, nil)
	as(req{method: "GET", path: "/api/v1/nodes/n1"}, http.StatusOK, nil)
	as(req{method: "GET", path: "/api/v1/nodes?fieldSelector=metadata.name%3Dn1"}, http.StatusOK, nil)
	as(req{method: "GET", path: "/api/v1/nodes/n1/status"}, http.StatusForbidden, nil)
	as(req{method: "PATCH", path: "/api/v1/nodes/n1", contentType: mergePatch,
		body: `{"metadata":{"labels":{"zone":"b","node.kubernetes.io/pool":"x","kubernetes.io/hostname":"n1"}}}`}, http.StatusOK, nil)
	as(req{method: "PATCH", path: "/api/v1/nodes/n1/status", contentType: mergePatch, body: `{"status":{"nodeInfo":{"kubeletVersion":"v1"}}}`}, http.StatusOK, nil)
	as(req{method: "PATCH", path: podsPath + "/mine/status", contentType: mergePatch, body: `{"status":{"phase":"Running"}}`}, http.StatusOK, nil)
	for _, p := range []string{secretPath + "/secret-mine", cmPath + "/configmap-mine", saPath + "/serviceaccount-mine",
		secretPath + "?fieldSelector=metadata.name%3Dsecret-mine", cmPath + "?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3Dconfigmap-mine"} {
		as(req{method: "GET", path: p}, http.StatusOK, nil)
	}
	as(req{method: "POST", path: "/api/v1/namespaces/default/events", body: `{"apiVersion":"v1","kind":"Event","metadata":{"name":"e1"},"involvedObject":{"kind":"Node","name":"n1"},"reason":"R","message":"m","type":"Normal"}`},
		http.StatusCreated, nil)
	for _, p := range []string{"/api", "/apis", "/api/v1", "/apis/apps/v1", "/openapi/v3", "/version", "/healthz"} {
		as(req{method: "GET", path: p}, http.StatusOK, nil)
	}
	as(req{method: "POST", path: podsPath, body: e.mirrorPod(nil)}, http.StatusCreated, nil)
	as(req{method: "DELETE", path: podsPath + "/static-n1"}, http.StatusOK, nil)
	// A status write cannot relabel the pod (the status strategy keeps the
	// labels; NodeRestriction would refuse it otherwise).
	var mine corev1.Pod
	as(req{method: "PATCH", path: podsPath + "/mine/status", contentType: mergePatch, body: `{"metadata":{"labels":{"app":"other"}}}`}, http.StatusOK, &mine)
	if mine.Labels["app"] != "p" {
		t.Errorf("a status write relabelled the pod: %v", mine.Labels)
	}
	as(req{method: "DELETE", path: podsPath + "/mine?gracePeriodSeconds=0"}, http.StatusOK, nil)
	as(req{method: "DELETE", path: podsPath + "/gone"}, http.StatusNotFound, nil)
	// Once its pod is gone, the node loses what the pod referred to.
	as(req{method: "GET", path: secretPath + "/secret-mine"}, http.StatusForbidden, nil)
	// The admin is not restricted.
	e.get("/api/v1/pods").must(t, http.StatusOK, nil)
	e.get("/metrics").must(t, http.StatusOK, nil)
}

// fakeGraph is a NodeGraph over fixed pods and nodes.
type fakeGraph struct {
	pods  []*corev1.Pod
	nodes map[string]*corev1.Node
}

func (g fakeGraph) Pod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	for _, p := range g.pods {
		if p.Namespace == ns && p.Name == name {
			return p, nil
		}
	}
	return nil, nil
}

func (g fakeGraph) PodsOnNode(_ context.Context, node string) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for _, p := range g.pods {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out, nil
}

func (g fakeGraph) Node(_ context.Context, name string) (*corev1.Node, error) {
	return g.nodes[name], nil
}

// TestNodeRestrictionUnserved covers the rules of requests everynode has no
// route for yet (token requests, evictions) and the checks the status
// strategy makes unreachable, on the authorizer alone.
func TestNodeRestrictionUnserved(t *testing.T) {
	mine := newPod("mine", "n1")
	mine.Namespace = "default"
	mine.Spec.ServiceAccountName = "sa-mine"
	theirs := newPod("theirs", "n2")
	theirs.Namespace = "default"
	authz := NewNodeRestriction(fakeGraph{pods: []*corev1.Pod{mine, theirs}})
	n1 := UserInfo{Name: "system:node:n1", Groups: []string{nodesGroup, authenticatedGroup}}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		a    Attributes
		msg  string // "" allows
	}{
		{"token for own pod's account", Attributes{User: n1, Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "default", Name: "sa-mine"}, ""},
		{"token for another account", Attributes{User: n1, Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "default", Name: "default"},
			`serviceaccounts "default" is forbidden: User "system:node:n1" cannot create resource "serviceaccounts/token" in API group "" in the namespace "default": no relationship found between node 'n1' and this object`},
		{"list service accounts", Attributes{User: n1, Verb: "list", Resource: "serviceaccounts", Namespace: "default"},
			`serviceaccounts is forbidden: User "system:node:n1" cannot list resource "serviceaccounts" in API group "" in the namespace "default": can only create tokens for individual service accounts`},
		{"evict own pod", Attributes{User: n1, Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "default", Name: "mine"}, ""},
		{"evict another node's pod", Attributes{User: n1, Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "default", Name: "theirs"},
			`pods "theirs" is forbidden: node n1 can only evict pods with spec.nodeName set to itself`},
		{"list Services", Attributes{User: n1, Verb: "list", Resource: "services", Namespace: "default"}, ""},
		{"write a Service", Attributes{User: n1, Verb: "create", Resource: "services", Namespace: "default", Name: "s"},
			`services "s" is forbidden: User "system:node:n1" cannot create resource "services" in API group "" in the namespace "default"`},
		{"a user that is not a node", Attributes{User: UserInfo{Name: "system:node:n1"}, Verb: "get", Resource: "pods", Namespace: "default", Name: "mine"},
			`pods "mine" is forbidden: User "system:node:n1" cannot get resource "pods" in API group "" in the namespace "default"`},
	} {
		err := authz.Authorize(ctx, c.a)
		if c.msg == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !apierrors.IsForbidden(err) || err.Error() != c.msg {
			t.Errorf("%s: %v, want 403 %q", c.name, err, c.msg)
		}
	}
	if authz.Applies(UserInfo{Name: "admin", Groups: []string{mastersGroup}}) || !authz.Applies(n1) {
		t.Error("Applies")
	}
	relabelled := mine.DeepCopy()
	relabelled.Labels = map[string]string{"app": "other"}
	status := Attributes{User: n1, Verb: "update", Resource: "pods", Subresource: "status", Namespace: "default", Name: "mine", Object: relabelled}
	if err := authz.AdmitUpdate(ctx, status, mine); err == nil || err.Error() != `pods "mine" is forbidden: node "n1" cannot update labels through pod status` {
		t.Errorf("relabel through status: %v", err)
	}
}
