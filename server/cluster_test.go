package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// freePort is a TCP port free on 127.0.0.1 a moment ago (etcd must know
// its peer URL before it listens).
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// clusterConfig is a server without a local agent, clustering its
// embedded etcd over a loopback peer port.
func clusterConfig(t *testing.T, name string) Config {
	return Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", CompactInterval: -1, Logger: testLogger(t),
		Gossip:           agent.GossipOptions{Addr: "127.0.0.1:0", Profile: gossip.ProfileLocal, LeaveOnStop: true},
		GossipName:       name,
		ServerName:       name,
		AdvertiseAddress: "127.0.0.1",
		PeerPort:         freePort(t),
	}
}

// joinConfig is clusterConfig for a server that joins through via with
// token.
func joinConfig(t *testing.T, name string, via *Server, token string) Config {
	c := clusterConfig(t, name)
	c.JoinURL, c.JoinToken = via.URL(), token
	return c
}

// startServer starts a server from c or fails the test. The caller closes
// it, before any deferred leak check runs.
func startServer(ctx context.Context, t *testing.T, c Config) *Server {
	t.Helper()
	s, err := Start(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startPair starts s1 with --cluster-init and s2 joined through it. The
// caller closes both, before any deferred leak check runs.
func startPair(ctx context.Context, t *testing.T) (s1, s2 *Server) {
	t.Helper()
	c1 := clusterConfig(t, "s1")
	c1.ClusterInit = true
	s1 = startServer(ctx, t, c1)
	s2, err := Start(ctx, joinConfig(t, "s2", s1, s1.JoinToken()))
	if err != nil {
		s1.Close()
		t.Fatal(err)
	}
	return s1, s2
}

func voters(t *testing.T, s *Server) []string {
	t.Helper()
	list, err := s.Etcd().MemberList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range list.Members {
		if !m.IsLearner {
			out = append(out, m.Name)
		}
	}
	return out
}

// TestClusterJoin forms a cluster of three servers from --cluster-init and
// two joins (the second through the second server), with no file copied:
// every server serves every object, the members are voters, a restarted
// joined server resumes as the same member (its --join ignored), bad
// tokens and another cluster's token are refused with one line and change
// nothing, and a server is removed while the last one cannot be.
func TestClusterJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three embedded etcds")
	}
	defer testkit.LeakCheck(t)()
	ctx := context.Background()

	s1, s2 := startPair(ctx, t)
	defer s1.Close()
	defer s2.Close()
	c3 := joinConfig(t, "s3", s2, s1.JoinToken())
	s3 := startServer(ctx, t, c3)
	s3Closed := false
	defer func() {
		if !s3Closed {
			s3.Close()
		}
	}()
	if got := voters(t, s1); len(got) != 3 {
		t.Fatalf("voting members %v, want s1, s2, s3", got)
	}
	// Same key material: the same admin token and join token everywhere.
	if s3.AdminToken() != s1.AdminToken() || s3.JoinToken() != s1.JoinToken() {
		t.Fatal("the joined server has other credentials than the first")
	}
	for _, f := range []string{pki.PeerCertFile, MemberFile} {
		if _, err := os.Stat(filepath.Join(s3.DataDir(), f)); err != nil {
			t.Errorf("joined server lacks %s: %v", f, err)
		}
	}

	// An object written through one server is served by the others, over
	// HTTPS with the admin kubeconfig of each.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ha", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	cm.Kind, cm.APIVersion = "ConfigMap", "v1"
	if _, err := s3.Admin().Create(ctx, cm, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Secret, encrypted at rest under the cluster's key, which the
	// joined servers received with the rest of the key material.
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ha", Namespace: "default"}, StringData: map[string]string{"k": "v"}}
	sec.Kind, sec.APIVersion = "Secret", "v1"
	if _, err := s1.Admin().Create(ctx, sec, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Server{s1, s2, s3} {
		cfg, err := client.LoadKubeconfigFrom([]string{s.Kubeconfig()})
		if err != nil {
			t.Fatal(err)
		}
		h, err := client.NewHTTP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, func() error {
			if _, err := h.Get(ctx, resources.ConfigMaps, "default", "ha"); err != nil {
				return err
			}
			obj, err := h.Get(ctx, resources.Secrets, "default", "ha")
			if err != nil {
				return err
			}
			if got := string(obj.(*corev1.Secret).Data["k"]); got != "v" {
				return fmt.Errorf("secret through %s: %q", s.URL(), got)
			}
			return nil
		})
		h.Close()
	}

	// Bad input, refused with one line, the cluster unchanged.
	other, err := pki.Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hash, _, _ := client.ParseJoinToken(s1.JoinToken())
	for _, tc := range []struct{ name, token, want string }{
		{"wrong secret", "K10" + hash + "::join:" + strings.Repeat("0", 64), "invalid join token"},
		{"agent-only token", "K10" + hash + "::join:abcdef.0123456789abcdef", "agent-only token"},
		{"another cluster", other.JoinToken(), "not the cluster of this join token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := joinConfig(t, "bad", s1, tc.token)
			s, err := Start(ctx, c)
			if err == nil {
				s.Close()
				t.Fatal("joined")
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Fatalf("error %q, want one line with %q", msg, tc.want)
			}
			if _, err := os.Stat(filepath.Join(c.DataDir, pki.CAKeyFile)); err == nil {
				t.Error("a refused join wrote the cluster's CA key")
			}
			if got := voters(t, s1); len(got) != 3 {
				t.Errorf("members after a refused join: %v", got)
			}
		})
	}

	// A restarted joined server resumes as the same member: the same
	// command line (with --join) starts it again.
	s3.Close()
	s3, err = Start(ctx, c3)
	if err != nil {
		t.Fatal(err)
	}
	if got := voters(t, s1); len(got) != 3 {
		t.Fatalf("members after a restart: %v", got)
	}
	if _, err := s3.Admin().Get(ctx, resources.ConfigMaps, "default", "ha"); err != nil {
		t.Fatalf("restarted member: %v", err)
	}

	// Removal, through the API with the admin's token.
	h, err := client.NewHTTP(client.Config{Server: s1.URL(), CAPEM: s1.CAPEM(), Token: s1.AdminToken()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s3.Close()
	s3Closed = true
	body, _ := json.Marshal(client.RemoveServerRequest{Name: "s3"})
	if _, err := h.RawPost(ctx, client.RemoveServerPath, body); err != nil {
		t.Fatal(err)
	}
	if got := voters(t, s1); len(got) != 2 {
		t.Fatalf("members after removing s3: %v", got)
	}
	body, _ = json.Marshal(client.RemoveServerRequest{Name: "nope"})
	if _, err := h.RawPost(ctx, client.RemoveServerPath, body); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("removing an unknown server: %v", err)
	}
	// The node token may not remove servers.
	hn, err := client.NewHTTP(client.Config{Server: s1.URL(), CAPEM: s1.CAPEM(), Token: s1.NodeToken("n")})
	if err != nil {
		t.Fatal(err)
	}
	defer hn.Close()
	body, _ = json.Marshal(client.RemoveServerRequest{Name: "s2"})
	if _, err := hn.RawPost(ctx, client.RemoveServerPath, body); err == nil {
		t.Fatal("a node removed a server")
	}
	if got := voters(t, s1); len(got) != 2 {
		t.Fatalf("members after a refused removal: %v", got)
	}
}

// TestClusterRemoveLast: the only server of a cluster refuses to remove
// itself, and keeps serving.
func TestClusterRemoveLast(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	defer testkit.LeakCheck(t)()
	ctx := context.Background()
	c := clusterConfig(t, "only")
	c.ClusterInit = true
	s, err := Start(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h, err := client.NewHTTP(client.Config{Server: s.URL(), CAPEM: s.CAPEM(), Token: s.AdminToken()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	body, _ := json.Marshal(client.RemoveServerRequest{Name: "only"})
	_, err = h.RawPost(ctx, client.RemoveServerPath, body)
	if err == nil || !strings.Contains(err.Error(), "last server") {
		t.Fatalf("removing the last server: %v", err)
	}
	if got := voters(t, s); len(got) != 1 {
		t.Fatalf("members: %v", got)
	}
	if _, _, err := s.Admin().List(ctx, resources.Namespaces, "", client.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}
