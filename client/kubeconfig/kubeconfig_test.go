package kubeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The tests compare this package with client-go's clientcmd, which kubectl
// uses: clientcmd is linked into the tests only, as the reference.

func TestEncodeMatchesClientcmd(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	got, err := Encode(New("everynode", "https://127.0.0.1:6443", ca, "tok"))
	if err != nil {
		t.Fatal(err)
	}
	ref := clientcmdapi.NewConfig()
	ref.Clusters["everynode"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443", CertificateAuthorityData: ca}
	ref.AuthInfos["everynode"] = &clientcmdapi.AuthInfo{Token: "tok"}
	ref.Contexts["everynode"] = &clientcmdapi.Context{Cluster: "everynode", AuthInfo: "everynode"}
	ref.CurrentContext = "everynode"
	want, err := clientcmd.Write(*ref)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("Encode =\n%s\nclientcmd.Write =\n%s", got, want)
	}
}

// resolved is what a client takes from a loaded kubeconfig.
type resolved struct {
	context, server, ca, caFile, token, tokenFile string
}

func resolveOurs(c *Config) resolved {
	ctx, _ := c.Context(c.CurrentContext)
	cl, _ := c.Cluster(ctx.Cluster)
	u, _ := c.User(ctx.User)
	return resolved{c.CurrentContext, cl.Server, string(cl.CertificateAuthorityData), cl.CertificateAuthority, u.Token, u.TokenFile}
}

func resolveClientcmd(c *clientcmdapi.Config) resolved {
	r := resolved{context: c.CurrentContext}
	ctx := c.Contexts[c.CurrentContext]
	if ctx == nil {
		return r
	}
	if cl := c.Clusters[ctx.Cluster]; cl != nil {
		r.server, r.ca, r.caFile = cl.Server, string(cl.CertificateAuthorityData), cl.CertificateAuthority
	}
	if u := c.AuthInfos[ctx.AuthInfo]; u != nil {
		r.token, r.tokenFile = u.Token, u.TokenFile
	}
	return r
}

const fileA = `apiVersion: v1
kind: Config
current-context: a
contexts:
- name: a
  context: {cluster: shared, user: ua, namespace: x}
- name: b
  context: {cluster: cb, user: ub}
clusters:
- name: shared
  cluster: {server: "https://a:1", certificate-authority: certs/ca.pem, insecure-skip-tls-verify: false}
users:
- name: ua
  user: {tokenFile: tok}
preferences: {colors: true}
`

const fileB = `{"apiVersion": "v1", "kind": "Config", "current-context": "b",
 "contexts": [{"name": "b", "context": {"cluster": "cb", "user": "ub"}}],
 "clusters": [{"name": "shared", "cluster": {"server": "https://b:2"}},
              {"name": "cb", "cluster": {"server": "https://b:3", "certificate-authority-data": "Q0FC"}}],
 "users": [{"name": "ub", "user": {"token": "tb", "exec": {"command": "x"}}}, {"name": "ua", "user": {"token": "shadowed"}}]}
`

const fileNoContext = `apiVersion: v1
kind: Config
users:
- name: ub
  user: {token: ignored}
`

func TestLoadMatchesClientcmd(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a/config", fileA)
	b := write("b/config.json", fileB)
	none := write("none/config", fileNoContext)
	empty := write("empty", "")
	missing := filepath.Join(dir, "missing")

	tests := []struct {
		name     string
		paths    []string
		explicit bool
	}{
		{"one file", []string{a}, true},
		{"json", []string{b}, true},
		{"first wins", []string{a, b}, false},
		{"first wins, reversed", []string{b, a}, false},
		{"current-context from a later file", []string{none, b}, false},
		{"missing files skipped", []string{missing, a, missing}, false},
		{"empty file", []string{empty, b}, false},
		{"all missing", []string{missing, missing + "2"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := &clientcmd.ClientConfigLoadingRules{Precedence: tt.paths}
			if tt.explicit {
				rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: tt.paths[0]}
			}
			ref, err := rules.Load()
			if err != nil {
				t.Fatalf("clientcmd: %v", err)
			}
			got, err := Load(tt.paths, tt.explicit)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if g, w := resolveOurs(got), resolveClientcmd(ref); g != w {
				t.Fatalf("Load = %+v\nclientcmd = %+v", g, w)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", fileA)
	tests := []struct {
		name     string
		paths    []string
		explicit bool
		want     string
	}{
		{"explicit missing", []string{filepath.Join(dir, "nope")}, true, "nope"},
		{"not yaml", []string{write("bad", "clusters: [")}, true, `error loading config file "` + filepath.Join(dir, "bad")},
		{"wrong kind", []string{write("kind", "kind: Pod\napiVersion: v1\n")}, true, `kind "Pod"`},
		{"wrong version", []string{write("ver", "kind: Config\napiVersion: v2\n")}, true, `apiVersion "v2"`},
		{"duplicate cluster", []string{write("dup", "clusters:\n- name: c\n- name: c\n")}, true, `duplicate name "c"`},
		{"a bad file among good ones", []string{good, filepath.Join(dir, "bad")}, false, "error loading config file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := &clientcmd.ClientConfigLoadingRules{Precedence: tt.paths}
			if tt.explicit {
				rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: tt.paths[0]}
			}
			if _, err := rules.Load(); err == nil {
				t.Fatalf("clientcmd accepts the input; the case is wrong")
			}
			_, err := Load(tt.paths, tt.explicit)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	in := New("c", "https://h:1", []byte("CA"), "t")
	data, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := resolveOurs(out), resolveOurs(in); g != w {
		t.Fatalf("round trip = %+v, want %+v", g, w)
	}
}
