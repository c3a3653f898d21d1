package daemonset

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Ports of Kubernetes' update_test.go (docs/controller-rules.md §9.2):
// multi-step rollouts, one sync per step, counting creates and deletes.

type step struct{ creates, deletes int }

// runSteps runs clearExpectations + one sync per step.
func runSteps(t *testing.T, tc *testController, ds *appsv1.DaemonSet, steps ...step) {
	t.Helper()
	for _, s := range steps {
		clearExpectations(t, tc, ds)
		expectSyncDaemonSets(t, tc, ds, s.creates, s.deletes, 0)
	}
	clearExpectations(t, tc, ds)
}

func setRollingUpdate(tc *testController, ds *appsv1.DaemonSet, maxUnavailable int) {
	v := intstr.FromInt32(int32(maxUnavailable))
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{
		Type:          appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &v},
	}
	tc.dsStore.Update(ds)
}

func TestDaemonSetUpdatesPods(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	addNodes(tc.nodeStore, 0, 5, nil)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, 5, 0, 0)
	markPodsReady(tc)

	ds.Spec.Template.Spec.Containers[0].Image = "foo2/bar2"
	setRollingUpdate(tc, ds, 2)
	runSteps(t, tc, ds, step{0, 2}, step{2, 0})
	markPodsReady(tc)
	runSteps(t, tc, ds, step{0, 2}, step{2, 0})
	markPodsReady(tc)
	runSteps(t, tc, ds, step{0, 1}, step{1, 0})
	markPodsReady(tc)
	runSteps(t, tc, ds, step{0, 0})
}

func TestDaemonSetUpdatesPodsWithMaxSurge(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	addNodes(tc.nodeStore, 0, 5, nil)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, 5, 0, 0)
	markPodsReady(tc)

	const maxSurge = 2
	ds.Spec.Template.Spec.Containers[0].Image = "foo2/bar2"
	ds.Spec.UpdateStrategy = newUpdateSurge(intstr.FromInt32(maxSurge))
	tc.dsStore.Update(ds)
	runSteps(t, tc, ds, step{maxSurge, 0}, step{0, 0})
	markPodsReady(tc)
	runSteps(t, tc, ds, step{maxSurge, maxSurge}, step{0, 0})
	markPodsReady(tc)
	runSteps(t, tc, ds, step{5 % maxSurge, maxSurge}, step{0, 0})
	markPodsReady(tc)
	runSteps(t, tc, ds, step{0, 5 % maxSurge}, step{0, 0})
}

func TestDaemonSetUpdatesPodsNotMatchTainstWithMaxSurge(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateSurge(intstr.FromInt32(1))
	setDaemonSetToleration(ds, []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}})
	tc := newTestController(t, ds)
	tc.dsStore.Add(ds)
	addNodes(tc.nodeStore, 0, 5, nil)
	node := newNode("node-0", nil)
	setNodeTaint(node, []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}})
	tc.nodeStore.Update(node)

	expectSyncDaemonSets(t, tc, ds, 5, 0, 0)
	markPodsReady(tc)

	ds.Spec.Template.Spec.Tolerations = nil
	tc.dsStore.Update(ds)
	for i := 0; i < 4; i++ {
		runSteps(t, tc, ds, step{1, 1}, step{0, 0})
		markPodsReady(tc)
	}
	runSteps(t, tc, ds, step{0, 1}, step{0, 0})
}

func TestDaemonSetUpdatesWhenNewPodIsNotReady(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	addNodes(tc.nodeStore, 0, 5, nil)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, 5, 0, 0)
	markPodsReady(tc)

	ds.Spec.Template.Spec.Containers[0].Image = "foo2/bar2"
	setRollingUpdate(tc, ds, 3)
	// New pods never become ready: the budget is used up and the rollout stops.
	runSteps(t, tc, ds, step{0, 3}, step{3, 0}, step{0, 0})
}

func readyPodNames(tc *testController) map[string]bool {
	out := map[string]bool{}
	for _, o := range tc.podStore.List() {
		if p := o.(*corev1.Pod); IsPodReady(p) {
			out[p.Name] = true
		}
	}
	return out
}

func TestDaemonSetUpdatesSomeOldPodsNotReady(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	addNodes(tc.nodeStore, 0, 5, nil)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, 5, 0, 0)
	markPodsReady(tc)

	ds.Spec.Template.Spec.Containers[0].Image = "foo2/bar2"
	setRollingUpdate(tc, ds, 2)
	runSteps(t, tc, ds, step{0, 2}, step{2, 0}, step{0, 0})

	// Another update replaces only the 2 unready new pods; 3 ready ones stay.
	ds.Spec.Template.Spec.Containers[0].Image = "foo2/bar3"
	tc.dsStore.Update(ds)
	runSteps(t, tc, ds, step{0, 2}, step{2, 0}, step{0, 0})
	if n := len(readyPodNames(tc)); n != 3 {
		t.Fatalf("%d old ready pods, want 3", n)
	}
}

func TestDaemonSetUpdatesSaveOldHealthyPods(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	addNodes(tc.nodeStore, 0, 20, nil)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, 20, 0, 0)
	markPodsReady(tc)

	// First update leaves 10 ready old pods that must never be touched.
	ds.Spec.Template.Spec.Containers[0].Image = "foo2/bar2"
	setRollingUpdate(tc, ds, 10)
	runSteps(t, tc, ds, step{0, 10}, step{10, 0}, step{0, 0})
	oldReady := readyPodNames(tc)

	for i := 0; i < 10; i++ { // Kubernetes draws maxUnavailable at random in [0,10)
		ds.Spec.Template.Spec.Containers[0].Image = fmt.Sprintf("foo2/bar3-%d", i)
		setRollingUpdate(tc, ds, i)
		runSteps(t, tc, ds, step{0, 10}, step{10, 0}, step{0, 0})
		ready := readyPodNames(tc)
		for name := range oldReady {
			if !ready[name] {
				t.Fatalf("iteration %d (maxUnavailable %d): ready pod %s was touched", i, i, name)
			}
		}
	}

	ds.Spec.Template.Spec.Containers[0].Image = "foo2/bar4"
	setRollingUpdate(tc, ds, 11)
	runSteps(t, tc, ds, step{0, 11}, step{11, 0}, step{0, 0})
	if n := len(readyPodNames(tc)); n != 9 {
		t.Errorf("%d ready pods, want 9", n)
	}
}

func TestDaemonSetUpdatesAllOldNotReadyPodsAndNewNotReadyPods(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	addNodes(tc.nodeStore, 0, 100, nil)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, 100, 0, 0)
	markPodsReady(tc)
	var hash1 string
	for _, o := range tc.podStore.List() {
		hash1 = o.(*corev1.Pod).Labels[RevisionHashLabel]
		break
	}

	ds.Spec.Template.Spec.Containers[0].Image = "foo2/bar2"
	setRollingUpdate(tc, ds, 10)
	for i := 0; i < 10; i++ {
		runSteps(t, tc, ds, step{0, 10}, step{10, 0})
		markPodsReady(tc)
	}
	runSteps(t, tc, ds, step{0, 0})

	// 88 unavailable new, 2 unavailable old, 10 available old.
	oldUnavailable := map[string]bool{}
	for i, o := range tc.podStore.List() {
		pod := o.(*corev1.Pod)
		if i >= 10 {
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		}
		if i < 12 {
			pod.Labels[RevisionHashLabel] = hash1
			if i >= 10 {
				oldUnavailable[pod.Name] = true
			}
		}
	}
	runSteps(t, tc, ds, step{0, 2}, step{2, 0}, step{0, 0})
	for _, o := range tc.podStore.List() {
		if name := o.(*corev1.Pod).Name; oldUnavailable[name] {
			t.Errorf("old unavailable pod %s not replaced", name)
		}
	}
}

func TestDaemonSetUpdatesAllOldPodsNotReady(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	addNodes(tc.nodeStore, 0, 5, nil)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, 5, 0, 0)

	ds.Spec.Template.Spec.Containers[0].Image = "foo2/bar2"
	setRollingUpdate(tc, ds, 3)
	// All old pods are unavailable, so all are replaced regardless of the budget.
	runSteps(t, tc, ds, step{0, 5}, step{5, 0}, step{0, 0})
}

// setPodReadiness flips readiness of up to count pods selected by fn, stamping
// the fake clock's time.
func setPodReadiness(t *testing.T, tc *testController, ready bool, count int, fn func(*corev1.Pod) bool) {
	t.Helper()
	for _, o := range tc.podStore.List() {
		if count <= 0 {
			break
		}
		pod := o.(*corev1.Pod)
		if pod.DeletionTimestamp != nil || IsPodReady(pod) == ready || !fn(pod) {
			continue
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.NewTime(tc.clock.Now())}}
		count--
	}
	if count > 0 {
		t.Fatalf("could not mark %d pods ready=%t", count, ready)
	}
}

func currentDSHash(t *testing.T, tc *testController, ds *appsv1.DaemonSet) string {
	t.Helper()
	cur, _, err := tc.constructHistory(context.Background(), ds)
	if err != nil {
		t.Fatal(err)
	}
	return cur.Labels[RevisionHashLabel]
}

func TestDaemonSetUpdatesAllOldPodsNotReadyMaxSurge(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	addNodes(tc.nodeStore, 0, 5, nil)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, 5, 0, 0)

	ds.Spec.Template.Spec.Containers[0].Image = "foo2/bar2"
	ds.Spec.UpdateStrategy = newUpdateSurge(intstr.FromInt32(3))
	tc.dsStore.Update(ds)

	// All old pods are unavailable, so all are surged.
	tc.clock.SetTime(time.Unix(100, 0))
	runSteps(t, tc, ds, step{5, 0})
	// Waiting for pods to go ready, old pods are deleted.
	tc.clock.SetTime(time.Unix(200, 0))
	runSteps(t, tc, ds, step{0, 5})

	setPodReadiness(t, tc, true, 5, func(*corev1.Pod) bool { return true })
	ds.Spec.MinReadySeconds = 15
	ds.Spec.Template.Spec.Containers[0].Image = "foo3/bar3"
	tc.dsStore.Update(ds)

	tc.clock.SetTime(time.Unix(300, 0))
	runSteps(t, tc, ds, step{3, 0})

	hash := currentDSHash(t, tc, ds)
	withNew := map[string]bool{}
	for _, o := range tc.podStore.List() {
		if p := o.(*corev1.Pod); p.Labels[RevisionHashLabel] == hash {
			withNew[p.Spec.NodeName] = true
		}
	}
	// Two updated pods ready at 300; one old pod on a node without an updated pod unready.
	setPodReadiness(t, tc, true, 2, func(p *corev1.Pod) bool { return p.Labels[RevisionHashLabel] == hash })
	setPodReadiness(t, tc, false, 1, func(p *corev1.Pod) bool {
		return p.Labels[RevisionHashLabel] != hash && !withNew[p.Spec.NodeName]
	})

	// New pods still wait for minReadySeconds: one pod replaces the unready old one.
	tc.clock.SetTime(time.Unix(310, 0))
	runSteps(t, tc, ds, step{1, 0})
	// New pods are now available: old ones go.
	tc.clock.SetTime(time.Unix(320, 0))
	runSteps(t, tc, ds, step{1, 3})

	setPodReadiness(t, tc, true, 3, func(p *corev1.Pod) bool { return p.Labels[RevisionHashLabel] == hash })
	tc.clock.SetTime(time.Unix(340, 0))
	runSteps(t, tc, ds, step{0, 2})
	// Rollout complete.
	tc.clock.SetTime(time.Unix(350, 0))
	runSteps(t, tc, ds, step{0, 0})
}

func TestDaemonSetUpdatesNoTemplateChanged(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	addNodes(tc.nodeStore, 0, 5, nil)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, 5, 0, 0)
	setRollingUpdate(tc, ds, 3)
	runSteps(t, tc, ds, step{0, 0})
}

func TestOnDeleteUpdatesNothingButReplacesDeleted(t *testing.T) {
	// docs/controller-rules.md §3.7: OnDelete never deletes a pod for being
	// old; a pod deleted by a user is replaced with the current template.
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	addNodes(tc.nodeStore, 0, 3, nil)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, 3, 0, 0)
	markPodsReady(tc)
	oldHash := currentDSHash(t, tc, ds)

	ds.Spec.Template.Spec.Containers[0].Image = "foo2/bar2"
	tc.dsStore.Update(ds)
	runSteps(t, tc, ds, step{0, 0})

	victim := tc.podStore.List()[0].(*corev1.Pod)
	tc.podStore.Delete(victim)
	runSteps(t, tc, ds, step{1, 0})
	newHash := currentDSHash(t, tc, ds)
	if newHash == oldHash {
		t.Fatal("template change did not change the hash")
	}
	counts := map[string]int{}
	for _, o := range tc.podStore.List() {
		counts[o.(*corev1.Pod).Labels[RevisionHashLabel]]++
	}
	if counts[oldHash] != 2 || counts[newHash] != 1 {
		t.Errorf("pods by hash %v, want 2 old and 1 new", counts)
	}
}

func TestGetUnavailableNumbers(t *testing.T) {
	readyPod := func(name, node string) *corev1.Pod {
		p := newPod(name, node, simpleDaemonSetLabel, nil)
		markPodReady(p, testStart)
		return p
	}
	cases := []struct {
		name                              string
		nodes                             int
		strategy                          appsv1.DaemonSetUpdateStrategy
		nodeToPods                        map[string][]*corev1.Pod
		maxSurge, maxUnavailable, desired int
		emptyNodes                        int
	}{
		{"No nodes", 0, newUpdateUnavailable(intstr.FromInt32(0)), map[string][]*corev1.Pod{}, 0, 0, 0, 0},
		{"Two nodes with ready pods", 2, newUpdateUnavailable(intstr.FromInt32(1)),
			map[string][]*corev1.Pod{"node-0": {readyPod("pod-0", "node-0")}, "node-1": {readyPod("pod-1", "node-1")}}, 0, 1, 2, 0},
		{"Two nodes, one node without pods", 2, newUpdateUnavailable(intstr.FromInt32(0)),
			map[string][]*corev1.Pod{"node-0": {readyPod("pod-0", "node-0")}}, 0, 1, 2, 1},
		{"Two nodes, one node without pods, surge", 2, newUpdateSurge(intstr.FromInt32(0)),
			map[string][]*corev1.Pod{"node-0": {readyPod("pod-0", "node-0")}}, 0, 1, 2, 1},
		{"Two nodes with pods, MaxUnavailable in percents", 2, newUpdateUnavailable(intstr.FromString("50%")),
			map[string][]*corev1.Pod{"node-0": {readyPod("pod-0", "node-0")}, "node-1": {readyPod("pod-1", "node-1")}}, 0, 1, 2, 0},
		{"Two nodes with pods, MaxUnavailable in percents, surge", 2, newUpdateSurge(intstr.FromString("50%")),
			map[string][]*corev1.Pod{"node-0": {readyPod("pod-0", "node-0")}, "node-1": {readyPod("pod-1", "node-1")}}, 1, 0, 2, 0},
		{"Two nodes with pods, MaxUnavailable is 100%, surge", 2, newUpdateSurge(intstr.FromString("100%")),
			map[string][]*corev1.Pod{"node-0": {readyPod("pod-0", "node-0")}, "node-1": {readyPod("pod-1", "node-1")}}, 2, 0, 2, 0},
		{"Three nodes, MaxUnavailable in percents rounds up, pod terminating", 3, newUpdateUnavailable(intstr.FromString("50%")),
			func() map[string][]*corev1.Pod {
				p1 := readyPod("pod-1", "node-1")
				now := metav1.Now()
				p1.DeletionTimestamp = &now
				return map[string][]*corev1.Pod{"node-0": {readyPod("pod-0", "node-0")}, "node-1": {p1}}
			}(), 0, 2, 3, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds := newDaemonSet("x")
			ds.Spec.UpdateStrategy = c.strategy
			var nodes []*corev1.Node
			for i := 0; i < c.nodes; i++ {
				nodes = append(nodes, newNode(fmt.Sprintf("node-%d", i), nil))
			}
			maxSurge, maxUnavailable, desired, err := updatedDesiredNodeCounts(ds, nodes, c.nodeToPods, nil)
			if err != nil {
				t.Fatal(err)
			}
			if maxSurge != c.maxSurge || maxUnavailable != c.maxUnavailable || desired != c.desired {
				t.Errorf("got surge %d unavailable %d desired %d, want %d %d %d", maxSurge, maxUnavailable, desired, c.maxSurge, c.maxUnavailable, c.desired)
			}
			empty := 0
			for _, pods := range c.nodeToPods {
				if len(pods) == 0 {
					empty++
				}
			}
			if empty != c.emptyNodes {
				t.Errorf("empty nodes %d, want %d", empty, c.emptyNodes)
			}
		})
	}
}

func TestInvalidBudgetFailsSync(t *testing.T) {
	ds := newDaemonSet("foo")
	bad := intstr.FromString("abc")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &bad}}
	tc := newTestController(t, ds)
	addNodes(tc.nodeStore, 0, 1, nil)
	addPods(tc.podStore, "node-0", simpleDaemonSetLabel, ds, 1)
	tc.dsStore.Add(ds)
	if err := tc.sync(context.Background(), dsKey(ds)); err == nil {
		t.Fatal("sync with maxUnavailable \"abc\" succeeded")
	}
}

func TestControlledHistories(t *testing.T) {
	ds1 := newDaemonSet("ds1")
	newCR := func(name, ns string, owners []metav1.OwnerReference) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: ds1.Spec.Template.Labels, OwnerReferences: owners, UID: newUID()},
			Data: runtime.RawExtension{Raw: []byte(`{}`)}, Revision: 1}
	}
	owned := newCR("ds1-x1", "default", []metav1.OwnerReference{*metav1.NewControllerRef(ds1, controllerKind)})
	orphanSameNS := newCR("ds1-x2", "default", nil)
	orphanOtherNS := newCR("ds1-x3", "default-other", nil)
	cases := []struct {
		name string
		crs  []*appsv1.ControllerRevision
		want []string
	}{
		{"controller revision in the same namespace", []*appsv1.ControllerRevision{owned, orphanSameNS}, []string{"ds1-x1", "ds1-x2"}},
		{"skip adopting the controller revision in another namespace", []*appsv1.ControllerRevision{orphanOtherNS}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc := newTestController(t, ds1)
			tc.dsStore.Add(ds1)
			for _, cr := range c.crs {
				tc.client.Seed(cr)
				tc.historyStore.Add(cr)
			}
			got, err := tc.controlledHistories(context.Background(), ds1)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, cr := range got {
				names = append(names, cr.Name)
			}
			if !reflect.DeepEqual(names, c.want) {
				t.Errorf("got %v, want %v", names, c.want)
			}
		})
	}
}
