package apiserver

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
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
		{"wrong secret", "POST", `{"nodeName":"edge-1","joinSecret":"nope"}`, 401, "invalid join token; copy /var/lib/everynode/join-token from the server"},
		{"no secret", "POST", `{"nodeName":"edge-1"}`, 401, "invalid join token"},
		{"no body", "POST", ``, 401, "invalid join token"},
		{"bad node name", "POST", `{"nodeName":"Edge_1","joinSecret":"s3cret"}`, 422, "nodeName"},
		{"not JSON", "POST", `{`, 400, "not JSON"},
		{"GET", "GET", ``, 405, ""},
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
