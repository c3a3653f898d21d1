package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// localConfig is a server on loopback ports with a fake local agent and
// gossip on one machine.
func localConfig(t *testing.T) Config {
	return Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", CompactInterval: -1, Logger: testLogger(t),
		Gossip: agent.GossipOptions{Addr: "127.0.0.1:0", Profile: gossip.ProfileLocal, LeaveOnStop: true},
		Agent:  &agent.NodeOptions{Name: "local", IP: "127.0.0.1", Runtime: agent.RuntimeFake, LogListen: "127.0.0.1:0"},
	}
}

// TestStartClose starts a whole server — store, gossip, API, controllers and
// a local agent — checks that it serves (the standard namespaces with their
// default ServiceAccounts included, an expired bootstrap token deleted), and
// that Close (twice) leaves no
// goroutine behind.
func TestStartClose(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	defer testkit.LeakCheck(t)()
	ctx := context.Background()
	s, err := Start(ctx, localConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// The kubeconfig works over HTTPS, and the local agent registers its Node
	// as Ready (its member is the server's, so gossip sees it alive).
	cfg, err := client.LoadKubeconfigFrom([]string{s.Kubeconfig()})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != s.URL() {
		t.Errorf("kubeconfig names %s, server is at %s", cfg.Server, s.URL())
	}
	h, err := client.NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	testkit.Eventually(t, 30*time.Second, func() error {
		obj, err := h.Get(ctx, resources.Nodes, "", "local")
		if err != nil {
			return err
		}
		for _, c := range obj.(*corev1.Node).Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return errors.New("node local not Ready")
	})
	// The standard namespaces exist, each with its default ServiceAccount
	// (the serviceaccount controller), as in Kubernetes.
	for _, ns := range namespacesAtStart {
		testkit.Eventually(t, 30*time.Second, func() error {
			if _, err := h.Get(ctx, resources.Namespaces, "", ns); err != nil {
				return err
			}
			_, err := h.Get(ctx, resources.ServiceAccounts, ns, "default")
			return err
		})
	}
	// An expired bootstrap token is deleted (the token cleaner), as in
	// Kubernetes.
	expired := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-abcdef"},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{"token-id": "abcdef", "token-secret": "0123456789abcdef",
			"usage-bootstrap-authentication": "true", "expiration": time.Now().Add(-time.Minute).Format(time.RFC3339)},
	}
	if _, err := h.Create(ctx, expired, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		if _, err := h.Get(ctx, resources.Secrets, "kube-system", expired.Name); !apierrors.IsNotFound(err) {
			return fmt.Errorf("expired bootstrap token: %v, want NotFound", err)
		}
		return nil
	})
	if len(s.GossipSeeds()) != 1 || s.Member() == nil {
		t.Errorf("gossip seeds %v, member %v", s.GossipSeeds(), s.Member())
	}
	h.Close()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	select {
	case err := <-s.Err():
		t.Errorf("Err after a clean Close: %v", err)
	default:
	}
}

// TestStartFailsListenTaken: the API address is taken; Start fails with
// PartListen after pki and before the store, and leaves nothing running.
func TestStartFailsListenTaken(t *testing.T) {
	defer testkit.LeakCheck(t)()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := localConfig(t)
	cfg.Listen = taken.Addr().String()
	s, err := Start(context.Background(), cfg)
	var se *Error
	if !errors.As(err, &se) || se.Part != PartListen {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Start = %v, want a PartListen error", err)
	}
}

// TestStartFailsGossipTaken: the gossip address is taken; Start fails
// after the local agent's runtime, its log endpoint and the embedded etcd
// started, and releases all of them (no goroutine, the data dir reusable).
func TestStartFailsGossipTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	defer testkit.LeakCheck(t)()
	taken, err := gossip.New(gossip.Config{Name: "squatter", BindAddr: "127.0.0.1:0", Profile: gossip.ProfileLocal, Key: make([]byte, 32), Meta: gossip.Meta{Role: gossip.RoleAgent}})
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := localConfig(t)
	cfg.Gossip.Addr = taken.LocalAddr()
	s, err := Start(context.Background(), cfg)
	var se *Error
	if !errors.As(err, &se) || se.Part != PartGossip {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Start = %v, want a PartGossip error", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, AdminKubeconfigFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("admin.kubeconfig after a failed start: %v", err)
	}
	// The store was closed: a new server opens the same data dir.
	cfg.Gossip.Addr = "127.0.0.1:0"
	s, err = Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("restart on the same data dir: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

// TestStartCancelled: the context ends while Start waits for the store
// and the API; Start returns the context's error and leaves nothing running.
func TestStartCancelled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	defer testkit.LeakCheck(t)()
	for _, after := range []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond} {
		ctx, cancel := context.WithCancel(context.Background())
		cfg := localConfig(t)
		cfg.Agent = nil
		cfg.Membership = nodelifecycle.NewStaticMembership()
		time.AfterFunc(after, cancel)
		s, err := Start(ctx, cfg)
		cancel()
		if err == nil {
			// Started before the cancel: Close must still release everything.
			if cerr := s.Close(); cerr != nil {
				t.Errorf("cancel after %s: Close: %v", after, cerr)
			}
			continue
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancel after %s: Start = %v, want context.Canceled", after, err)
		}
		t.Logf("cancel after %s: %v", after, err)
	}
}

func TestServerIdentityIsStableAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	first, err := serverIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	second, err := serverIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if first == "" || first != second {
		t.Fatalf("identities %q then %q: want one stable identity per data dir", first, second)
	}
	other, err := serverIdentity(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if other == first {
		t.Fatalf("two data dirs share identity %q", first)
	}
}
