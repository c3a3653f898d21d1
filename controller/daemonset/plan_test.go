package daemonset

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/rollout"
)

// planFleet is a fleet for the plan and progress tests: a RollingUpdate
// DaemonSet with node selector disk=ssd, and its pods, some of an old
// revision.
type planFleet struct {
	ds    *appsv1.DaemonSet
	nodes []*corev1.Node
	pods  []*corev1.Pod
}

const oldHash = "5f8b9c7d4"

func (f *planFleet) node(name string, labels map[string]string, mod func(*corev1.Node)) {
	n := newNode(name, labels)
	if mod != nil {
		mod(n)
	}
	f.nodes = append(f.nodes, n)
}

// pod adds a pod of f.ds on node; old pods carry oldHash.
func (f *planFleet) pod(node string, old bool, mod func(*corev1.Pod)) *corev1.Pod {
	p := newPod(node+"-", node, simpleDaemonSetLabel, f.ds)
	if old {
		p.Labels[RevisionHashLabel] = oldHash
	}
	markPodReady(p, testStart)
	p.Status.Phase = corev1.PodRunning
	if mod != nil {
		mod(p)
	}
	f.pods = append(f.pods, p)
	return p
}

func newPlanFleet() *planFleet {
	ds := newDaemonSet("logs")
	ds.Spec.UpdateStrategy = *newRollingUpdateStrategy()
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	return &planFleet{ds: ds}
}

var ssd = map[string]string{"disk": "ssd"}

func taint(key string, effect corev1.TaintEffect) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: "true", Effect: effect})
	}
}

// TestPlan: each node's action and reason, from the controller's rules.
func TestPlan(t *testing.T) {
	f := newPlanFleet()
	f.node("a-new", ssd, nil)                                                       // eligible, no pod
	f.node("b-cordoned", ssd, func(n *corev1.Node) { n.Spec.Unschedulable = true }) // daemon pods tolerate cordon
	f.node("c-hdd", map[string]string{"disk": "hdd"}, nil)                          // selector does not match
	f.node("d-left", nil, nil)                                                      // runs a pod, no longer matches
	f.node("e-gpu", ssd, taint("gpu", corev1.TaintEffectNoSchedule))                // runs an old pod, taint added later
	f.node("f-evict", ssd, taint("evict", corev1.TaintEffectNoExecute))
	f.node("g-current", ssd, nil) // already runs the new revision
	f.node("h-old", ssd, nil)     // runs the old revision
	f.node("j-old-cordoned", ssd, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	f.node("i-gpu-current", ssd, taint("gpu", corev1.TaintEffectNoSchedule))
	f.pod("d-left", true, nil)
	f.pod("e-gpu", true, nil)
	f.pod("g-current", false, nil)
	f.pod("h-old", true, nil)
	f.pod("i-gpu-current", false, nil)
	f.pod("j-old-cordoned", true, nil)
	hash := ComputeHash(&f.ds.Spec.Template, nil)

	want := []NodePlan{
		{"a-new", PlanGain, "", hash, "eligible: node selector matches"},
		{"b-cordoned", PlanGain, "", hash, "eligible: node selector matches, cordoned, which daemon pods tolerate"},
		{"c-hdd", PlanNone, "", "", "node selector disk=ssd does not match the node's labels"},
		{"d-left", PlanLose, oldHash, "", "node selector disk=ssd does not match the node's labels"},
		{"e-gpu", PlanLose, oldHash, "", "taint gpu=true:NoSchedule not tolerated: the update deletes the old pod and creates none"},
		{"f-evict", PlanNone, "", "", "taint evict=true:NoExecute not tolerated"},
		{"g-current", PlanKeep, hash, hash, "already at revision " + hash},
		{"h-old", PlanUpdate, oldHash, hash, "template changed"},
		{"i-gpu-current", PlanKeep, hash, hash, "already at revision " + hash + "; taint gpu=true:NoSchedule not tolerated, the running pod stays"},
		{"j-old-cordoned", PlanUpdate, oldHash, hash, "template changed; cordoned, which daemon pods tolerate"},
	}
	got := Plan(f.ds, f.nodes, f.pods, nil, testStart)
	comparePlans(t, got, want)

	t.Run("paused", func(t *testing.T) {
		ds := f.ds.DeepCopy()
		ds.Annotations = map[string]string{rollout.Paused: "true"}
		old := oldRevision(t, ds)
		got := Plan(ds, f.nodes, f.pods, []*appsv1.ControllerRevision{old}, testStart)
		byNode := planByNode(got)
		if p := byNode["h-old"]; p.Action != PlanKeep || p.Reason != "rollout paused" {
			t.Errorf("h-old: %+v, want keep: rollout paused", p)
		}
		if p := byNode["a-new"]; p.Action != PlanGain || p.To != oldHash || !strings.Contains(p.Reason, "gets the old revision: rollout paused") {
			t.Errorf("a-new: %+v, want gain of the old revision", p)
		}
		if p := byNode["e-gpu"]; p.Action != PlanKeep {
			t.Errorf("e-gpu: %+v, want keep (paused replaces nothing)", p)
		}
	})
	t.Run("partition", func(t *testing.T) {
		ds := f.ds.DeepCopy()
		ds.Annotations = map[string]string{rollout.Partition: "2"}
		// The partition is the first 2 desired nodes, updated first:
		// g-current (updated), then a-new by name.
		byNode := planByNode(Plan(ds, f.nodes, f.pods, nil, testStart))
		if p := byNode["h-old"]; p.Action != PlanKeep || !strings.Contains(p.Reason, "outside the canary/partition") {
			t.Errorf("h-old: %+v, want keep outside the partition", p)
		}
	})
	t.Run("OnDelete", func(t *testing.T) {
		ds := f.ds.DeepCopy()
		ds.Spec.UpdateStrategy = *newOnDeleteStrategy()
		if p := planByNode(Plan(ds, f.nodes, f.pods, nil, testStart))["h-old"]; p.Action != PlanKeep || !strings.HasPrefix(p.Reason, "OnDelete") {
			t.Errorf("h-old: %+v, want keep (OnDelete)", p)
		}
	})
}

// oldRevision is a ControllerRevision of hash oldHash with ds's template
// and another image.
func oldRevision(t *testing.T, ds *appsv1.DaemonSet) *appsv1.ControllerRevision {
	t.Helper()
	o := ds.DeepCopy()
	o.Spec.Template.Spec.Containers[0].Image = "foo/bar:old"
	cr, err := NewRevision(o, 1)
	if err != nil {
		t.Fatal(err)
	}
	cr.Labels[RevisionHashLabel] = oldHash
	return cr
}

func planByNode(ps []NodePlan) map[string]NodePlan {
	m := map[string]NodePlan{}
	for _, p := range ps {
		m[p.Node] = p
	}
	return m
}

func comparePlans(t *testing.T, got, want []NodePlan) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d nodes planned, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("node %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// TestUpdateRevisionHash: a template an existing revision records keeps
// that revision's hash (as a rollback reuses it); a new one gets
// ComputeHash.
func TestUpdateRevisionHash(t *testing.T) {
	ds := newDaemonSet("logs")
	if got, want := UpdateRevisionHash(ds, nil), ComputeHash(&ds.Spec.Template, nil); got != want {
		t.Errorf("new template: %s, want %s", got, want)
	}
	cr, err := NewRevision(ds, 3)
	if err != nil {
		t.Fatal(err)
	}
	cr.Labels[RevisionHashLabel] = "reused"
	if got := UpdateRevisionHash(ds, []*appsv1.ControllerRevision{cr}); got != "reused" {
		t.Errorf("recorded template: %s, want reused", got)
	}
}

// TestProgress: each targeted node's state and reason, problems first.
func TestProgress(t *testing.T) {
	now := metav1.NewTime(testStart.Add(time.Hour))
	down := metav1.NewTime(testStart.Add(30 * time.Minute))
	f := newPlanFleet()
	f.node("a-updated", ssd, nil)
	f.node("b-crash", ssd, nil)
	f.node("c-down", ssd, func(n *corev1.Node) {
		n.Status.Conditions[0].Status, n.Status.Conditions[0].LastTransitionTime = corev1.ConditionUnknown, down
	})
	f.node("d-waiting", ssd, nil)
	f.node("e-pulling", ssd, nil)
	f.node("f-none", ssd, nil)
	f.node("g-hdd", map[string]string{"disk": "hdd"}, nil) // not targeted
	f.node("h-left", nil, nil)
	f.pod("a-updated", false, nil)
	f.pod("b-crash", false, func(p *corev1.Pod) {
		p.Status.Conditions[0].Status, p.Status.Conditions[0].LastTransitionTime = corev1.ConditionFalse, down
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "foo", RestartCount: 4,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
	})
	f.pod("c-down", true, nil)
	f.pod("d-waiting", true, nil)
	f.pod("e-pulling", false, func(p *corev1.Pod) {
		p.Status.Conditions = nil
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "foo",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	})
	f.pod("h-left", true, nil)

	got, hash := Progress(f.ds, f.nodes, f.pods, nil, now)
	if hash != ComputeHash(&f.ds.Spec.Template, nil) {
		t.Errorf("update revision %s", hash)
	}
	want := []struct {
		node   string
		state  NodeState
		reason string
		since  metav1.Time
	}{
		{"b-crash", StateFailing, "container foo: CrashLoopBackOff (4 restarts)", down},
		{"c-down", StateUnreachable, "node unreachable", down},
		{"e-pulling", StateUpdating, "pulling image / creating container (ContainerCreating)", metav1.Time{}},
		{"f-none", StatePending, "no pod yet", metav1.Time{}},
		{"h-left", StateRemoving, "node selector disk=ssd does not match the node's labels", metav1.Time{}},
		{"d-waiting", StateWaiting, "waiting for the update budget (maxUnavailable 1, maxSurge 0)", metav1.Time{}},
		{"a-updated", StateUpdated, "available", metav1.Time{}},
	}
	if len(got) != len(want) {
		t.Fatalf("%d nodes, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Node != w.node || g.State != w.state || g.Reason != w.reason || !g.Since.Equal(&w.since) {
			t.Errorf("row %d: %s %s %q since %v, want %s %s %q since %v", i, g.Node, g.State, g.Reason, g.Since, w.node, w.state, w.reason, w.since)
		}
	}
	if g := got[0]; !g.Updated || g.Pod == "" || g.Revision != hash {
		t.Errorf("b-crash runs the update revision: %+v", g)
	}
	if g := got[1]; g.Updated || g.Revision != oldHash {
		t.Errorf("c-down runs the old revision: %+v", g)
	}
	if !StateFailing.Problem() || !StateUnreachable.Problem() || StateWaiting.Problem() {
		t.Error("Problem: failing and unreachable only")
	}

	t.Run("paused", func(t *testing.T) {
		ds := f.ds.DeepCopy()
		ds.Annotations = map[string]string{rollout.Paused: "true"}
		got, _ := Progress(ds, f.nodes, f.pods, nil, now)
		for _, g := range got {
			if g.Node == "d-waiting" && (g.State != StateHeld || g.Reason != "rollout paused") {
				t.Errorf("d-waiting: %s %q, want held: rollout paused", g.State, g.Reason)
			}
		}
	})
	t.Run("canary", func(t *testing.T) {
		ds := f.ds.DeepCopy()
		ds.Annotations = map[string]string{rollout.CanarySelector: "canary=true"}
		got, _ := Progress(ds, f.nodes, f.pods, nil, now)
		for _, g := range got {
			if g.Node == "d-waiting" && (g.State != StateHeld || !strings.Contains(g.Reason, "outside the canary")) {
				t.Errorf("d-waiting: %s %q, want held outside the canary", g.State, g.Reason)
			}
		}
	})
}

// TestPlaceDaemonPod: the verdict is NodeShouldRunDaemonPod's, with the
// first rule the node fails.
func TestPlaceDaemonPod(t *testing.T) {
	ds := newDaemonSet("x")
	ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"lab"}}},
		}}}}}
	for _, c := range []struct {
		node   *corev1.Node
		reason string
	}{
		{newNode("lab", map[string]string{"zone": "lab"}), ""},
		{newNode("dc", map[string]string{"zone": "dc"}), "required node affinity does not match the node"},
	} {
		p := PlaceDaemonPod(c.node, ds)
		run, cont := NodeShouldRunDaemonPod(c.node, ds)
		if p.ShouldRun != run || p.ShouldContinueRunning != cont || p.Reason != c.reason {
			t.Errorf("%s: %+v (NodeShouldRunDaemonPod %v %v), want reason %q", c.node.Name, p, run, cont, c.reason)
		}
	}
}

// TestPlanMatchesSyncs: on random fleets (labels, NoSchedule and NoExecute
// taints, cordons) and random changes (node selector, tolerations, image,
// maxSurge, pause, partition, canary selector), the plan of the change computed before it
// is what the controller's syncs then do, node for node.
func TestPlanMatchesSyncs(t *testing.T) {
	for seed := int64(1); seed <= 60; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { planMatchesSyncs(t, rand.New(rand.NewSource(seed))) })
	}
}

func planMatchesSyncs(t *testing.T, rng *rand.Rand) {
	ctx := context.Background()
	pick := func(xs ...string) string { return xs[rng.Intn(len(xs))] }
	ds := newDaemonSet("logs")
	ds.Spec.UpdateStrategy = *newRollingUpdateStrategy()
	randomize := func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.NodeSelector = nil
		if s := pick("", "ssd", "hdd"); s != "" {
			ds.Spec.Template.Spec.NodeSelector = map[string]string{"disk": s}
		}
		ds.Spec.Template.Spec.Tolerations = nil
		if rng.Intn(2) == 0 {
			ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
		}
	}
	randomize(ds)
	tc := newTestController(t, ds)
	nodes := make([]*corev1.Node, 6)
	taintNode := func(n *corev1.Node) {
		switch rng.Intn(4) {
		case 0:
			n.Spec.Taints = []corev1.Taint{{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		case 1:
			n.Spec.Taints = []corev1.Taint{{Key: "evict", Value: "true", Effect: corev1.TaintEffectNoExecute}}
		default:
			n.Spec.Taints = nil
		}
		n.Spec.Unschedulable = rng.Intn(3) == 0
		n.Labels = map[string]string{"disk": pick("ssd", "hdd")}
	}
	for i := range nodes {
		nodes[i] = newNode(fmt.Sprintf("node-%d", i), nil)
		taintNode(nodes[i])
		tc.nodeStore.Add(nodes[i])
	}
	tc.dsStore.Add(ds)
	converge := func() {
		t.Helper()
		quiet := 0
		for range 100 {
			clearExpectations(t, tc, ds)
			if err := tc.sync(ctx, dsKey(ds)); err != nil {
				t.Fatalf("sync: %v", err)
			}
			markPodsReady(tc)
			o, err := tc.client.Get(ctx, resources.DaemonSets, ds.Namespace, ds.Name)
			if err != nil {
				t.Fatal(err)
			}
			ds = o.(*appsv1.DaemonSet)
			tc.dsStore.Update(ds)
			for _, cr := range controllerRevisions(t, tc) {
				tc.historyStore.Update(cr)
			}
			pc := tc.podControl
			pc.mu.Lock()
			changed := len(pc.Templates) + len(pc.DeletePodName)
			pc.mu.Unlock()
			if changed > 0 {
				quiet = 0
			} else if quiet++; quiet == 2 {
				return
			}
		}
		t.Fatal("the controller did not converge in 100 syncs")
	}
	converge()

	// Change the fleet under the running pods, then the DaemonSet.
	for _, n := range nodes {
		if rng.Intn(2) == 0 {
			taintNode(n)
			tc.nodeStore.Update(n)
		}
	}
	next := ds.DeepCopy()
	randomize(next)
	if rng.Intn(3) > 0 {
		next.Spec.Template.Spec.Containers[0].Image = "foo/bar:" + pick("v2", "v3")
	}
	if rng.Intn(3) == 0 {
		next.Spec.UpdateStrategy = newUpdateSurge(intstr.FromInt32(1))
	}
	switch rng.Intn(5) {
	case 0:
		next.Annotations = map[string]string{rollout.Paused: "true"}
	case 1:
		next.Annotations = map[string]string{rollout.Partition: "2"}
	case 2:
		next.Annotations = map[string]string{rollout.CanarySelector: "disk=ssd", rollout.Partition: "50%"}
	}
	dry, err := tc.client.Update(ctx, next, client.WriteOptions{DryRun: true})
	if err != nil {
		t.Fatalf("dry-run update: %v", err)
	}
	var pods []*corev1.Pod
	for _, o := range tc.podStore.List() {
		pods = append(pods, o.(*corev1.Pod))
	}
	plan := Plan(dry.(*appsv1.DaemonSet), nodes, pods, controllerRevisions(t, tc), tc.clock.Now())
	before := podsByNode(tc)
	o, err := tc.client.Update(ctx, next, client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds = o.(*appsv1.DaemonSet)
	tc.dsStore.Update(ds)
	converge()
	after := podsByNode(tc)
	for _, p := range plan {
		got := after[p.Node]
		var ok bool
		switch p.Action {
		case PlanGain, PlanUpdate:
			ok = len(got) == 1 && got[0].Labels[RevisionHashLabel] == p.To
		case PlanKeep:
			ok = len(got) == 1 && len(before[p.Node]) == 1 && got[0].Name == before[p.Node][0].Name
		case PlanLose, PlanNone:
			ok = len(got) == 0
		}
		if !ok {
			t.Errorf("%s: planned %s (%s -> %s: %s); now runs %s (before: %s)", p.Node, p.Action, p.From, p.To, p.Reason, podHashes(got), podHashes(before[p.Node]))
		}
	}
}

func controllerRevisions(t *testing.T, tc *testController) []*appsv1.ControllerRevision {
	t.Helper()
	objs, _, err := tc.client.List(context.Background(), resources.ControllerRevisions, metav1.NamespaceDefault, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*appsv1.ControllerRevision, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*appsv1.ControllerRevision))
	}
	return out
}

func podsByNode(tc *testController) map[string][]*corev1.Pod {
	m := map[string][]*corev1.Pod{}
	for _, o := range tc.podStore.List() {
		p := o.(*corev1.Pod)
		m[p.Spec.NodeName] = append(m[p.Spec.NodeName], p)
	}
	return m
}

func podHashes(ps []*corev1.Pod) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name+"@"+p.Labels[RevisionHashLabel])
	}
	return "[" + strings.Join(out, " ") + "]"
}
