package apiserver

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestNodeTokenRequests: a node gets service account tokens only for the
// accounts of its own pods (the node authorizer) and only bound to one of
// its pods by name and UID (NodeRestriction), so an agent cannot mint a
// token that outlives its pod or belongs to another node's pod.
func TestNodeTokenRequests(t *testing.T) {
	e := nodeEnv(t, withTokens(t))
	uid := func(name string) types.UID {
		var p corev1.Pod
		if err := json.Unmarshal(e.do(req{method: "GET", path: podsPath + "/" + name}).body, &p); err != nil {
			t.Fatal(err)
		}
		return p.UID
	}
	mine, theirs := uid("mine"), uid("theirs")
	body := func(pod string, u types.UID) string {
		tr := authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}
		if pod != "" {
			tr.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod, UID: u}
		}
		return toJSON(t, map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": tr.Spec})
	}
	tokenPath := func(sa string) string { return saPath + "/" + sa + "/token" }
	attacks := []struct {
		name, path, body, msg string
	}{
		{"another node's account", tokenPath("serviceaccount-theirs"), body("theirs", theirs),
			`cannot create resource "serviceaccounts/token" in API group "" in the namespace "default": no relationship found between node 'n1' and this object`},
		{"unbound token", tokenPath("serviceaccount-mine"), body("", ""), "node requested token not bound to a pod"},
		{"bound without a UID", tokenPath("serviceaccount-mine"), body("mine", ""), "node requested token with a pod binding without a uid"},
		{"bound to a stale UID", tokenPath("serviceaccount-mine"), body("mine", theirs), "does not match the UID in record"},
		{"bound to another node's pod", tokenPath("serviceaccount-mine"), body("theirs", theirs), "node requested token bound to a pod scheduled on a different node"},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			r := e.do(req{method: "POST", path: a.path, body: a.body, token: n1Token})
			if r.code != http.StatusForbidden || !strings.Contains(r.status(t).Message, a.msg) {
				t.Errorf("code %d %s, want 403 saying %q", r.code, r.body, a.msg)
			}
		})
	}
	r := e.do(req{method: "POST", path: tokenPath("serviceaccount-mine"), body: body("mine", mine), token: n1Token})
	if r.code != http.StatusCreated || !strings.Contains(string(r.body), `"token":"`) {
		t.Fatalf("token for its own pod: %d %s", r.code, r.body)
	}
}
