package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// haServer is one server process of a three-server cluster on its own
// loopback address.
type haServer struct {
	name, ip, dir string
	args          []string
	proc          *wiringProc
}

func haFreePort(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("loopback address %s not usable here: %v", ip, err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// start runs the server with its command line (the same one on a
// restart) and waits for its kubeconfig.
func (s *haServer) start(t *testing.T, bin string) {
	t.Helper()
	os.Remove(filepath.Join(s.dir, "admin.kubeconfig"))
	s.proc = startProc(t, s.name, bin, s.args...)
	s.proc.waitFile(t, filepath.Join(s.dir, "admin.kubeconfig"), 90*time.Second)
}

func (s *haServer) kill(t *testing.T) {
	t.Helper()
	if err := s.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.proc.done
	s.proc.done <- nil // a killed server is no failure of the test
}

func (s *haServer) admin(t *testing.T) *client.HTTP {
	h, _ := adminFromKubeconfig(t, filepath.Join(s.dir, "admin.kubeconfig"))
	return h
}

func (s *haServer) leading() bool {
	return strings.Contains(s.proc.out.String(), "leading: controllers start")
}

// startHACluster starts three servers: --cluster-init on 127.0.0.1, the
// others --join it with its join-token file.
func startHACluster(t *testing.T, bin string) []*haServer {
	t.Helper()
	var out []*haServer
	for i, ip := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
		s := &haServer{name: "ha" + strconv.Itoa(i+1), ip: ip, dir: t.TempDir()}
		s.args = []string{"server", "--data-dir", s.dir, "--name", s.name, "--listen", ip + ":" + haFreePort(t, ip), "--no-agent",
			"--gossip", ip + ":" + haFreePort(t, ip), "--gossip-profile", "local", "--log-level", "info",
			"--advertise-address", ip, "--etcd-peer-port", haFreePort(t, ip)}
		if i == 0 {
			s.args = append(s.args, "--cluster-init")
		} else {
			s.args = append(s.args, "--join", "https://"+out[0].ip+":"+portOf(out[0].args), "--token-file", filepath.Join(out[0].dir, "join-token"))
		}
		s.start(t, bin)
		out = append(out, s)
	}
	return out
}

func portOf(args []string) string {
	for i, a := range args {
		if a == "--listen" {
			_, p, _ := net.SplitHostPort(args[i+1])
			return p
		}
	}
	return ""
}

// createNamespace creates ns through h.
func createNamespace(ctx context.Context, h client.Interface, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	resources.Namespaces.SetTypeMeta(ns)
	_, err := h.Create(ctx, ns, client.WriteOptions{})
	return err
}

// waitDefaultSA waits for the serviceaccount controller — which runs
// only on the leading server — to give namespace ns its default
// ServiceAccount.
func waitDefaultSA(t *testing.T, h client.Interface, ns string) {
	t.Helper()
	testkit.Eventually(t, 60*time.Second, func() error {
		_, err := h.Get(context.Background(), resources.ServiceAccounts, ns, "default")
		return err
	})
}

// TestHALeaderTakeover: three server processes; the leading one is
// SIGKILLed; the controllers resume on another (a namespace created after
// the kill gets its default ServiceAccount from the serviceaccount
// controller); with a second server killed the last one refuses writes
// with a Status instead of losing them, and once a killed server is
// restarted with its unchanged command line the cluster writes again and
// every object written before is there. Times are logged (docs/ha.md).
func TestHALeaderTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	bin := buildEverynode(t)
	ctx := context.Background()
	srv := startHACluster(t, bin)

	var leader *haServer
	testkit.Eventually(t, 60*time.Second, func() error {
		for _, s := range srv {
			if s.leading() {
				leader = s
				return nil
			}
		}
		return fmt.Errorf("no server leads the controllers yet")
	})
	var rest []*haServer
	for _, s := range srv {
		if s != leader {
			rest = append(rest, s)
		}
	}
	h := rest[0].admin(t)
	if err := createNamespace(ctx, h, "before-kill"); err != nil {
		t.Fatal(err)
	}
	waitDefaultSA(t, h, "before-kill")

	leader.kill(t)
	killed := time.Now()
	// Writes in flight while etcd elects a new leader (if the killed
	// server led etcd too) time out; a retry succeeds once it has.
	var refused int
	testkit.Eventually(t, 30*time.Second, func() error {
		err := createNamespace(ctx, h, "after-kill")
		if err != nil {
			refused++
		}
		return err
	})
	t.Logf("writes accepted again %s after the SIGKILL (%d refused meanwhile)", time.Since(killed).Round(10*time.Millisecond), refused)
	waitDefaultSA(t, h, "after-kill")
	t.Logf("controllers resumed %s after SIGKILL of the leading server %s", time.Since(killed).Round(10*time.Millisecond), leader.name)
	if !rest[0].leading() && !rest[1].leading() {
		t.Fatal("the default ServiceAccount appeared but no surviving server logs leading")
	}

	// Quorum lost: 1 of 3. A write is refused, not accepted and lost.
	rest[1].kill(t)
	wctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	err := createNamespace(wctx, h, "no-quorum")
	cancel()
	if err == nil {
		t.Fatal("a write was accepted by a server without quorum")
	}
	if !strings.Contains(err.Error(), "a majority of the servers is unreachable") {
		t.Fatalf("write without quorum: %v, want the 503 that says so", err)
	}
	t.Logf("write without quorum refused: %v", err)

	// One killed server returns with its unchanged command line.
	rest[1].start(t, bin)
	testkit.Eventually(t, 60*time.Second, func() error {
		return createNamespace(ctx, h, "healed")
	})
	for _, ns := range []string{"before-kill", "after-kill", "healed"} {
		if _, err := rest[1].admin(t).Get(ctx, resources.Namespaces, "", ns); err != nil {
			t.Errorf("namespace %s after the heal: %v", ns, err)
		}
	}
}
