package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestLoadCreatesFilesWithModes(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir, "example.test", "10.1.2.3"); err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{
		CACertFile: 0o644, CAKeyFile: 0o600, ServerCertFile: 0o644, ServerKeyFile: 0o600,
		SecretFile: 0o600, JoinTokenFile: 0o600,
	}
	for name, mode := range want {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != mode {
			t.Errorf("%s: mode %v, want %v", name, got, mode)
		}
	}
}

func TestLoadReusesCAAndSecret(t *testing.T) {
	dir := t.TempDir()
	c1, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ca1, _ := os.ReadFile(filepath.Join(dir, CACertFile))
	srv1, _ := os.ReadFile(filepath.Join(dir, ServerCertFile))
	c2, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(filepath.Join(dir, CACertFile))
	srv2, _ := os.ReadFile(filepath.Join(dir, ServerCertFile))
	if !bytes.Equal(ca1, ca2) || !bytes.Equal(srv1, srv2) {
		t.Fatal("second Load changed ca.crt or server.crt")
	}
	if c1.AdminToken() != c2.AdminToken() || c1.JoinToken() != c2.JoinToken() || !bytes.Equal(c1.GossipKey(), c2.GossipKey()) {
		t.Fatal("derived secrets changed between loads")
	}
	// A new SAN reissues the serving certificate from the same CA.
	c3, err := Load(dir, "new.example.test")
	if err != nil {
		t.Fatal(err)
	}
	ca3, _ := os.ReadFile(filepath.Join(dir, CACertFile))
	if !bytes.Equal(ca1, ca3) {
		t.Fatal("new SAN regenerated the CA")
	}
	if !slices.Contains(c3.serverCert.Leaf.DNSNames, "new.example.test") {
		t.Fatalf("server cert lacks new SAN: %v", c3.serverCert.Leaf.DNSNames)
	}
}

func TestLoadRefusesCAWithoutKey(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "only one of") {
		t.Fatalf("Load without ca.key: err = %v, want refusal", err)
	}
}

func TestTokens(t *testing.T) {
	c, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.GossipKey()) != 32 {
		t.Fatalf("gossip key is %d bytes", len(c.GossipKey()))
	}
	jt := c.JoinToken()
	if !strings.HasPrefix(jt, "K10"+CAHash(c.CACert().Raw)+"::join:") {
		t.Fatalf("join token %q has wrong shape", jt)
	}
	secret := jt[strings.LastIndex(jt, ":")+1:]
	tests := []struct {
		name       string
		token      string
		wantOK     bool
		wantUser   string
		wantGroups []string
	}{
		{"admin", c.AdminToken(), true, "admin", []string{"system:masters"}},
		{"node", c.NodeToken("n1"), true, "system:node:n1", []string{"system:nodes"}},
		{"node name with dots", c.NodeToken("edge-1.lab"), true, "system:node:edge-1.lab", []string{"system:nodes"}},
		{"node token renamed", strings.Replace(c.NodeToken("n1"), "n1", "n2", 1), false, "", nil},
		{"other cluster admin", other.AdminToken(), false, "", nil},
		{"other cluster node", other.NodeToken("n1"), false, "", nil},
		{"join secret is not a login", secret, false, "", nil},
		{"empty", "", false, "", nil},
		{"garbage node", "node:", false, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			user, groups, ok := c.AuthenticateToken(tt.token)
			if ok != tt.wantOK || user != tt.wantUser || !slices.Equal(groups, tt.wantGroups) {
				t.Fatalf("AuthenticateToken = %q %v %v, want %q %v %v", user, groups, ok, tt.wantUser, tt.wantGroups, tt.wantOK)
			}
		})
	}
	for s, want := range map[string]bool{secret: true, jt: true, other.JoinToken(): false, "": false, c.AdminToken(): false} {
		if got := c.CheckJoinSecret(s); got != want {
			t.Errorf("CheckJoinSecret(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestTLSConfigServesVerifiableCert(t *testing.T) {
	c, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(r.Proto))
	}))
	srv.TLS = c.TLSConfig()
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAPEM())
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, host := range []string{"127.0.0.1", "localhost"} {
		resp, err := (&http.Client{Transport: tr}).Get("https://" + net.JoinHostPort(host, port) + "/")
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("%s: protocol %s, want HTTP/2", host, resp.Proto)
		}
		if n := len(resp.TLS.PeerCertificates); n != 2 {
			t.Errorf("%s: chain has %d certificates, want leaf and CA", host, n)
		}
	}
}

func TestWriteKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "admin.kubeconfig")
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	if err := WriteKubeconfig(path, "https://127.0.0.1:6443", ca, "tok", "everynode"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode().Perm())
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || cfg.CurrentContext != "everynode" {
		t.Fatalf("current context %q missing", cfg.CurrentContext)
	}
	cl, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if cl.Server != "https://127.0.0.1:6443" || !bytes.Equal(cl.CertificateAuthorityData, ca) || user.Token != "tok" {
		t.Fatalf("round trip: server %q ca %q token %q", cl.Server, cl.CertificateAuthorityData, user.Token)
	}
}

// TestServiceAccountKey: the signing key is derived from the cluster
// secret: the same across loads of one data dir, different for another
// cluster.
func TestServiceAccountKey(t *testing.T) {
	dir := t.TempDir()
	keyOf := func(dir string) []byte {
		t.Helper()
		c, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		k, err := c.ServiceAccountKey()
		if err != nil {
			t.Fatal(err)
		}
		b, err := k.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first := keyOf(dir)
	if again := keyOf(dir); !bytes.Equal(first, again) {
		t.Error("the key changed across loads")
	}
	if other := keyOf(t.TempDir()); bytes.Equal(first, other) {
		t.Error("two clusters share a key")
	}
}
