package nodelifecycle

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// fakeConnections is a Connections the test sets.
type fakeConnections struct {
	mu      sync.Mutex
	nodes   []string
	changed chan struct{}
}

func newFakeConnections(nodes ...string) *fakeConnections {
	return &fakeConnections{nodes: nodes, changed: make(chan struct{}, 1)}
}

func (f *fakeConnections) Connected() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.nodes)
}

func (f *fakeConnections) Changed() <-chan struct{} { return f.changed }

func (f *fakeConnections) set(nodes ...string) {
	f.mu.Lock()
	f.nodes = nodes
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

func TestCorroboratedMembers(t *testing.T) {
	ms := NewStaticMembership(Member{Name: "alive", Alive: true}, Member{Name: "dead"}, Member{Name: "gone"}, Member{Name: "left", Left: true})
	c := Corroborate(ms, newFakeConnections("dead", "left", "only-connected"))
	got := c.Members()
	slices.SortFunc(got, func(a, b Member) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	want := []Member{
		{Name: "alive", Alive: true}, {Name: "dead", Connected: true}, {Name: "gone"},
		{Name: "left", Left: true, Connected: true}, {Name: "only-connected", Connected: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Members() = %+v, want %+v", got, want)
	}
}

// TestRunGossipIsAHint: gossip declaring a connected node dead changes
// nothing and evicts nothing; once the node's stream is gone too, the node
// turns Unknown and its pod is evicted, on the connections' hint alone.
func TestRunGossipIsAHint(t *testing.T) {
	checkLeaks := testkit.LeakCheck(t)
	members := NewStaticMembership(Member{Name: "n1", Alive: true})
	conns := newFakeConnections("n1")
	ms := Corroborate(members, conns)
	fc := fake.New(node("n1", t0, ""), pod("plain", "n1", true))
	c, err := New(Config{Client: fc, Membership: ms, ReconcileInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx, 1) }()
	relay := make(chan struct{})
	go func() { ms.Run(ctx); close(relay) }()
	readyIs := func() corev1.ConditionStatus {
		o, _ := fc.Get(context.Background(), resources.Nodes, "", "n1")
		if r := readyCondition(o.(*corev1.Node)); r != nil {
			return r.Status
		}
		return ""
	}
	testkit.EventuallyTrue(t, 10*time.Second, "node ready", func() bool { return readyIs() == corev1.ConditionTrue })

	// The forged death: gossip says dead, the node is still connected. Its
	// reads are counted so the test knows the controller saw it.
	before := members.Reads()
	members.Replace(Member{Name: "n1"})
	testkit.EventuallyTrue(t, 10*time.Second, "membership read after the hint", func() bool { return members.Reads() > before })
	before = members.Reads()
	conns.set("n1") // another round, still connected
	testkit.EventuallyTrue(t, 10*time.Second, "membership read again", func() bool { return members.Reads() > before && c.queue.Len() == 0 })
	if s := readyIs(); s != corev1.ConditionTrue {
		t.Fatalf("a connected node declared dead by gossip is Ready=%s", s)
	}
	if _, err := fc.Get(context.Background(), resources.Pods, "default", "plain"); err != nil {
		t.Fatalf("pod of a connected node: %v", err)
	}

	// The stream ends: now gossip is corroborated.
	conns.set()
	testkit.EventuallyTrue(t, 10*time.Second, "node unknown", func() bool { return readyIs() == corev1.ConditionUnknown })
	testkit.EventuallyTrue(t, 10*time.Second, "eviction", func() bool {
		o, err := fc.Get(context.Background(), resources.Pods, "default", "plain")
		return apierrors.IsNotFound(err) || (err == nil && o.GetDeletionTimestamp() != nil)
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	<-relay
	checkLeaks()
}
