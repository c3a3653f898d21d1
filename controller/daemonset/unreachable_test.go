package daemonset

import (
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/rollout"
)

// Tests of unreachable nodes (unreachable.go, docs/rollouts.md §7): the
// budget rule as a table over one RollingUpdate step, then a rollout on the
// fake API and a fake clock with a node away and coming back.

// takeDown makes node NotReady (Unknown) since at, as the node lifecycle
// controller does: the Ready condition and the unreachable NoExecute taint.
func takeDown(node *corev1.Node, at time.Time) {
	t := metav1.NewTime(at)
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: t}}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &t})
}

// bringBack makes node Ready again without the lifecycle taint.
func bringBack(node *corev1.Node, at time.Time) {
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}
	node.Spec.Taints = nil
}

// notReady marks pod not ready, as the node lifecycle controller does for
// the pods of a node that went away (ContainersReady stays as it was).
func notReady(pod *corev1.Pod) {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			pod.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
}

// goAway takes the node called name down now (takeDown) and marks its pod
// not ready, as node lifecycle would; it returns the node for bringBack.
func goAway(t *testing.T, tc *testController, name string) *corev1.Node {
	t.Helper()
	o, _, _ := tc.nodeStore.GetByKey(name)
	node := o.(*corev1.Node).DeepCopy()
	takeDown(node, tc.clock.Now())
	tc.nodeStore.Update(node)
	notReady(podOn(t, tc, name))
	return node
}

func TestNodeDown(t *testing.T) {
	at := testStart
	cases := []struct {
		name  string
		node  func(*corev1.Node)
		since time.Time
		down  bool
	}{
		{"ready", func(*corev1.Node) {}, time.Time{}, false},
		{"unknown with taint", func(n *corev1.Node) { takeDown(n, at) }, at, true},
		{"NotReady condition only", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(at)}}
		}, at, true},
		{"taint earlier than the condition", func(n *corev1.Node) {
			takeDown(n, at)
			n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(at.Add(time.Minute))
		}, at, true},
		{"Ready with a stale taint", func(n *corev1.Node) {
			takeDown(n, at)
			n.Status.Conditions[0].Status = corev1.ConditionTrue
		}, time.Time{}, false},
		{"not-ready taint, no condition", func(n *corev1.Node) {
			n.Status.Conditions = nil
			t := metav1.NewTime(at)
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute, TimeAdded: &t}}
		}, at, true},
		{"down without any time", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
		}, time.Time{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode("n", nil)
			c.node(n)
			since, down := nodeDown(n)
			if down != c.down || !since.Equal(c.since) {
				t.Fatalf("nodeDown = %v, %v; want %v, %v", since, down, c.since, c.down)
			}
		})
	}
}

// TestUnreachableBudget is the budget rule, one RollingUpdate step of a new
// template on five nodes node-0 … node-4 with ready old pods, at now with
// the default grace.
func TestUnreachableBudget(t *testing.T) {
	now := testStart.Add(time.Hour)
	within := now.Add(-DefaultUnreachableGrace + time.Second)
	past := now.Add(-DefaultUnreachableGrace - time.Second)
	type setup struct {
		ds    *appsv1.DaemonSet
		nodes []*corev1.Node
		pods  map[string][]*corev1.Pod
		hash  string
		old   *appsv1.DaemonSet
	}
	// down takes node i down since at; its old pod is marked not ready.
	down := func(s *setup, i int, at time.Time) {
		takeDown(s.nodes[i], at)
		notReady(s.pods[s.nodes[i].Name][0])
	}
	// inFlight gives node i a pod of the current revision created at
	// created whose containers are ready or not, next to nothing else.
	inFlight := func(s *setup, i int, created time.Time, ready bool) {
		p := newPod("new-", s.nodes[i].Name, simpleDaemonSetLabel, s.ds)
		p.CreationTimestamp = metav1.NewTime(created)
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: st}, {Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		s.pods[s.nodes[i].Name] = []*corev1.Pod{p}
	}
	cases := []struct {
		name           string
		maxUnavailable int
		surge          int
		blocks         bool // annotation unreachable-blocks "true"
		prepare        func(s *setup)
		deletes        []string // nodes whose old pod is deleted
		creates        []string
		pending        []string
	}{
		{name: "all reachable: one at a time", maxUnavailable: 1, prepare: func(*setup) {},
			deletes: []string{"node-0"}},
		{name: "grace not yet passed: the down node still blocks", maxUnavailable: 1,
			prepare: func(s *setup) { down(s, 0, within) },
			deletes: []string{"node-0"}}, // Kubernetes: its unavailable old pod is replaced, nothing else
		{name: "past the grace: the down node does not count", maxUnavailable: 1,
			prepare: func(s *setup) { down(s, 0, past) },
			deletes: []string{"node-1"}, pending: []string{"node-0"}},
		{name: "three away, maxUnavailable 1: one reachable node at a time", maxUnavailable: 1,
			prepare: func(s *setup) { down(s, 0, past); down(s, 2, past); down(s, 4, past) },
			deletes: []string{"node-1"}, pending: []string{"node-0", "node-2", "node-4"}},
		{name: "maxUnavailable 2 among the reachable: an unavailable reachable pod uses one", maxUnavailable: 2,
			prepare: func(s *setup) { down(s, 0, past); notReady(s.pods["node-3"][0]) },
			deletes: []string{"node-1", "node-3"}, pending: []string{"node-0"}},
		{name: "budget spent by reachable nodes: nothing more", maxUnavailable: 1,
			prepare: func(s *setup) {
				down(s, 0, past)
				inFlight(s, 1, now, false)
			},
			pending: []string{"node-0"}},
		{name: "unreachable-blocks: as Kubernetes", maxUnavailable: 1, blocks: true,
			prepare: func(s *setup) { down(s, 0, past) },
			deletes: []string{"node-0"}},
		{name: "lost while its update was in flight: still counts", maxUnavailable: 1,
			prepare: func(s *setup) {
				inFlight(s, 0, past.Add(-time.Minute), false)
				takeDown(s.nodes[0], past)
			}},
		{name: "lost after its update was ready: set aside, not pending", maxUnavailable: 1,
			prepare: func(s *setup) {
				inFlight(s, 0, past.Add(-time.Minute), true)
				takeDown(s.nodes[0], past)
			},
			deletes: []string{"node-1"}},
		{name: "new pod created after the node went down: set aside, still pending", maxUnavailable: 1,
			prepare: func(s *setup) {
				inFlight(s, 0, past.Add(time.Second), false)
				takeDown(s.nodes[0], past)
			},
			deletes: []string{"node-1"}, pending: []string{"node-0"}},
		{name: "surge: no pod is created on a node away", surge: 1,
			prepare: func(s *setup) { down(s, 0, past) },
			creates: []string{"node-1"}, pending: []string{"node-0"}},
		{name: "surge within the grace: Kubernetes creates next to the unavailable pod", surge: 1,
			prepare: func(s *setup) { down(s, 0, within) },
			creates: []string{"node-0", "node-1"}}, // outside the budget, then within it
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := newDaemonSet("foo")
			s := &setup{old: old, pods: map[string][]*corev1.Pod{}}
			for i := range 5 {
				n := newNode(fmt.Sprintf("node-%d", i), nil)
				s.nodes = append(s.nodes, n)
				p := newPod(n.Name+"-", n.Name, simpleDaemonSetLabel, old)
				markPodReady(p, testStart)
				p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue})
				s.pods[n.Name] = []*corev1.Pod{p}
			}
			ds := old.DeepCopy()
			ds.Spec.Template.Spec.Containers[0].Image = "foo/bar:v2"
			if c.surge > 0 {
				ds.Spec.UpdateStrategy = newUpdateSurge(intstr.FromInt32(int32(c.surge)))
			} else {
				ds.Spec.UpdateStrategy = newUpdateUnavailable(intstr.FromInt32(int32(c.maxUnavailable)))
			}
			if c.blocks {
				ds.Annotations = map[string]string{rollout.UnreachableBlocks: "true"}
			}
			s.ds, s.hash = ds, ComputeHash(&ds.Spec.Template, nil)
			c.prepare(s)
			oldPods := map[string]string{}
			for node, ps := range s.pods {
				oldPods[ps[0].Name] = node
			}
			g := newRolloutGate(ds, s.nodes, s.pods, s.hash, false, reachability{now: now, grace: DefaultUnreachableGrace})
			deletes, creates, err := rollingUpdatePlan(ds, s.nodes, s.pods, s.hash, now, g.mayUpdateFunc(), g.setAsideFunc())
			if err != nil {
				t.Fatal(err)
			}
			var deleted []string
			for _, name := range deletes {
				deleted = append(deleted, oldPods[name])
			}
			slices.Sort(deleted)
			slices.Sort(creates)
			if !slices.Equal(deleted, c.deletes) || !slices.Equal(creates, c.creates) {
				t.Errorf("deletes on %v, creates on %v; want %v and %v", deleted, creates, c.deletes, c.creates)
			}
			var pending []string
			for _, d := range g.unreach.pending() {
				pending = append(pending, d.name)
			}
			if !slices.Equal(pending, c.pending) {
				t.Errorf("pending %v, want %v", pending, c.pending)
			}
		})
	}
}

// TestUnreachableNodeRollout: with one of four nodes away for longer than
// the grace, a maxUnavailable 1 rollout updates the three reachable nodes
// one at a time, never two unavailable at once; the status counts the
// reachable nodes, so it reads complete, and the Progressing condition
// (with an event) names the node pending. The sync that sees the node back
// replaces its pod; the condition then says the revision is available.
func TestUnreachableNodeRollout(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateUnavailable(intstr.FromInt32(1))
	tc := storedController(t, ds)
	oldHash := startRolled(t, tc, ds, 4)

	// node-2 goes away: the grace runs from its taint; the controller asks
	// to look again when it passes.
	node2 := goAway(t, tc, "node-2")
	queuedKeys(tc)
	rolloutStep(t, tc, ds, 0, 0)
	if st := ds.Status; st.DesiredNumberScheduled != 4 || st.NumberAvailable != 3 {
		t.Fatalf("within the grace: desired %d available %d, want 4 and 3 (Kubernetes' counters)", st.DesiredNumberScheduled, st.NumberAvailable)
	}
	tc.clock.Step(DefaultUnreachableGrace + time.Millisecond)
	testkit.Eventually(t, 5*time.Second, func() error {
		if !slices.Contains(queuedKeys(tc), dsKey(ds)) {
			return fmt.Errorf("no re-sync queued when the grace passed")
		}
		return nil
	})
	rolloutStep(t, tc, ds, 0, 0)
	if st := ds.Status; st.DesiredNumberScheduled != 3 || st.NumberAvailable != 3 || st.NumberUnavailable != 0 {
		t.Fatalf("past the grace: status %+v, want the 3 reachable nodes only", st)
	}

	newHash := setImage(t, tc, ds, "foo/bar:v2")
	for range 3 {
		rolloutStep(t, tc, ds, 0, 1)
		rolloutStep(t, tc, ds, 1, 0)
		if st := ds.Status; st.DesiredNumberScheduled-st.NumberAvailable > 1 {
			t.Fatalf("%d reachable pods unavailable, maxUnavailable 1", st.DesiredNumberScheduled-st.NumberAvailable)
		}
		markPodsReady(tc)
		notReady(podOn(t, tc, "node-2"))
	}
	rolloutStep(t, tc, ds, 0, 0)
	wantNodesOn(t, tc, newHash, oldHash, "node-0", "node-1", "node-3")
	if st := ds.Status; st.DesiredNumberScheduled != 3 || st.UpdatedNumberScheduled != 3 || st.NumberAvailable != 3 {
		t.Fatalf("status %+v, want 3 desired, updated and available", st)
	}
	since := testStart.UTC().Format(time.RFC3339)
	msg := "rolled out to every reachable node; 1 unreachable node pending, updated when back: node-2 (down since " + since + ")"
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonUnreachablePending, msg)
	wantEvent(t, tc, "Normal "+rollout.ReasonUnreachablePending+" "+msg)

	// node-2 returns: the first sync replaces its (not ready) old pod.
	bringBack(node2, tc.clock.Now())
	tc.nodeStore.Update(node2)
	rolloutStep(t, tc, ds, 0, 1)
	rolloutStep(t, tc, ds, 1, 0)
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 0)
	wantNodesOn(t, tc, newHash, oldHash, "node-0", "node-1", "node-2", "node-3")
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonNewRevisionAvailable, "successfully progressed")
	if st := ds.Status; st.DesiredNumberScheduled != 4 || st.UpdatedNumberScheduled != 4 || st.NumberAvailable != 4 {
		t.Fatalf("status %+v, want 4 desired, updated and available", st)
	}
}

// TestUnreachableReturnsReadyWithinBudget: a pending node that comes back
// with its old pod ready again is updated in the first sync when the budget
// allows, and waits for it when reachable nodes use it.
func TestUnreachableReturnsReadyWithinBudget(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateUnavailable(intstr.FromInt32(1))
	tc := storedController(t, ds)
	startRolled(t, tc, ds, 3)
	node0 := goAway(t, tc, "node-0")
	tc.clock.Step(DefaultUnreachableGrace + time.Second)

	setImage(t, tc, ds, "foo/bar:v2")
	rolloutStep(t, tc, ds, 0, 1) // node-1
	// node-0 returns, its old pod ready again, while node-1 uses the budget.
	bringBack(node0, tc.clock.Now())
	tc.nodeStore.Update(node0)
	markPodReady(podOn(t, tc, "node-0"), tc.clock.Now())
	rolloutStep(t, tc, ds, 1, 0) // node-1's new pod, not ready: nothing else
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 1) // the budget is free: node-0 first, by name
	if p := podOn(t, tc, "node-2"); p.Labels[RevisionHashLabel] == ComputeHash(&ds.Spec.Template, nil) {
		t.Fatal("node-2 updated before the returning node-0")
	}
}

// TestUnreachableBlocksAnnotation: with unreachable-blocks "true" the
// status counts the node away, as Kubernetes does, and no condition names
// it.
func TestUnreachableBlocksAnnotation(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateUnavailable(intstr.FromInt32(1))
	ds.Annotations = map[string]string{rollout.UnreachableBlocks: "true"}
	tc := storedController(t, ds)
	startRolled(t, tc, ds, 3)
	goAway(t, tc, "node-0")
	tc.clock.Step(time.Hour)
	rolloutStep(t, tc, ds, 0, 0)
	if st := ds.Status; st.DesiredNumberScheduled != 3 || st.NumberAvailable != 2 {
		t.Fatalf("status %+v, want 3 desired and 2 available", st)
	}
	if c := getCondition(ds.Status, rollout.ConditionProgressing); c != nil {
		t.Fatalf("condition %+v, want none", c)
	}
}

// TestNodeGoingDownOrBackResyncs: a node going down or coming back
// enqueues the DaemonSets that run there, although the daemon pods'
// tolerations leave their eligibility unchanged.
func TestNodeGoingDownOrBackResyncs(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	tc.dsStore.Add(ds)
	up := newNode("node-0", nil)
	away := up.DeepCopy()
	takeDown(away, testStart)
	for _, c := range []struct{ old, cur *corev1.Node }{{up, away}, {away, up}} {
		queuedKeys(tc)
		tc.updateNode(c.old, c.cur)
		if got := queuedKeys(tc); !slices.Equal(got, []string{dsKey(ds)}) {
			t.Fatalf("queued %v, want %s", got, dsKey(ds))
		}
	}
	queuedKeys(tc)
	tc.updateNode(away, away.DeepCopy())
	if got := queuedKeys(tc); len(got) != 0 {
		t.Fatalf("an unchanged node queued %v", got)
	}
}

// TestPartitionPrefersReachableNodes: a partition of 1 skips node-0 while
// it is set aside as unreachable and takes the next node by name.
func TestPartitionPrefersReachableNodes(t *testing.T) {
	now := testStart.Add(time.Hour)
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateUnavailable(intstr.FromInt32(1))
	ds.Annotations = map[string]string{rollout.Partition: "1"}
	var nodes []*corev1.Node
	pods := map[string][]*corev1.Pod{}
	for i := range 3 {
		n := newNode(fmt.Sprintf("node-%d", i), nil)
		nodes = append(nodes, n)
		pods[n.Name] = []*corev1.Pod{newPod(n.Name+"-", n.Name, simpleDaemonSetLabel, ds)}
	}
	ds.Spec.Template.Spec.Containers[0].Image = "foo/bar:v2"
	hash := ComputeHash(&ds.Spec.Template, nil)
	for _, c := range []struct {
		downSince time.Time
		want      string
	}{{now.Add(-time.Minute), "node-1"}, {now.Add(-time.Second), "node-0"}} {
		takeDown(nodes[0], c.downSince)
		g := newRolloutGate(ds, nodes, pods, hash, false, reachability{now: now, grace: DefaultUnreachableGrace})
		if !slices.Equal(g.partition, []string{c.want}) {
			t.Errorf("node-0 down since %s: partition %v, want [%s]", now.Sub(c.downSince), g.partition, c.want)
		}
		nodes[0].Spec.Taints = nil
	}
}

// TestUnreachablePendingGivesWayToANewRollout: a plain DaemonSet whose
// rollout left a node pending reports NewRevisionUpdating during the next
// rollout rather than the old pending list, and UnreachableNodesPending
// again (a new event) once that one is complete on the reachable nodes.
func TestUnreachablePendingGivesWayToANewRollout(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateUnavailable(intstr.FromInt32(1))
	tc := storedController(t, ds)
	startRolled(t, tc, ds, 2)
	goAway(t, tc, "node-1")
	tc.clock.Step(time.Hour)

	for i, image := range []string{"foo/bar:v2", "foo/bar:v3"} {
		setImage(t, tc, ds, image)
		rolloutStep(t, tc, ds, 0, 1)
		if i > 0 {
			wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonUpdating, "rolling out ControllerRevision")
		}
		rolloutStep(t, tc, ds, 1, 0)
		markPodsReady(tc)
		notReady(podOn(t, tc, "node-1"))
		rolloutStep(t, tc, ds, 0, 0)
		wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonUnreachablePending, "1 unreachable node pending")
		wantEvent(t, tc, "Normal "+rollout.ReasonUnreachablePending)
	}
}
