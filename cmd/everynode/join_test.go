package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/cmd/everynode/internal/cli"
	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/server"
)

// joinWait bounds each convergence of the join tests.
const joinWait = 30 * time.Second

// runningAgent is an in-process "everynode agent".
type runningAgent struct {
	name    string
	dataDir string
	cancel  context.CancelFunc
	done    chan error
	log     *testkit.Buffer
}

// startAgent runs "everynode agent" for node name against srv with the fake
// runtime and the local gossip profile, plus extra flags.
func startAgent(t *testing.T, srv *runningServer, name, dataDir string, extra ...string) *runningAgent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &runningAgent{name: name, dataDir: dataDir, cancel: cancel, done: make(chan error, 1), log: &testkit.Buffer{}}
	args := append([]string{"agent", "--server", srv.url(t), "--token", srv.joinToken(t), "--name", name,
		"--runtime", "fake", "--fake-images", "busybox", "--data-dir", dataDir,
		"--gossip", "127.0.0.1:0", "--gossip-profile", "local", "--log-listen", "127.0.0.1:0", "--log-level", "warn"}, extra...) // a later --gossip wins
	m := &cli.Main{Getenv: func(string) string { return "" }}
	go func() { a.done <- m.Run(ctx, args, nil, &testkit.Buffer{}, a.log) }()
	t.Cleanup(func() { a.stop(t) })
	return a
}

// stop cancels the agent and waits for it; a second call only waits.
func (a *runningAgent) stop(t *testing.T) {
	t.Helper()
	a.cancel()
	select {
	case err := <-a.done:
		a.done <- err
		if err != nil {
			t.Errorf("agent %s exited with %s\nlog:\n%s", a.name, cli.FormatError(err), a.log.String())
		}
	case <-time.After(joinWait):
		t.Errorf("agent %s did not stop within %s; log:\n%s", a.name, joinWait, a.log.String())
	}
}

func (s *runningServer) url(t *testing.T) string {
	t.Helper()
	cfg, err := client.LoadKubeconfigFrom([]string{s.kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Server
}

func (s *runningServer) joinToken(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(s.kubeconfig), pki.JoinTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// client returns an HTTPS client of the server with token ("" = admin).
func (s *runningServer) client(t *testing.T, token string) client.Interface {
	t.Helper()
	cfg, err := client.LoadKubeconfigFrom([]string{s.kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		cfg.Token = token
	}
	cfg.Timeout = 10 * time.Second
	h, err := client.NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// savedCredentials reads what the agent kept from its join.
func savedCredentials(t *testing.T, dataDir string) (token string, key []byte, seeds []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, agent.CredentialsFile))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dataDir, agent.CredentialsFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("credentials file mode %v (%v), want 0600", fi.Mode(), err)
	}
	var c struct {
		NodeToken   string   `json:"nodeToken"`
		GossipKey   []byte   `json:"gossipKey"`
		GossipSeeds []string `json:"gossipSeeds"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c.NodeToken, c.GossipKey, c.GossipSeeds
}

func getNode(ctx context.Context, c client.Interface, name string) (*corev1.Node, error) {
	o, err := c.Get(ctx, resources.Nodes, "", name)
	if err != nil {
		return nil, err
	}
	return o.(*corev1.Node), nil
}

func readyOf(n *corev1.Node) (corev1.ConditionStatus, string) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status, c.Reason
		}
	}
	return "", ""
}

// waitNodeReady polls the Node until its Ready status is want and returns
// how long that took.
func waitNodeReady(t *testing.T, c client.Interface, name string, want corev1.ConditionStatus, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	testkit.Eventually(t, within, func() error {
		n, err := getNode(context.Background(), c, name)
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		if st, reason := readyOf(n); st != want {
			return fmt.Errorf("node %s Ready=%s (%s), want Ready=%s", name, st, reason, want)
		}
		return nil
	})
	return time.Since(start)
}

func barePod(name, node string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}
	resources.Pods.SetTypeMeta(p)
	return p
}

// TestJoinAndNodeRestriction: agents join a real server through the join
// token, their Nodes carry the flags' labels and taints and the well-known
// labels, a wrong token is refused with one line and registers nothing, and
// a node credential may write only its own Node and its own pods' status.
func TestJoinAndNodeRestriction(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	ctx := context.Background()
	srv := startServer(t, t.TempDir())
	admin := srv.client(t, "")

	a1Dir := t.TempDir()
	startAgent(t, srv, "w-a1", a1Dir, "--labels", "zone=edge,disk=ssd", "--taints", "dedicated=edge:NoSchedule,gpu:NoExecute")
	startAgent(t, srv, "w-a2", t.TempDir())
	waitNodeReady(t, admin, "w-a1", corev1.ConditionTrue, joinWait)
	waitNodeReady(t, admin, "w-a2", corev1.ConditionTrue, joinWait)

	t.Run("labels and taints", func(t *testing.T) {
		n, err := getNode(ctx, admin, "w-a1")
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{"zone": "edge", "disk": "ssd", "kubernetes.io/hostname": "w-a1"} {
			if n.Labels[k] != v {
				t.Errorf("label %s=%q, want %q (labels %v)", k, n.Labels[k], v, n.Labels)
			}
		}
		for _, k := range []string{"kubernetes.io/os", "kubernetes.io/arch"} {
			if n.Labels[k] == "" {
				t.Errorf("no label %s (labels %v)", k, n.Labels)
			}
		}
		want := map[string]corev1.Taint{
			"dedicated": {Key: "dedicated", Value: "edge", Effect: corev1.TaintEffectNoSchedule},
			"gpu":       {Key: "gpu", Effect: corev1.TaintEffectNoExecute},
		}
		for _, tn := range n.Spec.Taints {
			if w, ok := want[tn.Key]; ok && w.Value == tn.Value && w.Effect == tn.Effect {
				delete(want, tn.Key)
			}
		}
		if len(want) > 0 {
			t.Errorf("taints %v lack %v", n.Spec.Taints, want)
		}
	})

	t.Run("wrong token refused", func(t *testing.T) {
		good := srv.joinToken(t)
		bad := good[:len(good)-4] + "beef"
		if bad == good {
			bad = good[:len(good)-4] + "dead"
		}
		m := &cli.Main{Getenv: func(string) string { return "" }}
		err := m.Run(ctx, []string{"agent", "--server", srv.url(t), "--token", bad, "--name", "w-bad",
			"--runtime", "fake", "--data-dir", t.TempDir(), "--gossip", "127.0.0.1:0"}, nil, &testkit.Buffer{}, &testkit.Buffer{})
		want := "error: join refused: invalid join token; copy the join-token file from the server's data directory"
		if err == nil || cli.FormatError(err) != want {
			t.Fatalf("got %v, want the line %q", err, want)
		}
		if _, err := getNode(ctx, admin, "w-bad"); !apierrors.IsNotFound(err) {
			t.Errorf("node w-bad: %v, want NotFound", err)
		}
	})

	t.Run("node credential", func(t *testing.T) {
		token, _, _ := savedCredentials(t, a1Dir)
		a1 := srv.client(t, token)
		for _, p := range []*corev1.Pod{barePod("w-mine", "w-a1"), barePod("w-theirs", "w-a2")} {
			if _, err := admin.Create(ctx, p, client.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		statusPatch := []byte(`{"status":{"message":"written by w-a1"}}`)
		checks := []struct {
			what string
			do   func() error
			code int // 0: success
		}{
			{"read own node", func() error { _, err := a1.Get(ctx, resources.Nodes, "", "w-a1"); return err }, 0},
			{"read another node", func() error { _, err := a1.Get(ctx, resources.Nodes, "", "w-a2"); return err }, 403},
			{"list every pod", func() error { _, _, err := a1.List(ctx, resources.Pods, "", client.ListOptions{}); return err }, 403},
			{"list own pods", func() error {
				_, _, err := a1.List(ctx, resources.Pods, "", client.ListOptions{FieldSelector: "spec.nodeName=w-a1"})
				return err
			}, 0},
			{"read another node's pod", func() error { _, err := a1.Get(ctx, resources.Pods, "default", "w-theirs"); return err }, 403},
			{"label own node", func() error {
				_, err := a1.Patch(ctx, resources.Nodes, "", "w-a1", types.MergePatchType, []byte(`{"metadata":{"labels":{"own":"yes"}}}`), client.WriteOptions{}, "")
				return err
			}, 0},
			{"write another node", func() error {
				_, err := a1.Patch(ctx, resources.Nodes, "", "w-a2", types.MergePatchType, []byte(`{"metadata":{"labels":{"evil":"yes"}}}`), client.WriteOptions{}, "")
				return err
			}, 403},
			{"delete another node", func() error {
				_, err := a1.Delete(ctx, resources.Nodes, "", "w-a2", metav1.DeleteOptions{})
				return err
			}, 403},
			{"own pod status", func() error {
				_, err := a1.Patch(ctx, resources.Pods, "default", "w-mine", types.MergePatchType, statusPatch, client.WriteOptions{}, "status")
				return err
			}, 0},
			{"another node's pod status", func() error {
				_, err := a1.Patch(ctx, resources.Pods, "default", "w-theirs", types.MergePatchType, statusPatch, client.WriteOptions{}, "status")
				return err
			}, 403},
			{"delete another node's pod", func() error {
				_, err := a1.Delete(ctx, resources.Pods, "default", "w-theirs", metav1.DeleteOptions{})
				return err
			}, 403},
			{"create a pod", func() error { _, err := a1.Create(ctx, barePod("w-new", "w-a1"), client.WriteOptions{}); return err }, 403},
		}
		for _, c := range checks {
			err := c.do()
			switch {
			case c.code == 0 && err != nil:
				t.Errorf("%s: %v, want success", c.what, err)
			case c.code == 403 && !apierrors.IsForbidden(err):
				t.Errorf("%s: %v, want 403 Forbidden", c.what, err)
			case c.code == 403:
				t.Logf("%s: %v", c.what, err)
			}
		}
	})

	t.Run("gossip without the key", func(t *testing.T) {
		_, key, seeds := savedCredentials(t, a1Dir)
		if len(seeds) == 0 || len(key) != 32 {
			t.Fatalf("join gave seeds %v and a %d-byte key", seeds, len(key))
		}
		wrong := make([]byte, 32)
		_, _ = rand.Read(wrong)
		intruder := newMember(t, "w-intruder", wrong)
		if n, err := intruder.Join(seeds); err == nil {
			t.Fatalf("a member with another key joined %d members", n)
		} else {
			t.Logf("refused as expected: %v", err)
		}
		friend := newMember(t, "w-friend", key)
		if _, err := friend.Join(seeds); err != nil {
			t.Fatalf("a member with the key cannot join: %v", err)
		}
		testkit.Eventually(t, 5*time.Second, func() error {
			if names := memberNames(friend); !slices.Contains(names, "w-a1") {
				return fmt.Errorf("friend does not see w-a1: %v", names)
			}
			return nil
		})
		// The intruder never gets in, also not through the friend's view
		// of the pool as gossip spreads.
		testkit.Consistently(t, 500*time.Millisecond, func() error {
			if names := memberNames(friend); slices.Contains(names, "w-intruder") {
				return fmt.Errorf("the intruder is a member: %v", names)
			}
			return nil
		})
	})
}

func newMember(t *testing.T, name string, key []byte) *gossip.Member {
	t.Helper()
	cfg := gossip.DefaultLocalConfig()
	cfg.Name, cfg.Key, cfg.Meta = name, key, gossip.Meta{Role: gossip.RoleAgent}
	m, err := gossip.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func memberNames(m *gossip.Member) []string {
	var out []string
	for _, mi := range m.Members() {
		if mi.State == gossip.Alive {
			out = append(out, mi.Name)
		}
	}
	return out
}

// TestAgentStopsAndReturns: an agent that stops without leaving (a crash)
// makes its Node Ready=Unknown within the gossip detection time; one that
// stops gracefully makes it Ready=False; a returning agent, restarted from
// its saved credentials, makes it Ready=True again.
func TestAgentStopsAndReturns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	srv := startServer(t, t.TempDir())
	admin := srv.client(t, "")
	crashDir, leaveDir := t.TempDir(), t.TempDir()
	// A returning node comes back at the same gossip address, as one with
	// the default port does (memberlist refuses a dead member's name at a
	// new address).
	crashAddr, leaveAddr := freeAddr(t), freeAddr(t)
	crash := startAgent(t, srv, "w-crash", crashDir, "--leave-on-stop=false", "--gossip", crashAddr)
	leave := startAgent(t, srv, "w-leave", leaveDir, "--gossip", leaveAddr)
	waitNodeReady(t, admin, "w-crash", corev1.ConditionTrue, joinWait)
	waitNodeReady(t, admin, "w-leave", corev1.ConditionTrue, joinWait)

	crash.stop(t)
	took := waitNodeReady(t, admin, "w-crash", corev1.ConditionUnknown, 20*time.Second)
	t.Logf("agent stopped without leaving: Node Ready=Unknown after %s (gossip profile local)", took.Round(10*time.Millisecond))

	leave.stop(t)
	took = waitNodeReady(t, admin, "w-leave", corev1.ConditionFalse, 20*time.Second)
	t.Logf("agent stopped gracefully: Node Ready=False after %s", took.Round(10*time.Millisecond))
	if n, err := getNode(context.Background(), admin, "w-leave"); err == nil {
		if _, reason := readyOf(n); reason != "MemberLeft" {
			t.Errorf("Ready=False reason %q, want MemberLeft", reason)
		}
	}

	t0 := time.Now()
	startAgent(t, srv, "w-crash", crashDir, "--gossip", crashAddr)
	startAgent(t, srv, "w-leave", leaveDir, "--gossip", leaveAddr)
	waitNodeReady(t, admin, "w-crash", corev1.ConditionTrue, joinWait)
	waitNodeReady(t, admin, "w-leave", corev1.ConditionTrue, joinWait)
	t.Logf("agents back: both Nodes Ready=True after %s", time.Since(t0).Round(10*time.Millisecond))
	// It stays Ready: membership agrees with the agent (the node lifecycle
	// controller would flip a node it thinks dead back to Unknown).
	testkit.Consistently(t, 3*time.Second, func() error {
		for _, name := range []string{"w-crash", "w-leave"} {
			if n, err := getNode(context.Background(), admin, name); err == nil {
				if st, reason := readyOf(n); st != corev1.ConditionTrue {
					return fmt.Errorf("node %s went Ready=%s (%s) after returning", name, st, reason)
				}
			}
		}
		return nil
	})
}

// freeAddr returns a loopback host:port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServerAt runs "everynode server --no-agent" on fixed addresses, so
// it can be restarted where its agents expect it.
func startServerAt(t *testing.T, dataDir, listen, gossipAddr string) *runningServer {
	t.Helper()
	return startServerArgs(t, dataDir, "--listen", listen, "--no-agent", "--gossip", gossipAddr, "--gossip-profile", "local", "--log-level", "warn")
}

// TestAgentOfflineRestart: an agent restarted while the server is down
// starts from its saved credentials and pods, and when the server returns
// at its address the agent rejoins (API and gossip): the Node is Ready again
// and its pod is the same object, Running.
func TestAgentOfflineRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	ctx := context.Background()
	srvDir, agentDir := t.TempDir(), t.TempDir()
	listen, gossipAddr := freeAddr(t), freeAddr(t)
	srv := startServerAt(t, srvDir, listen, gossipAddr)
	admin := srv.client(t, "")
	a := startAgent(t, srv, "w-offline", agentDir)
	waitNodeReady(t, admin, "w-offline", corev1.ConditionTrue, joinWait)
	created, err := admin.Create(ctx, barePod("w-offline-pod", "w-offline"), client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPodRunning(t, admin, "w-offline-pod", created.GetUID())

	a.stop(t)
	srv.stop(t)
	a = startAgent(t, srv, "w-offline", agentDir)
	running := func() error {
		select {
		case err := <-a.done:
			a.done <- err
			return fmt.Errorf("agent exited with the server down: %v\n%s", err, a.log.String())
		default:
			return nil
		}
	}
	testkit.Eventually(t, joinWait, func() error {
		if err := running(); err != nil {
			return err
		}
		if !a.log.Contains("starting offline") {
			return fmt.Errorf("agent log does not say it started offline:\n%s", a.log.String())
		}
		return nil
	})
	testkit.Consistently(t, 2*time.Second, running)

	srv = startServerAt(t, srvDir, listen, gossipAddr)
	admin = srv.client(t, "")
	took := waitNodeReady(t, admin, "w-offline", corev1.ConditionTrue, joinWait)
	t.Logf("server back: Node Ready=True after %s", took.Round(10*time.Millisecond))
	waitPodRunning(t, admin, "w-offline-pod", created.GetUID())

	// The agent is back in the server's gossip pool too (it rejoins its
	// seeds once it sees no live server), so the node lifecycle controller
	// will not mark it unreachable when its grace ends.
	_, key, seeds := savedCredentials(t, agentDir)
	probe := newMember(t, "w-probe", key)
	start := time.Now()
	testkit.Eventually(t, 20*time.Second, func() error {
		if _, err := probe.Join(seeds); err != nil {
			return fmt.Errorf("probe cannot join %v: %w", seeds, err)
		}
		if names := memberNames(probe); !slices.Contains(names, "w-offline") {
			return fmt.Errorf("w-offline is not in the server's gossip pool: %v", names)
		}
		return nil
	})
	t.Logf("agent back in the gossip pool %s after the probe started", time.Since(start).Round(10*time.Millisecond))
}

func waitPodRunning(t *testing.T, c client.Interface, name string, uid types.UID) {
	t.Helper()
	testkit.Eventually(t, joinWait, func() error {
		o, err := c.Get(context.Background(), resources.Pods, "default", name)
		if err != nil {
			return fmt.Errorf("pod %s: %w", name, err)
		}
		p := o.(*corev1.Pod)
		if p.UID != uid {
			t.Fatalf("pod %s has uid %s, want %s", name, p.UID, uid)
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s is %s, want Running", name, p.Status.Phase)
		}
		return nil
	})
}

// startServerArgs runs "everynode server" with args (plus --data-dir) and
// waits for its kubeconfig.
func startServerArgs(t *testing.T, dataDir string, args ...string) *runningServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &runningServer{cancel: cancel, done: make(chan error, 1), out: &testkit.Buffer{}, log: &testkit.Buffer{},
		kubeconfig: filepath.Join(dataDir, cli.AdminKubeconfigFile)}
	// A kubeconfig left by an earlier run names its old port.
	if err := os.Remove(s.kubeconfig); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	m := &cli.Main{Getenv: func(string) string { return "" }}
	go func() {
		s.done <- m.Run(ctx, append([]string{"server", "--data-dir", dataDir}, args...), nil, s.out, s.log)
	}()
	t.Cleanup(func() { s.stop(t) })
	// The server writes its kubeconfig once /readyz answers.
	testkit.Eventually(t, 60*time.Second, func() error {
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("server exited before it was ready: %v\nlog:\n%s", err, s.log.String())
		default:
		}
		if _, err := os.Stat(s.kubeconfig); err != nil {
			return fmt.Errorf("%w; log:\n%s", err, s.log.String())
		}
		return nil
	})
	return s
}

// gossipAddrOf reads a server's gossip address from its log.
func gossipAddrOf(t *testing.T, s *runningServer) string {
	t.Helper()
	for _, f := range strings.Fields(s.log.String()) {
		if addr, ok := strings.CutPrefix(f, "gossip="); ok {
			return addr
		}
	}
	t.Fatalf("no gossip= in the server log:\n%s", s.log.String())
	return ""
}

// TestTwoServersOneLeader: two servers on one etcd (sharing the cluster's
// key material, as documented) form one gossip pool through etcd, and run
// the controllers one at a time; when the leader stops, the other takes over.
func TestTwoServersOneLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	etcdDir := t.TempDir()
	// The shared etcd: the embedded etcd of a server that runs neither
	// gossip nor controllers, on a unix socket in a private directory
	// (etcd never listens on TCP; the server makes the new directory 0700).
	etcdURL := "unix://" + filepath.Join(t.TempDir(), "etcd", "etcd.sock")
	ctx := context.Background()
	etcdHost, err := server.Start(ctx, server.Config{DataDir: etcdDir, Listen: "127.0.0.1:0", EtcdClientURL: etcdURL,
		CompactInterval: -1, Membership: nodelifecycle.NewStaticMembership(), NoControllers: true})
	if err != nil {
		t.Fatal(err)
	}
	defer etcdHost.Close()

	dirA, dirB := t.TempDir(), t.TempDir()
	common := []string{"--listen", "127.0.0.1:0", "--no-agent", "--gossip", "127.0.0.1:0", "--gossip-profile", "local",
		"--etcd-endpoints", etcdURL, "--log-level", "info"}
	// The shared etcd's Secrets are encrypted with the keys of the server
	// that created it: every server using it holds them.
	keys, err := os.ReadFile(filepath.Join(etcdDir, server.EncryptionKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirA, server.EncryptionKeyFile), keys, 0o600); err != nil {
		t.Fatal(err)
	}
	a := startServerArgs(t, dirA, common...)
	for _, f := range []string{pki.CACertFile, pki.CAKeyFile, pki.SecretFile, server.EncryptionKeyFile} {
		b, err := os.ReadFile(filepath.Join(dirA, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dirB, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := startServerArgs(t, dirB, common...)
	if a.joinToken(t) != b.joinToken(t) {
		t.Fatal("servers sharing the key material have different join tokens")
	}
	// The servers find each other's gossip members through etcd: one pool.
	_, key, _ := func() (string, []byte, []string) {
		dir := t.TempDir()
		startAgent(t, a, "w-ha", dir)
		waitNodeReady(t, a.client(t, ""), "w-ha", corev1.ConditionTrue, joinWait)
		return savedCredentials(t, dir)
	}()
	probe := newMember(t, "w-ha-probe", key)
	testkit.EventuallyTrue(t, joinWait, "server B's gossip pool to hold server A and A's agent", func() bool {
		if _, err := probe.Join([]string{gossipAddrOf(t, b)}); err != nil {
			return false
		}
		servers := 0
		for _, mi := range probe.Members() {
			if mi.State == gossip.Alive && mi.Meta.Role == gossip.RoleServer {
				servers++
			}
		}
		return servers == 2 && slices.Contains(memberNames(probe), "w-ha")
	})

	const leading = "leading: controllers start"
	testkit.EventuallyTrue(t, joinWait, "a leader", func() bool {
		return a.log.Contains(leading) || b.log.Contains(leading)
	})
	leader, follower := a, b
	if strings.Contains(b.log.String(), leading) {
		leader, follower = b, a
	}
	if strings.Contains(follower.log.String(), leading) {
		t.Fatal("both servers lead")
	}
	leader.stop(t)
	start := time.Now()
	testkit.EventuallyTrue(t, joinWait, "the other server to lead", func() bool { return follower.log.Contains(leading) })
	t.Logf("the other server leads %s after the leader stopped", time.Since(start).Round(10*time.Millisecond))

	// Its controllers work: a DaemonSet applied through it gets its status.
	ds := filepath.Join(t.TempDir(), "ds.yaml")
	os.WriteFile(ds, []byte("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ha, namespace: default}\nspec:\n  selector: {matchLabels: {app: ha}}\n  template:\n    metadata: {labels: {app: ha}}\n    spec: {containers: [{name: c, image: busybox}]}\n"), 0o600)
	follower.mustRun(t, "apply", "-f", ds)
	admin := follower.client(t, "")
	testkit.EventuallyTrue(t, joinWait, "the DaemonSet's status from the new leader's controller", func() bool {
		o, err := admin.Get(ctx, resources.DaemonSets, "default", "ha")
		return err == nil && o.(*appsv1.DaemonSet).Status.ObservedGeneration == 1
	})
}
