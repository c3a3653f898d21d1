package client

import (
	"bytes"
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/resources"
)

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestKubeconfigPaths(t *testing.T) {
	sep := string(filepath.ListSeparator)
	tests := []struct {
		explicit, env, home string
		want                []string
	}{
		{"/flag", "/a" + sep + "/b", "/h", []string{"/flag"}},
		{"", "/a" + sep + sep + "/b", "/h", []string{"/a", "/b"}},
		{"", "", "/h", []string{"/h/.kube/config"}},
		{"", "", "", nil},
	}
	for _, tt := range tests {
		if got := KubeconfigPaths(tt.explicit, tt.env, tt.home); !slices.Equal(got, tt.want) {
			t.Errorf("KubeconfigPaths(%q,%q,%q) = %q, want %q", tt.explicit, tt.env, tt.home, got, tt.want)
		}
	}
}

// TestKubeconfigRoundTrip writes a kubeconfig with pki.WriteKubeconfig for a
// server using a pki.Cluster's TLS, loads it back and makes an authenticated call.
func TestKubeconfigRoundTrip(t *testing.T) {
	dir := t.TempDir()
	cluster, err := pki.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := cluster.AuthenticateToken(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")); !ok {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1"}}`))
	}))
	srv.TLS = cluster.TLSConfig()
	srv.StartTLS()
	defer srv.Close()

	path := filepath.Join(dir, "admin.kubeconfig")
	if err := pki.WriteKubeconfig(path, srv.URL, cluster.CAPEM(), cluster.AdminToken(), "everynode"); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != srv.URL || cfg.Token != cluster.AdminToken() || !bytes.Equal(cfg.CAPEM, cluster.CAPEM()) {
		t.Fatalf("loaded %+v", cfg)
	}
	c, err := NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n, err := c.Get(context.Background(), resources.Nodes, "", "n1"); err != nil || n.GetName() != "n1" {
		t.Fatalf("Get through kubeconfig = %v, %v", n, err)
	}

	// The KUBECONFIG variable is honoured when no path is given.
	t.Setenv("KUBECONFIG", path)
	if cfg2, err := LoadKubeconfig(""); err != nil || cfg2.Server != srv.URL {
		t.Fatalf("LoadKubeconfig via KUBECONFIG = %+v, %v", cfg2, err)
	}
}

func TestKubeconfigCAFileAndTokenFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ca.pem"), []byte("CA"), 0o600)
	os.WriteFile(filepath.Join(dir, "tok"), []byte("t0k\n"), 0o600)
	kc := `apiVersion: v1
kind: Config
current-context: c
contexts:
- name: c
  context: {cluster: k, user: u}
clusters:
- name: k
  cluster: {server: "https://h:1", certificate-authority: ca.pem}
users:
- name: u
  user: {tokenFile: tok}
`
	path := filepath.Join(dir, "config")
	os.WriteFile(path, []byte(kc), 0o600)
	cfg, err := LoadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.CAPEM) != "CA" || cfg.Token != "t0k" || cfg.Server != "https://h:1" {
		t.Fatalf("loaded %+v", cfg)
	}
}

func TestKubeconfigMissing(t *testing.T) {
	_, err := LoadKubeconfig(filepath.Join(t.TempDir(), "nope"))
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("err = %v", err)
	}
}

func TestJoinToken(t *testing.T) {
	cluster, err := pki.Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hash, secret, err := ParseJoinToken(cluster.JoinToken() + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if !cluster.CheckJoinSecret(secret) {
		t.Fatal("parsed secret rejected by the cluster")
	}
	if err := VerifyCA(hash, cluster.CAPEM()); err != nil {
		t.Fatal(err)
	}
	if err := VerifyCA(hash, other.CAPEM()); err == nil {
		t.Fatal("VerifyCA accepted another cluster's CA")
	}

	for _, bad := range []string{"", "K10", "K10abc::join:x", "X10" + hash + "::join:x", "K10" + hash + "::node:x", "K10" + hash + "::join:", "K10" + strings.Repeat("z", 64) + "::join:x"} {
		if _, _, err := ParseJoinToken(bad); err == nil {
			t.Errorf("ParseJoinToken(%q) succeeded", bad)
		}
	}

	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.TLS = cluster.TLSConfig()
	srv.StartTLS()
	defer srv.Close()
	ca, err := FetchCA(context.Background(), srv.URL, hash)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ca, cluster.CAPEM()) {
		t.Fatal("FetchCA returned a different CA")
	}
	otherHash, _, _ := ParseJoinToken(other.JoinToken())
	if _, err := FetchCA(context.Background(), srv.URL, otherHash); err == nil {
		t.Fatal("FetchCA trusted a server whose CA does not match the pin")
	}
}
