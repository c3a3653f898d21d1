package server

// Gossip is a hint (docs/security.md): an attack with the gossip key.

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// forgedDead is a memberlist "dead" message (memberlist's net.go: message
// type 5, then the msgpack map {Incarnation, Node, From}) declaring node
// dead on behalf of from, sealed as memberlist seals packets with the
// cluster's key (security.go: version 1, a 12-byte nonce, AES-GCM, no
// label). Whoever holds the gossip key can send it; no membership is needed.
func forgedDead(t *testing.T, key []byte, node, from string, incarnation uint32) []byte {
	t.Helper()
	// fixstr (shorter than 32 bytes)
	str := func(b []byte, s string) []byte { return append(append(b, 0xa0|byte(len(s))), s...) }
	msg := []byte{5, 0x83} // deadMsg, then a fixmap of 3
	msg = str(msg, "Incarnation")
	msg = binary.BigEndian.AppendUint32(append(msg, 0xce), incarnation) // uint32
	msg = str(str(msg, "Node"), node)
	msg = str(str(msg, "From"), from)
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		t.Fatal(err)
	}
	return gcm.Seal(append([]byte{1}, nonce...), nonce, msg, nil)
}

// TestForgedDeathDoesNotEvict: a rogue holding the gossip key keeps
// declaring a healthy agent dead to the server's member, which believes it
// (the test sees the member list it Dead); the Node stays Ready, gets no
// taint, and its pod stays. When the agent really dies (stopped without
// leaving, as a crash: its member goes silent and its API streams end), the
// Node turns Unknown and is tainted unreachable.
func TestForgedDeathDoesNotEvict(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	defer testkit.LeakCheck(t)()
	cfg := localConfig(t)
	cfg.Agent, cfg.GossipName = nil, "server"
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	forgedDeathAttack(t, s, s)
}

// TestForgedDeathTwoServers: the same attack on two servers sharing an
// etcd, the victim's agent connected to the server that does not run the
// controllers: the leader learns from the other server that the victim is
// connected (GET /everynode/v1/connected-nodes) and leaves it Ready; when
// the agent dies, the Node turns Unknown.
func TestForgedDeathTwoServers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	defer testkit.LeakCheck(t)()
	ctx := context.Background()
	etcdURL := "unix://" + filepath.Join(t.TempDir(), "etcd", "etcd.sock")
	etcdDir := t.TempDir()
	etcdHost, err := Start(ctx, Config{DataDir: etcdDir, Listen: "127.0.0.1:0", EtcdClientURL: etcdURL,
		CompactInterval: -1, Logger: testLogger(t), Membership: nodelifecycle.NewStaticMembership(), NoControllers: true})
	if err != nil {
		t.Fatal(err)
	}
	defer etcdHost.Close()
	start := func(name string, noControllers bool, keysFrom string) *Server {
		cfg := localConfig(t)
		cfg.Agent, cfg.GossipName, cfg.EtcdEndpoints, cfg.NoControllers = nil, name, []string{etcdURL}, noControllers
		// Every server of the shared etcd decrypts its Secrets with the same
		// keys (docs/security.md §6).
		keys, err := os.ReadFile(filepath.Join(etcdDir, EncryptionKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg.DataDir, EncryptionKeyFile), keys, 0o600); err != nil {
			t.Fatal(err)
		}
		if keysFrom != "" {
			for _, f := range []string{pki.CACertFile, pki.CAKeyFile, pki.SecretFile} {
				b, err := os.ReadFile(filepath.Join(keysFrom, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(cfg.DataDir, f), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		s, err := Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	leader := start("server-a", false, "")
	defer leader.Close()
	other := start("server-b", true, leader.cfg.DataDir)
	defer other.Close()
	forgedDeathAttack(t, leader, other)
}

// forgedDeathAttack runs the attack: the victim's agent joins through
// serving, the rogue's messages go to leader's gossip member, whose
// controllers decide.
func forgedDeathAttack(t *testing.T, leader, serving *Server) {
	ctx := context.Background()
	s := leader
	a, err := agent.Start(ctx, agent.Config{
		Server: serving.URL(), Token: serving.JoinToken(), DataDir: t.TempDir(), Logger: testLogger(t),
		Node:   agent.NodeOptions{Name: "victim", IP: "127.0.0.1", Runtime: agent.RuntimeFake, LogListen: "127.0.0.1:0"},
		Gossip: agent.GossipOptions{Addr: "127.0.0.1:0", Profile: gossip.ProfileLocal, LeaveOnStop: false},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	admin := s.Admin()
	readyOf := func() (corev1.ConditionStatus, []corev1.Taint, error) {
		o, err := admin.Get(ctx, resources.Nodes, "", "victim")
		if err != nil {
			return "", nil, err
		}
		n := o.(*corev1.Node)
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status, n.Spec.Taints, nil
			}
		}
		return "", n.Spec.Taints, nil
	}
	testkit.EventuallyTrue(t, 30*time.Second, "victim Ready", func() bool {
		st, _, err := readyOf()
		return err == nil && st == corev1.ConditionTrue
	})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "workload", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "victim", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := admin.Create(ctx, pod, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Every change of the victim's Node during the attack is seen, so a
	// flip the agent's refutations undid again is caught too.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := admin.Watch(watchCtx, resources.Nodes, "", client.ListOptions{FieldSelector: "metadata.name=victim"})
	if err != nil {
		t.Fatal(err)
	}
	var flips []string
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					flips = append(flips, string(c.Status)+" "+c.Reason)
				}
			}
			for _, tt := range n.Spec.Taints {
				flips = append(flips, "taint "+tt.Key)
			}
		}
	}()

	// The rogue: a forged death every 20 ms, each with a higher
	// incarnation than the victim's refutation of the one before.
	conn, err := net.Dial("udp", s.Member().LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	forgeCtx, stopForging := context.WithCancel(ctx)
	var forging sync.WaitGroup
	forging.Add(1)
	go func() {
		defer forging.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for inc := uint32(1 << 20); ; inc += 1 << 10 {
			_, _ = conn.Write(forgedDead(t, s.GossipKey(), "victim", "rogue", inc))
			select {
			case <-forgeCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	// The server's member believes it, several times.
	deaths := 0
	testkit.EventuallyTrue(t, 30*time.Second, "the server's member lists the victim dead 5 times", func() bool {
		for _, m := range s.Member().Members() {
			if m.Name == "victim" && m.State == gossip.Dead {
				deaths++
				time.Sleep(100 * time.Millisecond) // count distinct deaths, not one read twice
			}
		}
		return deaths >= 5
	})
	stopForging()
	forging.Wait()
	// A last round of the controller after the attack: a hint from the
	// victim's refutation has come; any write it made is on the watch.
	time.Sleep(time.Second)
	w.Stop()
	stopWatch()
	<-watched
	if len(flips) > 0 {
		t.Fatalf("forged deaths changed the victim's Node: %v", flips)
	}
	st, taints, err := readyOf()
	if err != nil {
		t.Fatal(err)
	}
	if st != corev1.ConditionTrue || len(taints) != 0 {
		t.Fatalf("after forged deaths: victim Ready=%s, taints %v; want Ready=True, no taint", st, taints)
	}
	o, err := admin.Get(ctx, resources.Pods, "default", "workload")
	if err != nil || o.GetDeletionTimestamp() != nil {
		t.Fatalf("the victim's pod after forged deaths: %v (deleting: %v)", err, o != nil && o.GetDeletionTimestamp() != nil)
	}

	// A real death: the agent stops without leaving.
	killed := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyTrue(t, 30*time.Second, "victim Unknown and tainted unreachable", func() bool {
		st, taints, err := readyOf()
		if err != nil || st != corev1.ConditionUnknown {
			return false
		}
		for _, tt := range taints {
			if tt.Key == corev1.TaintNodeUnreachable && tt.Effect == corev1.TaintEffectNoExecute {
				return true
			}
		}
		return false
	})
	t.Logf("agent stopped without leaving → Node Ready=Unknown in %s", time.Since(killed).Round(10*time.Millisecond))
}
