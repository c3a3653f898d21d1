package apiserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/everynode/everynode/resources"
)

const (
	rbacPath = "/apis/rbac.authorization.k8s.io/v1"
	nodeTok  = "node-token"
)

// newRBACEnv is an env with the server's chain, the default policy, a user
// "someone" (userToken) and a node n1 (nodeTok).
func newRBACEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, withRBAC, func(c *Config) {
		c.Authenticator.(tokens)[nodeTok] = UserInfo{Name: "system:node:n1", Groups: []string{nodesGroup}}
	})
	if err := e.s.EnsureBootstrapPolicy(testCtx(t)); err != nil {
		t.Fatalf("EnsureBootstrapPolicy: %v", err)
	}
	return e
}

// as does r with the token tok and the extra headers (name, value pairs).
func (e *env) as(tok string, r req, headers ...string) resp {
	e.t.Helper()
	hr, err := http.NewRequest(r.method, e.srv.URL+r.path, strings.NewReader(r.body))
	if err != nil {
		e.t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+tok)
	if r.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		hr.Header.Add(headers[i], headers[i+1])
	}
	res, err := e.srv.Client().Do(hr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	var buf strings.Builder
	if _, err := io.Copy(&buf, res.Body); err != nil {
		e.t.Fatal(err)
	}
	return resp{code: res.StatusCode, header: res.Header, body: []byte(buf.String())}
}

// post creates obj at path as the admin.
func (e *env) post(path string, obj any) {
	e.t.Helper()
	e.do(req{method: "POST", path: path, body: toJSON(e.t, obj)}).must(e.t, http.StatusCreated, nil)
}

func (e *env) grant(ns, name string, subject rbacv1.Subject, rules ...rbacv1.PolicyRule) {
	e.t.Helper()
	if ns == "" {
		e.post(rbacPath+"/clusterroles", &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules})
		e.post(rbacPath+"/clusterrolebindings", &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: name}, Subjects: []rbacv1.Subject{subject}})
		return
	}
	e.post(rbacPath+"/namespaces/"+ns+"/roles", &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules})
	e.post(rbacPath+"/namespaces/"+ns+"/rolebindings", &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{Kind: "Role", Name: name}, Subjects: []rbacv1.Subject{subject}})
}

var someone = rbacv1.Subject{Kind: "User", Name: "someone"}

func wantStatus(t *testing.T, r resp, code int, msg string) {
	t.Helper()
	st := r.status(t)
	if r.code != code || st.Code != int32(code) || !strings.Contains(st.Message, msg) {
		t.Errorf("got %d %q, want %d with %q", r.code, st.Message, code, msg)
	}
}

// TestChain: masters do anything, a node keeps its node rules, everyone
// else gets what RBAC grants, non-resource paths included.
func TestChain(t *testing.T) {
	e := newRBACEnv(t)

	e.get(podsPath).must(t, http.StatusOK, nil) // admin
	wantStatus(t, e.do(req{method: "GET", path: podsPath, token: userToken}), http.StatusForbidden,
		`pods is forbidden: User "someone" cannot list resource "pods" in API group "" in the namespace "default"`)
	// Discovery through system:discovery (system:authenticated); /metrics needs a grant.
	e.do(req{method: "GET", path: "/apis", token: userToken}).must(t, http.StatusOK, nil)
	e.do(req{method: "GET", path: "/api/v1", token: userToken}).must(t, http.StatusOK, nil)
	wantStatus(t, e.do(req{method: "GET", path: "/metrics", token: userToken}), http.StatusForbidden,
		`forbidden: User "someone" cannot get path "/metrics"`)

	e.grant("default", "reader", someone, rbacv1.PolicyRule{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"pods"}})
	e.do(req{method: "GET", path: podsPath, token: userToken}).must(t, http.StatusOK, nil)
	wantStatus(t, e.do(req{method: "GET", path: "/api/v1/namespaces/kube-system/pods", token: userToken}), http.StatusForbidden,
		`in the namespace "kube-system"`)
	e.grant("", "metrics", someone, rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}})
	e.do(req{method: "GET", path: "/metrics", token: userToken}).must(t, http.StatusOK, nil)

	// A node reads its pods by its node rules, and RBAC grants it nothing more.
	e.do(req{method: "GET", path: podsPath + "?fieldSelector=spec.nodeName%3Dn1", token: nodeTok}).must(t, http.StatusOK, nil)
	wantStatus(t, e.do(req{method: "GET", path: podsPath, token: nodeTok}), http.StatusForbidden,
		"can only list/watch pods with spec.nodeName field selector")
	e.grant("", "node-extra", rbacv1.Subject{Kind: "Group", Name: nodesGroup},
		rbacv1.PolicyRule{Verbs: []string{"create"}, APIGroups: []string{""}, Resources: []string{"configmaps"}})
	cm := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`
	wantStatus(t, e.do(req{method: "POST", path: "/api/v1/namespaces/default/configmaps", body: cm, token: nodeTok}),
		http.StatusForbidden, `User "system:node:n1" cannot create resource "configmaps"`)
	e.do(req{method: "GET", path: "/apis", token: nodeTok}).must(t, http.StatusOK, nil)
}

// TestImpersonation: impersonating needs the impersonate verb; the request
// then runs as the impersonated user, a service account with its groups.
func TestImpersonation(t *testing.T) {
	e := newRBACEnv(t)
	list := req{method: "GET", path: podsPath}
	wantStatus(t, e.as(userToken, list, "Impersonate-User", "alice"), http.StatusForbidden,
		`users "alice" is forbidden: User "someone" cannot impersonate resource "users" in API group "" at the cluster scope`)
	e.grant("", "impersonator", someone, rbacv1.PolicyRule{Verbs: []string{"impersonate"}, APIGroups: []string{""}, Resources: []string{"users"}})
	wantStatus(t, e.as(userToken, list, "Impersonate-User", "alice"), http.StatusForbidden, `User "alice" cannot list resource "pods"`)
	wantStatus(t, e.as(userToken, list, "Impersonate-User", "alice", "Impersonate-Group", "ops"), http.StatusForbidden,
		`groups "ops" is forbidden: User "someone" cannot impersonate resource "groups"`)

	// The admin impersonates a service account; its groups make a group binding apply.
	e.grant("default", "sa-reader", rbacv1.Subject{Kind: "Group", Name: "system:serviceaccounts:default"},
		rbacv1.PolicyRule{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"pods"}})
	e.as(adminToken, list, "Impersonate-User", "system:serviceaccount:default:bot").must(t, http.StatusOK, nil)
	wantStatus(t, e.as(adminToken, req{method: "GET", path: "/api/v1/nodes"}, "Impersonate-User", "system:serviceaccount:default:bot"),
		http.StatusForbidden, `User "system:serviceaccount:default:bot" cannot list resource "nodes"`)
}

// TestAccessReviews: SelfSubjectAccessReview answers for the caller,
// SubjectAccessReview for anyone but only to those allowed to create it,
// SelfSubjectRulesReview lists the caller's rules; a review naming neither
// attributes is a 422.
func TestAccessReviews(t *testing.T) {
	e := newRBACEnv(t)
	e.grant("default", "reader", someone, rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}})
	ssar := func(verb string) authorizationv1.SelfSubjectAccessReview {
		t.Helper()
		body := toJSON(t, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "default", Verb: verb, Resource: "pods"}}})
		var out authorizationv1.SelfSubjectAccessReview
		e.do(req{method: "POST", path: "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body: body, token: userToken}).
			must(t, http.StatusCreated, &out)
		return out
	}
	if got := ssar("get"); !got.Status.Allowed || !strings.Contains(got.Status.Reason, `RBAC: allowed by RoleBinding "reader/default" of Role "reader" to User "someone"`) {
		t.Errorf("get: %+v", got.Status)
	}
	if got := ssar("delete"); got.Status.Allowed || got.Kind != "SelfSubjectAccessReview" || got.APIVersion != "authorization.k8s.io/v1" {
		t.Errorf("delete: %+v %+v", got.TypeMeta, got.Status)
	}
	wantStatus(t, e.do(req{method: "POST", path: "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body: `{"spec":{}}`, token: userToken}),
		http.StatusUnprocessableEntity, "exactly one of nonResourceAttributes or resourceAttributes must be specified")

	sar := toJSON(t, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "someone",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "pods"}}})
	wantStatus(t, e.do(req{method: "POST", path: "/apis/authorization.k8s.io/v1/subjectaccessreviews", body: sar, token: userToken}),
		http.StatusForbidden, `subjectaccessreviews.authorization.k8s.io is forbidden: User "someone" cannot create resource "subjectaccessreviews"`)
	var out authorizationv1.SubjectAccessReview
	e.do(req{method: "POST", path: "/apis/authorization.k8s.io/v1/subjectaccessreviews", body: sar}).must(t, http.StatusCreated, &out)
	if !out.Status.Allowed {
		t.Errorf("SubjectAccessReview for someone: %+v", out.Status)
	}

	var rules authorizationv1.SelfSubjectRulesReview
	body := toJSON(t, &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "default"}})
	e.do(req{method: "POST", path: "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", body: body, token: userToken}).
		must(t, http.StatusCreated, &rules)
	found := false
	for _, r := range rules.Status.ResourceRules {
		found = found || (len(r.Resources) == 1 && r.Resources[0] == "pods" && len(r.Verbs) == 1 && r.Verbs[0] == "get")
	}
	if !found {
		t.Errorf("rules review lacks get pods: %+v", rules.Status)
	}
}

// TestEscalation: upstream's escalation rules, by the user "someone" who
// may write roles and bindings but holds little.
func TestEscalation(t *testing.T) {
	e := newRBACEnv(t)
	e.grant("", "rbac-writer", someone, rbacv1.PolicyRule{Verbs: []string{"create", "update"}, APIGroups: []string{rbacv1.GroupName},
		Resources: []string{"roles", "rolebindings", "clusterroles", "clusterrolebindings"}})
	post := func(path string, obj any) resp {
		return e.do(req{method: "POST", path: rbacPath + path, body: toJSON(t, obj), token: userToken})
	}
	mine := rbacv1.PolicyRule{Verbs: []string{"create"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles"}}

	// A role within its rights is fine, one beyond them is not.
	post("/namespaces/default/roles", &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "ok"}, Rules: []rbacv1.PolicyRule{mine}}).
		must(t, http.StatusCreated, nil)
	wantStatus(t, post("/clusterroles", &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "big"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"secrets"}}}}),
		http.StatusForbidden, `clusterroles.rbac.authorization.k8s.io "big" is forbidden: user "someone" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`)
	// An aggregationRule needs full authority.
	agg := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "agg"}, AggregationRule: &rbacv1.AggregationRule{
		ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"x": "y"}}}}}
	wantStatus(t, post("/clusterroles", agg), http.StatusForbidden, "must have cluster-admin privileges to use the aggregationRule")

	// Bindings: to a role it does not hold, refused; to one it holds, fine;
	// to a missing role, NotFound (the admin may).
	bind := func(name, kind, role string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: rbacv1.RoleRef{Kind: kind, Name: role},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: "bob"}}}
	}
	wantStatus(t, post("/namespaces/default/rolebindings", bind("adm", "ClusterRole", "cluster-admin")), http.StatusForbidden,
		`rolebindings.rbac.authorization.k8s.io "adm" is forbidden: user "someone"`)
	post("/namespaces/default/rolebindings", bind("fine", "Role", "ok")).must(t, http.StatusCreated, nil)
	wantStatus(t, post("/namespaces/default/rolebindings", bind("dangling", "Role", "missing")), http.StatusNotFound,
		`role.rbac.authorization.k8s.io "missing" not found`)
	e.post(rbacPath+"/namespaces/default/rolebindings", bind("dangling", "Role", "missing"))

	// With bind on cluster-admin, it may bind it without holding it; with
	// escalate on clusterroles, it may write any rules.
	e.grant("", "binder", someone, rbacv1.PolicyRule{Verbs: []string{"bind", "escalate"}, APIGroups: []string{rbacv1.GroupName},
		Resources: []string{"clusterroles"}, ResourceNames: []string{"cluster-admin", "big"}})
	post("/namespaces/default/rolebindings", bind("adm", "ClusterRole", "cluster-admin")).must(t, http.StatusCreated, nil)
	post("/clusterroles", &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "big"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"secrets"}}}}).
		must(t, http.StatusCreated, nil)

	// Nothing refused was stored.
	for _, k := range []struct {
		r        *resources.Resource
		ns, name string
	}{{resources.ClusterRoles, "", "agg"}} {
		if _, err := e.st.Get(testCtx(t), k.r, k.ns, k.name); err == nil {
			t.Errorf("%s %s was stored", k.r.Name, k.name)
		}
	}
}

// TestRBACValidation: names may hold colons, rules and roleRefs are
// checked with upstream's messages, defaults fill the apiGroups.
func TestRBACValidation(t *testing.T) {
	e := newRBACEnv(t)
	bad := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"x"},"rules":[{"resources":["pods"]}]}`
	wantStatus(t, e.do(req{method: "POST", path: rbacPath + "/clusterroles", body: bad}), http.StatusUnprocessableEntity,
		"rules[0].verbs: Required value: verbs must contain at least one value")
	crb := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"system:x"},` +
		`"roleRef":{"kind":"ClusterRole","name":"view"},"subjects":[{"kind":"User","name":"u"},{"kind":"ServiceAccount","name":"s","namespace":"default"}]}`
	var got rbacv1.ClusterRoleBinding
	e.do(req{method: "POST", path: rbacPath + "/clusterrolebindings", body: crb}).must(t, http.StatusCreated, &got)
	if got.RoleRef.APIGroup != rbacv1.GroupName || got.Subjects[0].APIGroup != rbacv1.GroupName || got.Subjects[1].APIGroup != "" {
		t.Errorf("defaults: %+v %+v", got.RoleRef, got.Subjects)
	}
	badRef := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"y"},"roleRef":{"kind":"Role","name":"view"}}`
	wantStatus(t, e.do(req{method: "POST", path: rbacPath + "/clusterrolebindings", body: badRef}), http.StatusUnprocessableEntity,
		`roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole"`)
	var raw map[string]any
	if err := json.Unmarshal(e.get(rbacPath+"/clusterroles/view").body, &raw); err != nil || raw["aggregationRule"] == nil {
		t.Errorf("view has no aggregationRule: %v %v", err, raw)
	}
}

// TestRBACProtobuf: the RBAC kinds and the access reviews travel in
// protobuf both ways, as kubectl's typed clients send them.
func TestRBACProtobuf(t *testing.T) {
	e := newRBACEnv(t)
	const proto = "application/vnd.kubernetes.protobuf"
	rb := &rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: "pb"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "u"}}}
	r := e.doWire("POST", rbacPath+"/namespaces/default/rolebindings", proto, proto, protoBytes(t, rb))
	var got rbacv1.RoleBinding
	decodeProto(t, e, r, &got)
	if r.code != http.StatusCreated || got.RoleRef.APIGroup != rbacv1.GroupName || got.Subjects[0].APIGroup != rbacv1.GroupName {
		t.Errorf("protobuf create: %d %+v", r.code, got)
	}
	ssar := &authorizationv1.SelfSubjectAccessReview{TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"},
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods"}}}
	r = e.doWire("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", proto, proto, protoBytes(t, ssar))
	var review authorizationv1.SelfSubjectAccessReview
	decodeProto(t, e, r, &review)
	if r.code != http.StatusCreated || !review.Status.Allowed {
		t.Errorf("protobuf review: %d %+v", r.code, review.Status)
	}
}

// deferringNode is a fake node authorizer that is a Decider: it allows
// nodes pods, has no opinion on configmaps, and denies the rest.
type deferringNode struct{}

func (deferringNode) Decide(_ context.Context, a Attributes) (authorizer.Decision, string, error) {
	switch a.Resource {
	case "pods":
		return authorizer.DecisionAllow, "", nil
	case "configmaps":
		return authorizer.DecisionNoOpinion, "", nil
	}
	return authorizer.DecisionDeny, "nodes may not", nil
}

func (n deferringNode) Authorize(ctx context.Context, a Attributes) error {
	if d, _, _ := n.Decide(ctx, a); d != authorizer.DecisionAllow {
		return denied(a, "nodes may not")
	}
	return nil
}

// TestChainNodeDefers: a node authorizer that answers NoOpinion hands the
// node's request to RBAC; its Allow and Deny stand.
func TestChainNodeDefers(t *testing.T) {
	st := openStore(t)
	c := &Chain{Node: deferringNode{}, RBAC: NewRBAC(st)}
	node := UserInfo{Name: "system:node:n1", Groups: []string{nodesGroup, authenticatedGroup}}
	ctx := testCtx(t)
	cm := Attributes{User: node, Verb: "list", Resource: "configmaps", Namespace: "default"}
	if err := c.Authorize(ctx, cm); err == nil || !strings.Contains(err.Error(), `User "system:node:n1" cannot list resource "configmaps"`) {
		t.Errorf("configmaps without a grant: %v", err)
	}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cm"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}}}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cm"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: nodesGroup}}}
	for _, o := range []struct {
		r   *resources.Resource
		obj resources.Object
	}{{resources.ClusterRoles, cr}, {resources.ClusterRoleBindings, crb}} {
		if _, err := st.Create(ctx, o.r, o.obj); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Authorize(ctx, cm); err != nil {
		t.Errorf("configmaps with a grant: %v", err)
	}
	if d, _, _ := c.Decide(ctx, cm); d != authorizer.DecisionAllow {
		t.Errorf("Decide configmaps: %v", d)
	}
	if err := c.Authorize(ctx, Attributes{User: node, Verb: "list", Resource: "pods"}); err != nil {
		t.Errorf("pods: %v", err)
	}
	secrets := Attributes{User: node, Verb: "list", Resource: "secrets", Namespace: "default"}
	if err := c.Authorize(ctx, secrets); err == nil || !strings.Contains(err.Error(), "nodes may not") {
		t.Errorf("secrets, denied by the node rules despite RBAC: %v", err)
	}
	if d, _, _ := c.Decide(ctx, secrets); d != authorizer.DecisionDeny {
		t.Errorf("Decide secrets: %v", d)
	}
}
