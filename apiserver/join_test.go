package apiserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/client"
)

// joinSecrets is a JoinSecrets with a fixed secret.
type joinSecrets struct{}

func (joinSecrets) CheckJoinSecret(s string) bool { return s == "s3cret" }
func (joinSecrets) NodeToken(node string) string  { return "node:" + node + ":t" }
func (joinSecrets) GossipKey() []byte             { return []byte(strings.Repeat("k", 32)) }

func TestJoin(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Join = &JoinConfig{Secrets: joinSecrets{}, DataDir: "/var/lib/everynode",
			Seeds: func() []string { return []string{"10.0.0.1:7946"} }, APIServer: func() string { return "https://10.0.0.1:6443" }}
	})
	var out JoinResponse
	e.do(req{method: "POST", path: JoinPath, token: "-", body: `{"nodeName":"edge-1","joinSecret":"s3cret"}`}).must(t, http.StatusOK, &out)
	key, _ := base64.StdEncoding.DecodeString(out.GossipKey)
	if out.NodeToken != "node:edge-1:t" || len(key) != 32 || len(out.GossipSeeds) != 1 || out.APIServer != "https://10.0.0.1:6443" {
		t.Errorf("join answered %+v", out)
	}
	cases := []struct {
		name, method, body string
		code               int
		msg                string
	}{
		{"wrong secret", "POST", `{"nodeName":"edge-1","joinSecret":"nope"}`, 401, "invalid join token; copy the join-token file from the server's data directory"},
		{"no secret", "POST", `{"nodeName":"edge-1"}`, 401, "invalid join token"},
		{"no body", "POST", ``, 401, "invalid join token"},
		{"bad node name", "POST", `{"nodeName":"Edge_1","joinSecret":"s3cret"}`, 422, "nodeName"},
		{"not JSON", "POST", `{`, 400, "not JSON"},
		{"GET, anonymous", "GET", ``, 401, "Unauthorized"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(req{method: c.method, path: JoinPath, token: "-", body: c.body})
			if r.code != c.code {
				t.Fatalf("code %d, want %d: %s", r.code, c.code, r.body)
			}
			if st := r.status(t); !strings.Contains(st.Message, c.msg) {
				t.Errorf("message %q lacks %q", st.Message, c.msg)
			}
		})
	}
	// Without a JoinConfig the path is an ordinary, authenticated 404.
	plain := newEnv(t)
	if r := plain.do(req{method: "POST", path: JoinPath, token: "-", body: `{}`}); r.code != http.StatusUnauthorized {
		t.Errorf("join without JoinConfig: code %d", r.code)
	}
}

// joinEnv serves joins with the join state kept in the store, as a server
// does, and the node authorizer.
func joinEnv(t *testing.T) (*env, *StoreJoinState, *[]string) {
	var written []string
	var state *StoreJoinState
	e := newEnv(t, func(c *Config) {
		state = NewStoreJoinState(c.Store)
		c.Authorizer = NewNodeRestriction(StoreGraph(c.Store))
		c.Authenticator = tokens{
			adminToken: {Name: "admin", Groups: []string{mastersGroup}},
			n1Token:    {Name: "system:node:n1", Groups: []string{nodesGroup}},
		}
		c.Join = &JoinConfig{Secrets: joinSecrets{}, State: state, CAHash: testCAHash,
			WriteJoinToken: func(tok string) error { written = append(written, tok); return nil }}
	})
	return e, state, &written
}

var testCAHash = strings.Repeat("ab", 32)

func joinBody(node, secret, password string) string {
	return fmt.Sprintf(`{"nodeName":%q,"joinSecret":%q,"nodePassword":%q}`, node, secret, password)
}

// TestJoinNodeIdentity: a stolen join token cannot take over a node's name
// (docs/security.md §4): a join under a name another machine holds is 403
// and names the fix; deleting the Node frees the name.
func TestJoinNodeIdentity(t *testing.T) {
	e, _, _ := joinEnv(t)
	join := func(node, password string) resp {
		return e.do(req{method: "POST", path: JoinPath, token: "-", body: joinBody(node, "s3cret", password)})
	}
	pw1, pw2 := strings.Repeat("1", 64), strings.Repeat("2", 64)
	join("edge-1", pw1).must(t, http.StatusOK, nil)
	join("edge-1", pw1).must(t, http.StatusOK, nil) // the same machine again
	if r := join("edge-1", pw2); r.code != http.StatusForbidden {
		t.Errorf("takeover before the Node registers: code %d, want 403", r.code)
	}
	e.do(req{method: "POST", path: "/api/v1/nodes", body: `{"apiVersion":"v1","kind":"Node","metadata":{"name":"edge-1"}}`}).must(t, http.StatusCreated, nil)
	r := join("edge-1", pw2)
	if r.code != http.StatusForbidden {
		t.Fatalf("takeover: code %d, want 403: %s", r.code, r.body)
	}
	want := `nodes "edge-1" is forbidden: the node name is held by another machine (this machine's node password does not match the one recorded when "edge-1" first joined); ` +
		`if that machine is gone, an admin frees the name with "everynode delete node edge-1", else join this one under another --name`
	if st := r.status(t); st.Message != want {
		t.Errorf("message\n%q, want\n%q", st.Message, want)
	}
	if strings.Contains(string(r.body), "/") && strings.Contains(string(r.body), "data") {
		t.Errorf("the refusal names a path: %s", r.body)
	}
	if r := join("edge-2", ""); r.code != http.StatusBadRequest {
		t.Errorf("no password: code %d, want 400: %s", r.code, r.body)
	}
	// The admin deletes the Node: the name is free for the new machine,
	// which now holds it.
	e.do(req{method: "DELETE", path: "/api/v1/nodes/edge-1"}).must(t, http.StatusOK, nil)
	join("edge-1", pw2).must(t, http.StatusOK, nil)
	e.do(req{method: "POST", path: "/api/v1/nodes", body: `{"apiVersion":"v1","kind":"Node","metadata":{"name":"edge-1"}}`}).must(t, http.StatusCreated, nil)
	if r := join("edge-1", pw1); r.code != http.StatusForbidden {
		t.Errorf("the old machine after the name moved: code %d, want 403", r.code)
	}
	// A machine that joined but never registered its Node: deleting the
	// missing Node (404) frees the name too.
	join("edge-3", pw1).must(t, http.StatusOK, nil)
	if r := join("edge-3", pw2); r.code != http.StatusForbidden {
		t.Errorf("takeover of an unregistered name: code %d, want 403", r.code)
	}
	e.do(req{method: "DELETE", path: "/api/v1/nodes/edge-3?dryRun=All"}).must(t, http.StatusNotFound, nil)
	if r := join("edge-3", pw2); r.code != http.StatusForbidden {
		t.Errorf("a dry-run delete freed the name: code %d", r.code)
	}
	e.do(req{method: "DELETE", path: "/api/v1/nodes/edge-3"}).must(t, http.StatusNotFound, nil)
	join("edge-3", pw2).must(t, http.StatusOK, nil)
}

// TestJoinTokenRotation: after a rotation the old join secret admits no one,
// the new one does (bare or as a whole token with the cluster's CA hash),
// and only the admin may rotate.
func TestJoinTokenRotation(t *testing.T) {
	e, _, written := joinEnv(t)
	pw := strings.Repeat("1", 64)
	join := func(secret string) int {
		return e.do(req{method: "POST", path: JoinPath, token: "-", body: joinBody("edge-1", secret, pw)}).code
	}
	if code := join("K10" + testCAHash + "::join:s3cret"); code != http.StatusOK {
		t.Fatalf("whole token before rotation: %d", code)
	}
	r := e.do(req{method: "POST", path: client.RotateJoinTokenPath, token: n1Token, body: `{}`})
	if r.code != http.StatusForbidden || r.status(t).Message != `forbidden: User "system:node:n1" cannot post path "/everynode/v1/join-token/rotate"` {
		t.Fatalf("a node rotates: %d %s", r.code, r.body)
	}
	if r := e.do(req{method: "POST", path: client.RotateJoinTokenPath, token: "-", body: `{}`}); r.code != http.StatusUnauthorized {
		t.Fatalf("anonymous rotation: %d", r.code)
	}
	if join("s3cret") != http.StatusOK || len(*written) != 0 {
		t.Fatal("a refused rotation rotated")
	}
	var out client.RotateJoinTokenResponse
	e.do(req{method: "POST", path: client.RotateJoinTokenPath, body: `{}`}).must(t, http.StatusOK, &out)
	prefix := "K10" + testCAHash + "::join:"
	secret, ok := strings.CutPrefix(out.JoinToken, prefix)
	if !ok || len(secret) != 64 || len(*written) != 1 || (*written)[0] != out.JoinToken {
		t.Fatalf("rotated token %q, written %q", out.JoinToken, *written)
	}
	for s, want := range map[string]int{
		"s3cret":                             http.StatusUnauthorized,
		"K10" + testCAHash + "::join:s3cret": http.StatusUnauthorized,
		secret:                               http.StatusOK,
		out.JoinToken:                        http.StatusOK,
		"K10" + strings.Repeat("cd", 32) + "::join:" + secret: http.StatusUnauthorized,
	} {
		if code := join(s); code != want {
			t.Errorf("join with %q: %d, want %d", s, code, want)
		}
	}
}

// TestJoinBootstrapTokens: kubeadm's bootstrap tokens admit agents until
// they expire or are deleted.
func TestJoinBootstrapTokens(t *testing.T) {
	e, _, _ := joinEnv(t)
	e.do(req{method: "POST", path: "/api/v1/namespaces", body: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"kube-system"}}`})
	token := func(id, secret, exp, usage string) {
		data := map[string]string{"token-id": id, "token-secret": secret, "usage-bootstrap-authentication": usage}
		if exp != "" {
			data["expiration"] = exp
		}
		s := map[string]any{"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
			"metadata": map[string]any{"name": "bootstrap-token-" + id, "namespace": "kube-system"}, "stringData": data}
		e.do(req{method: "POST", path: "/api/v1/namespaces/kube-system/secrets", body: toJSON(t, s)}).must(t, http.StatusCreated, nil)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	token("abcdef", "0123456789abcdef", future, "true")
	token("forevr", "0123456789abcdef", "", "true")
	token("expird", "0123456789abcdef", past, "true")
	token("noauth", "0123456789abcdef", future, "false")
	pw := strings.Repeat("1", 64)
	for s, want := range map[string]int{
		"K10" + testCAHash + "::join:abcdef.0123456789abcdef": http.StatusOK,
		"abcdef.0123456789abcdef":                             http.StatusOK,
		"forevr.0123456789abcdef":                             http.StatusOK,
		"abcdef.0123456789abcdee":                             http.StatusUnauthorized,
		"expird.0123456789abcdef":                             http.StatusUnauthorized,
		"noauth.0123456789abcdef":                             http.StatusUnauthorized,
		"zzzzzz.0123456789abcdef":                             http.StatusUnauthorized,
	} {
		if code := e.do(req{method: "POST", path: JoinPath, token: "-", body: joinBody("edge-1", s, pw)}).code; code != want {
			t.Errorf("join with %q: %d, want %d", s, code, want)
		}
	}
	e.do(req{method: "DELETE", path: "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef"}).must(t, http.StatusOK, nil)
	if code := e.do(req{method: "POST", path: JoinPath, token: "-", body: joinBody("edge-1", "abcdef.0123456789abcdef", pw)}).code; code != http.StatusUnauthorized {
		t.Errorf("deleted token: %d, want 401", code)
	}
}

// failingState is a JoinState whose store is down.
type failingState struct{}

func (failingState) ClaimNode(context.Context, string, string) (bool, error) {
	return false, errors.New("etcd at /var/lib/everynode/run/etcd.sock: unavailable")
}
func (failingState) ForgetNode(context.Context, string) error { return nil }
func (failingState) JoinSecret(context.Context) (string, error) {
	return "", errors.New("etcd at /var/lib/everynode/run/etcd.sock: unavailable")
}
func (failingState) RotateJoinSecret(context.Context) (string, error) { return "", nil }
func (failingState) BootstrapToken(context.Context, string) (*corev1.Secret, error) {
	return nil, errors.New("etcd at /var/lib/everynode/run/etcd.sock: unavailable")
}

// TestJoinStateUnavailable: when the join state cannot be read the join is
// a 503 that names nothing of the server.
func TestJoinStateUnavailable(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Join = &JoinConfig{Secrets: joinSecrets{}, State: failingState{}, CAHash: testCAHash}
	})
	for _, secret := range []string{"s3cret", "abcdef.0123456789abcdef"} {
		r := e.do(req{method: "POST", path: JoinPath, token: "-", body: joinBody("edge-1", secret, strings.Repeat("1", 64))})
		if r.code != http.StatusServiceUnavailable || strings.Contains(string(r.body), "/var/lib") {
			t.Errorf("%s: %d %s, want a 503 naming no path", secret, r.code, r.body)
		}
	}
}
