package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func node(name string, created time.Time, ready corev1.ConditionStatus, taints ...corev1.Taint) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}, Spec: corev1.NodeSpec{Taints: taints}}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "x"}}
	}
	return n
}

func nodeWithReason(name string, created time.Time, ready corev1.ConditionStatus, reason string) *corev1.Node {
	n := node(name, created, ready)
	n.Status.Conditions[0].Reason = reason
	return n
}

func TestDesiredReady(t *testing.T) {
	now := t0.Add(time.Hour)
	grace := 40 * time.Second
	cases := []struct {
		name    string
		node    *corev1.Node
		member  Member
		known   bool
		want    corev1.ConditionStatus
		changed bool
	}{
		{"alive, no condition", node("n", t0, ""), Member{Name: "n", Alive: true}, true, corev1.ConditionTrue, true},
		{"alive, already ready", node("n", t0, corev1.ConditionTrue), Member{Name: "n", Alive: true}, true, corev1.ConditionTrue, false},
		{"alive, was unknown", node("n", t0, corev1.ConditionUnknown), Member{Name: "n", Alive: true}, true, corev1.ConditionTrue, true},
		{"alive, node says not ready", node("n", t0, corev1.ConditionFalse), Member{Name: "n", Alive: true}, true, corev1.ConditionFalse, false},
		{"dead", node("n", t0, corev1.ConditionTrue), Member{Name: "n", Alive: false}, true, corev1.ConditionUnknown, true},
		{"dead, node said not ready", node("n", t0, corev1.ConditionFalse), Member{Name: "n", Alive: false}, true, corev1.ConditionUnknown, true},
		{"dead, already unknown", node("n", t0, corev1.ConditionUnknown), Member{Name: "n", Alive: false}, true, corev1.ConditionUnknown, false},
		{"unknown to membership, old node", node("n", t0, corev1.ConditionTrue), Member{}, false, corev1.ConditionUnknown, true},
		{"unknown to membership, new node in grace", node("n", now.Add(-10*time.Second), corev1.ConditionTrue), Member{}, false, corev1.ConditionTrue, false},
		{"unknown, new node without condition", node("n", now.Add(-10*time.Second), ""), Member{}, false, "", false},
		{"unknown to membership, old node, controller just started", node("n", t0, corev1.ConditionTrue), Member{}, false, corev1.ConditionTrue, false},
		{"left", node("n", t0, corev1.ConditionTrue), Member{Name: "n", Left: true}, true, corev1.ConditionFalse, true},
		// Gossip is a hint: what it says of a connected node changes nothing.
		{"dead but connected (forged death)", node("n", t0, corev1.ConditionTrue), Member{Name: "n", Connected: true}, true, corev1.ConditionTrue, false},
		{"left but connected (forged leave)", node("n", t0, corev1.ConditionTrue), Member{Name: "n", Left: true, Connected: true}, true, corev1.ConditionTrue, false},
		{"unknown to membership, old node, connected", node("n", t0, corev1.ConditionTrue), Member{Name: "n", Connected: true}, false, corev1.ConditionTrue, false},
		{"dead, was unknown, reconnected before gossip agrees", node("n", t0, corev1.ConditionUnknown), Member{Name: "n", Connected: true}, true, corev1.ConditionUnknown, false},
		{"dead and connected, no condition", node("n", t0, ""), Member{Name: "n", Connected: true}, true, "", false},
		{"alive and connected, was unknown", node("n", t0, corev1.ConditionUnknown), Member{Name: "n", Alive: true, Connected: true}, true, corev1.ConditionTrue, true},
		{"left, node said not ready itself", node("n", t0, corev1.ConditionFalse), Member{Name: "n", Left: true}, true, corev1.ConditionFalse, true},
		{"left, already marked", nodeWithReason("n", t0, corev1.ConditionFalse, ReasonMemberLeft), Member{Name: "n", Left: true}, true, corev1.ConditionFalse, false},
		{"back after leaving", nodeWithReason("n", t0, corev1.ConditionFalse, ReasonMemberLeft), Member{Name: "n", Alive: true}, true, corev1.ConditionTrue, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			started := time.Time{}
			if strings.Contains(c.name, "controller just started") {
				started = now.Add(-grace / 2)
			}
			cond, changed := desiredReady(c.node, c.member, c.known, now, grace, started)
			if cond.Status != c.want || changed != c.changed {
				t.Errorf("got %s changed=%t, want %s %t", cond.Status, changed, c.want, c.changed)
			}
			if changed && !cond.LastTransitionTime.Time.Equal(now) {
				t.Errorf("lastTransitionTime %v", cond.LastTransitionTime)
			}
		})
	}
}

func TestDesiredTaints(t *testing.T) {
	now := t0
	earlier := metav1.NewTime(t0.Add(-time.Minute))
	unreachable := corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &earlier}
	notReady := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute, TimeAdded: &earlier}
	user := corev1.Taint{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}
	notReadyNoSchedule := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	cond := func(s corev1.ConditionStatus) *corev1.NodeCondition {
		return &corev1.NodeCondition{Type: corev1.NodeReady, Status: s}
	}
	cases := []struct {
		name    string
		taints  []corev1.Taint
		ready   *corev1.NodeCondition
		want    []string
		changed bool
	}{
		{"ready, nothing", []corev1.Taint{user}, cond(corev1.ConditionTrue), []string{"dedicated"}, false},
		{"no condition, nothing", nil, nil, nil, false},
		{"unknown adds unreachable", []corev1.Taint{user}, cond(corev1.ConditionUnknown), []string{"dedicated", corev1.TaintNodeUnreachable}, true},
		{"false adds not-ready", nil, cond(corev1.ConditionFalse), []string{corev1.TaintNodeNotReady}, true},
		{"unknown keeps existing unreachable", []corev1.Taint{unreachable}, cond(corev1.ConditionUnknown), []string{corev1.TaintNodeUnreachable}, false},
		{"unknown swaps not-ready for unreachable", []corev1.Taint{notReady}, cond(corev1.ConditionUnknown), []string{corev1.TaintNodeUnreachable}, true},
		{"ready removes lifecycle taints only", []corev1.Taint{unreachable, user, notReadyNoSchedule}, cond(corev1.ConditionTrue), []string{"dedicated", corev1.TaintNodeNotReady}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, changed := desiredTaints(c.taints, c.ready, now)
			var keys []string
			for _, tt := range got {
				keys = append(keys, tt.Key)
				if tt.Key == corev1.TaintNodeUnreachable && !c.changed && !tt.TimeAdded.Equal(&earlier) {
					t.Errorf("timeAdded of kept taint changed")
				}
			}
			if fmt.Sprint(keys) != fmt.Sprint(c.want) || changed != c.changed {
				t.Errorf("got %v changed=%t, want %v %t", keys, changed, c.want, c.changed)
			}
		})
	}
}

func secs(n int64) *int64 { return &n }

func TestEvictionTime(t *testing.T) {
	now := t0.Add(time.Hour)
	added := metav1.NewTime(t0)
	unreachable := corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &added}
	daemonTolerations := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	cases := []struct {
		name        string
		taints      []corev1.Taint
		tolerations []corev1.Toleration
		evict       bool
		at          time.Time
	}{
		{"no taints", nil, nil, false, time.Time{}},
		{"NoSchedule only", []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}, nil, false, time.Time{}},
		{"untolerated NoExecute", []corev1.Taint{unreachable}, nil, true, now},
		{"daemon pod tolerates forever", []corev1.Taint{unreachable}, daemonTolerations, false, time.Time{}},
		{"tolerationSeconds 300", []corev1.Taint{unreachable},
			[]corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs(300)}},
			true, t0.Add(300 * time.Second)},
		{"tolerationSeconds 0", []corev1.Taint{unreachable},
			[]corev1.Toleration{{Operator: corev1.TolerationOpExists, TolerationSeconds: secs(0)}}, true, now},
		{"one of two taints untolerated", []corev1.Taint{unreachable, {Key: "other", Effect: corev1.TaintEffectNoExecute}}, daemonTolerations, true, now},
		{"smallest seconds wins", []corev1.Taint{unreachable, {Key: "other", Effect: corev1.TaintEffectNoExecute, TimeAdded: &added}},
			[]corev1.Toleration{
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, TolerationSeconds: secs(600)},
				{Key: "other", Operator: corev1.TolerationOpExists, TolerationSeconds: secs(60)}},
			true, t0.Add(60 * time.Second)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: c.tolerations}}
			at, evict := evictionTime(pod, c.taints, now)
			if evict != c.evict || !at.Equal(c.at) {
				t.Errorf("got (%v, %t), want (%v, %t)", at, evict, c.at, c.evict)
			}
		})
	}
}

func pod(name, nodeName string, ready bool, tolerations ...corev1.Toleration) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       corev1.PodSpec{NodeName: nodeName, Tolerations: tolerations, Containers: []corev1.Container{{Name: "c", Image: "img"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

type harness struct {
	c       *Controller
	fc      *fake.Client
	members *StaticMembership
	clock   *testingclock.FakeClock
}

// newHarness seeds the fake API and the caches with objs.
func newHarness(t *testing.T, members *StaticMembership, objs ...resources.Object) *harness {
	t.Helper()
	fc := fake.New()
	clk := testingclock.NewFakeClock(t0.Add(time.Hour))
	for _, o := range objs {
		if err := fc.Seed(o); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(Config{Client: fc, Membership: members, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	c.events.Start() // Run is not called: syncs are driven by the test
	t.Cleanup(c.events.Shutdown)
	h := &harness{c: c, fc: fc, members: members, clock: clk}
	h.refresh(t)
	return h
}

// refresh copies the fake API's nodes and pods into the caches.
func (h *harness) refresh(t *testing.T) {
	t.Helper()
	infs := h.c.informers.Informers() // New adds nodes, then pods
	for _, pair := range []struct {
		r     *resources.Resource
		store interface{ Replace([]any, string) error }
	}{{resources.Nodes, infs[0].GetStore()}, {resources.Pods, infs[1].GetStore()}} {
		items, _, err := h.fc.List(context.Background(), pair.r, "", client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		objs := make([]any, len(items))
		for i := range items {
			objs[i] = items[i]
		}
		pair.store.Replace(objs, "")
	}
}

func (h *harness) getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	o, err := h.fc.Get(context.Background(), resources.Nodes, "", name)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*corev1.Node)
}

// podExists reports whether a pod exists and is not evicted: an evicted pod
// bound to a node is marked for deletion (it waits for its node agent, as in
// Kubernetes) or gone.
func (h *harness) podExists(name string) bool {
	o, err := h.fc.Get(context.Background(), resources.Pods, "default", name)
	return !apierrors.IsNotFound(err) && (o == nil || o.GetDeletionTimestamp() == nil)
}

func TestSyncUnreachableNodeEvicts(t *testing.T) {
	daemonTol := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	fiveMin := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs(300)}
	members := NewStaticMembership(Member{Name: "n1", Alive: false}, Member{Name: "n2", Alive: true})
	h := newHarness(t, members,
		node("n1", t0, corev1.ConditionTrue), node("n2", t0, corev1.ConditionTrue),
		pod("daemon", "n1", true, daemonTol...), pod("plain", "n1", true), pod("patient", "n1", true, fiveMin),
		pod("elsewhere", "n2", true))
	ctx := context.Background()

	if err := h.c.sync(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	n1 := h.getNode(t, "n1")
	if r := readyCondition(n1); r.Status != corev1.ConditionUnknown || r.Reason != ReasonStatusUnknown {
		t.Errorf("ready %+v", r)
	}
	if len(n1.Spec.Taints) != 1 || n1.Spec.Taints[0].Key != corev1.TaintNodeUnreachable || !n1.Spec.Taints[0].TimeAdded.Time.Equal(h.clock.Now()) {
		t.Errorf("taints %+v", n1.Spec.Taints)
	}
	if h.podExists("plain") || !h.podExists("daemon") || !h.podExists("patient") || !h.podExists("elsewhere") {
		t.Errorf("after first sync: plain=%t daemon=%t patient=%t elsewhere=%t",
			h.podExists("plain"), h.podExists("daemon"), h.podExists("patient"), h.podExists("elsewhere"))
	}
	o, _ := h.fc.Get(ctx, resources.Pods, "default", "daemon")
	if r := o.(*corev1.Pod).Status.Conditions[0]; r.Status != corev1.ConditionFalse {
		t.Errorf("daemon pod on unreachable node still ready: %+v", r)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		evs, _, _ := h.fc.List(ctx, resources.Events, "default", client.ListOptions{FieldSelector: "reason=" + ReasonTaintManagerEviction})
		if len(evs) != 1 {
			return fmt.Errorf("%d eviction events, want 1", len(evs))
		}
		ev := evs[0].(*corev1.Event)
		if ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Name != "plain" || ev.Source.Component != Component ||
			ev.Message != "Marking for deletion Pod default/plain" || ev.Type != corev1.EventTypeNormal {
			return fmt.Errorf("eviction event %+v", ev)
		}
		return nil
	})

	// The patient pod goes once its 300s run out (a delayed requeue is pending).
	h.refresh(t)
	h.clock.Step(299 * time.Second)
	if err := h.c.sync(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if !h.podExists("patient") {
		t.Fatal("evicted before tolerationSeconds")
	}
	h.clock.Step(time.Second)
	if err := h.c.sync(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if h.podExists("patient") || !h.podExists("daemon") {
		t.Errorf("after 300s: patient=%t daemon=%t", h.podExists("patient"), h.podExists("daemon"))
	}

	// The live node is untouched.
	if err := h.c.sync(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	if n2 := h.getNode(t, "n2"); len(n2.Spec.Taints) != 0 || readyCondition(n2).Status != corev1.ConditionTrue {
		t.Errorf("live node changed: %+v", n2)
	}

	// The node comes back: Ready, taint removed.
	members.Replace(Member{Name: "n1", Alive: true}, Member{Name: "n2", Alive: true})
	h.refresh(t)
	if err := h.c.sync(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	n1 = h.getNode(t, "n1")
	if readyCondition(n1).Status != corev1.ConditionTrue || len(n1.Spec.Taints) != 0 {
		t.Errorf("returned node: ready %v taints %v", readyCondition(n1), n1.Spec.Taints)
	}
}

func TestSyncNotReadyNodeKeepsAgentVerdict(t *testing.T) {
	h := newHarness(t, NewStaticMembership(Member{Name: "n1", Alive: true}), node("n1", t0, corev1.ConditionFalse), pod("plain", "n1", true))
	if err := h.c.sync(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	n1 := h.getNode(t, "n1")
	if readyCondition(n1).Status != corev1.ConditionFalse || len(n1.Spec.Taints) != 1 || n1.Spec.Taints[0].Key != corev1.TaintNodeNotReady {
		t.Errorf("node %+v", n1)
	}
	if h.podExists("plain") {
		t.Error("intolerant pod not evicted from not-ready node")
	}
	// Pods of a live (if not ready) node keep their own readiness reports.
}

func TestSyncConflictRetries(t *testing.T) {
	h := newHarness(t, NewStaticMembership(), node("n1", t0, corev1.ConditionTrue))
	h.fc.Fail(fake.VerbUpdate, "nodes/status", apierrors.NewConflict(resources.Nodes.GroupResource(), "n1", errors.New("stale")))
	if err := h.c.sync(context.Background(), "n1"); !apierrors.IsConflict(err) {
		t.Fatalf("err %v, want the conflict (retried by the queue)", err)
	}
	if err := h.c.sync(context.Background(), "missing"); err != nil {
		t.Errorf("missing node: %v", err)
	}
}

func TestRunWithFakeMembership(t *testing.T) {
	checkLeaks := testkit.LeakCheck(t)
	members := NewStaticMembership(Member{Name: "n1", Alive: true})
	fc := fake.New(node("n1", t0, ""), pod("plain", "n1", true))
	c, err := New(Config{Client: fc, Membership: members, ReconcileInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx, 1) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testkit.EventuallyTrue(t, 10*time.Second, what, cond)
	}
	ready := func(s corev1.ConditionStatus) func() bool {
		return func() bool {
			o, _ := fc.Get(context.Background(), resources.Nodes, "", "n1")
			r := readyCondition(o.(*corev1.Node))
			return r != nil && r.Status == s
		}
	}
	waitFor("node ready", ready(corev1.ConditionTrue))
	members.Replace(Member{Name: "n1", Alive: false}) // the hint, not the hour-long ticker, triggers the check
	waitFor("node unknown", ready(corev1.ConditionUnknown))
	waitFor("eviction", func() bool { // marked for deletion, or gone
		o, err := fc.Get(context.Background(), resources.Pods, "default", "plain")
		return apierrors.IsNotFound(err) || (err == nil && o.GetDeletionTimestamp() != nil)
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if n := fc.Watchers(); n != 0 {
		t.Errorf("%d watches open", n)
	}
	checkLeaks()
}

// TestRunReadsMembershipOncePerRound: syncing every node after a hint reads
// membership once, not once per node (a round was O(nodes²) allocations).
func TestRunReadsMembershipOncePerRound(t *testing.T) {
	const n = 50
	var members []Member
	fc := fake.New()
	for i := range n {
		name := fmt.Sprintf("n%d", i)
		members = append(members, Member{Name: name, Alive: true})
		if err := fc.Seed(node(name, t0, "")); err != nil {
			t.Fatal(err)
		}
	}
	fm := NewStaticMembership(members...)
	c, err := New(Config{Client: fc, Membership: fm, ReconcileInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx, 2) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	allReady := func() bool {
		items, _, _ := fc.List(context.Background(), resources.Nodes, "", client.ListOptions{})
		ready := 0
		for _, o := range items {
			if r := readyCondition(o.(*corev1.Node)); r != nil && r.Status == corev1.ConditionTrue {
				ready++
			}
		}
		return ready == n
	}
	testkit.EventuallyTrue(t, 10*time.Second, "nodes all Ready", allReady)
	before := fm.Reads()
	fm.Replace(members...) // a hint: one more round over every node
	testkit.EventuallyTrue(t, 10*time.Second, "the hint's round read membership, its queue drained", func() bool {
		return fm.Reads() > before && c.queue.Len() == 0
	})
	// The last syncs may still run: none of them reads membership again.
	testkit.Consistently(t, 100*time.Millisecond, func() error {
		if reads := fm.Reads() - before; reads != 1 {
			return fmt.Errorf("a round over %d nodes read membership %d times, want 1", n, reads)
		}
		return nil
	})
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Config{Client: fake.New()}); err == nil {
		t.Error("New without membership succeeded")
	}
}
