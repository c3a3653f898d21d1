package apiserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/http"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// withTokens serves TokenRequest signed by a fresh key.
func withTokens(t testing.TB) func(*Config) {
	return func(c *Config) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tokens, err := NewServiceAccountTokens(c.Store, key)
		if err != nil {
			t.Fatal(err)
		}
		c.ServiceAccountTokens = tokens
	}
}

// TestKubectlCreateToken: `kubectl create token` issues a JWT the server
// authenticates as the service account, which RBAC then authorizes (403
// before a binding, allowed after); too short a duration is kube's 422; a
// token dies with its account (401, also once an account of the same name
// is back) and with the pod it is bound to.
func TestKubectlCreateToken(t *testing.T) {
	k := newKubectlEnv(t, withRBAC, withTokens(t))
	if err := k.s.EnsureBootstrapPolicy(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	k.ok("create", "serviceaccount", "bot")
	tok := strings.TrimSpace(k.ok("create", "token", "bot", "--duration=10m"))
	if strings.Count(tok, ".") != 2 {
		t.Fatalf("token %q is no JWT", tok)
	}
	stderr := k.fails("", "get", "pods", "--token="+tok)
	wantContains(t, stderr, `pods is forbidden: User "system:serviceaccount:default:bot" cannot list resource "pods"`)
	k.ok("create", "role", "pod-reader", "--verb=get,list", "--resource=pods")
	k.ok("create", "rolebinding", "bot-reads", "--role=pod-reader", "--serviceaccount=default:bot")
	k.ok("get", "pods", "--token="+tok)
	if got := strings.TrimSpace(k.run("", nil, "auth", "can-i", "list", "pods", "--token="+tok).out); got != "yes" {
		t.Errorf("can-i with the token = %q", got)
	}
	wantContains(t, k.fails("", "create", "token", "bot", "--duration=5m"), "may not specify a duration less than 10 minutes")
	wantContains(t, k.fails("", "create", "token", "ghost"), `serviceaccounts "ghost" not found`)

	// Bound to a pod: valid while the pod is.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}, Spec: corev1.PodSpec{
		ServiceAccountName: "bot", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := k.c.Create(testCtx(t), pod, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	bound := strings.TrimSpace(k.ok("create", "token", "bot", "--bound-object-kind=Pod", "--bound-object-name=p"))
	k.ok("get", "pods", "--token="+bound)
	k.ok("create", "serviceaccount", "other")
	wantContains(t, k.fails("", "create", "token", "other", "--bound-object-kind=Pod", "--bound-object-name=p"),
		"cannot bind token for serviceaccount \"other\" to pod running with different serviceaccount name")
	if _, err := k.c.Delete(testCtx(t), resources.Pods, "default", "p", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	wantContains(t, k.fails("", "get", "pods", "--token="+bound), "Unauthorized")

	// Deleting the account kills its tokens, also when the name comes back.
	if _, err := k.c.Delete(testCtx(t), resources.ServiceAccounts, "default", "bot", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantContains(t, k.fails("", "get", "pods", "--token="+tok), "Unauthorized")
	k.ok("create", "serviceaccount", "bot")
	wantContains(t, k.fails("", "get", "pods", "--token="+tok), "Unauthorized")
}

// TestExpiredTokenRefused: an expired token, a token for another audience
// and a token signed by another key are not authenticated.
func TestExpiredTokenRefused(t *testing.T) {
	e := newEnv(t, withRBAC, withTokens(t))
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bot"}}
	out, err := e.st.Create(testCtx(t), resources.ServiceAccounts, withUID(sa))
	if err != nil {
		t.Fatal(err)
	}
	account := core.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bot", UID: out.GetUID()}}
	sign := func(s *ServiceAccountTokens, exp int64, auds ...string) string {
		t.Helper()
		sc, pc, err := serviceaccount.Claims(account, nil, nil, nil, nil, nil, exp, 0, auds, nil)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := s.gen.GenerateToken(testCtx(t), sc, pc)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	if name, _, ok := e.s.tokens.AuthenticateToken(sign(e.s.tokens, 3600, ServiceAccountIssuer)); !ok || name != "system:serviceaccount:default:bot" {
		t.Fatalf("valid token: %q %v", name, ok)
	}
	other := &Config{Store: e.st}
	withTokens(t)(other)
	for what, tok := range map[string]string{
		"expired":        sign(e.s.tokens, -3600, ServiceAccountIssuer),
		"other audience": sign(e.s.tokens, 3600, "vault"),
		"other key":      sign(other.ServiceAccountTokens, 3600, ServiceAccountIssuer),
	} {
		if _, _, ok := e.s.tokens.AuthenticateToken(tok); ok {
			t.Errorf("%s token authenticated", what)
		}
		if r := e.do(req{method: "GET", path: podsPath, token: tok}); r.code != 401 {
			t.Errorf("%s token: %d", what, r.code)
		}
	}
}

func withUID(sa *corev1.ServiceAccount) *corev1.ServiceAccount {
	sa.UID = "uid-1"
	return sa
}

// TestTokenReview: a TokenReview authenticates a token as the server does,
// service account JWTs against the asked audiences; creating one needs a
// grant (system:auth-delegator).
func TestTokenReview(t *testing.T) {
	e := newEnv(t, withRBAC, withTokens(t))
	if err := e.s.EnsureBootstrapPolicy(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	out, err := e.st.Create(testCtx(t), resources.ServiceAccounts, withUID(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bot"}}))
	if err != nil {
		t.Fatal(err)
	}
	account := core.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bot", UID: out.GetUID()}}
	sign := func(auds ...string) string {
		sc, pc, err := serviceaccount.Claims(account, nil, nil, nil, nil, nil, 3600, 0, auds, nil)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := e.s.tokens.gen.GenerateToken(testCtx(t), sc, pc)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	review := func(token string, auds ...string) authenticationv1.TokenReview {
		t.Helper()
		body := toJSON(t, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: auds}})
		var tr authenticationv1.TokenReview
		e.do(req{method: "POST", path: "/apis/authentication.k8s.io/v1/tokenreviews", body: body}).must(t, http.StatusCreated, &tr)
		return tr
	}
	tr := review(sign(ServiceAccountIssuer))
	if !tr.Status.Authenticated || tr.Status.User.Username != "system:serviceaccount:default:bot" ||
		!slices.Contains(tr.Status.User.Groups, "system:serviceaccounts:default") || !slices.Contains(tr.Status.User.Groups, "system:authenticated") {
		t.Errorf("service account token: %+v", tr.Status)
	}
	if tr := review(sign("vault"), "vault"); !tr.Status.Authenticated || !slices.Equal(tr.Status.Audiences, []string{"vault"}) {
		t.Errorf("vault token for vault: %+v", tr.Status)
	}
	if tr := review(sign("vault")); tr.Status.Authenticated {
		t.Errorf("vault token for the API: %+v", tr.Status)
	}
	if tr := review(adminToken); !tr.Status.Authenticated || !slices.Contains(tr.Status.User.Groups, mastersGroup) {
		t.Errorf("admin token: %+v", tr.Status)
	}
	if tr := review("nonsense"); tr.Status.Authenticated {
		t.Errorf("bad token: %+v", tr.Status)
	}
	body := toJSON(t, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: adminToken}})
	wantStatus(t, e.do(req{method: "POST", path: "/apis/authentication.k8s.io/v1/tokenreviews", body: body, token: userToken}),
		http.StatusForbidden, `tokenreviews.authentication.k8s.io is forbidden: User "someone" cannot create resource "tokenreviews"`)
}
