package daemonset

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/everynode/everynode/internal/testkit"
)

// Ports of Kubernetes' event handler and node/pod mapping tests
// (docs/controller-rules.md §9.1).

func TestUpdateNode(t *testing.T) {
	withSelector := func() *appsv1.DaemonSet {
		ds := newDaemonSet("ds")
		ds.Spec.Template.Spec.NodeSelector = simpleNodeLabel
		return ds
	}
	tainted := newNode("node1", nil)
	setNodeTaint(tainted, noScheduleTaints)
	allocChanged := newNode("node1", nil)
	allocChanged.Status.Allocatable = allocatableResources("200M", "200m")
	cases := []struct {
		test             string
		oldNode, newNode *corev1.Node
		ds               *appsv1.DaemonSet
		shouldEnqueue    bool
		creates          int
	}{
		{"Nothing changed, should not enqueue", newNode("node1", nil), newNode("node1", nil), withSelector(), false, 0},
		{"Node labels changed", newNode("node1", nil), newNode("node1", simpleNodeLabel), withSelector(), true, 0},
		{"Node taints changed", tainted, newNode("node1", nil), newDaemonSet("ds"), true, 0},
		{"Node Allocatable changed", newNode("node1", nil), allocChanged, newDaemonSet("ds"), false, 1},
	}
	for _, c := range cases {
		t.Run(c.test, func(t *testing.T) {
			for _, strategy := range updateStrategies() {
				tc := newTestController(t)
				tc.nodeStore.Add(c.oldNode)
				c.ds.Spec.UpdateStrategy = *strategy
				tc.dsStore.Add(c.ds)
				expectSyncDaemonSets(t, tc, c.ds, c.creates, 0, 0)
				queuedKeys(tc) // drain
				tc.updateNode(c.oldNode, c.newNode)
				if enqueued := tc.queue.Len() > 0; enqueued != c.shouldEnqueue {
					t.Errorf("enqueued %t, want %t", enqueued, c.shouldEnqueue)
				}
			}
		})
	}
}

func TestShouldIgnoreNodeUpdate(t *testing.T) {
	labelled := newNode("n", simpleNodeLabel)
	tainted := newNode("n", nil)
	setNodeTaint(tainted, noScheduleTaints)
	status := newNode("n", nil)
	status.Status.Conditions = nil
	cases := []struct {
		name   string
		cur    *corev1.Node
		ignore bool
	}{
		{"same", newNode("n", nil), true},
		{"labels", labelled, false},
		{"taints", tainted, false},
		{"status only", status, true},
	}
	for _, c := range cases {
		if got := shouldIgnoreNodeUpdate(newNode("n", nil), c.cur); got != c.ignore {
			t.Errorf("%s: ignore = %t, want %t", c.name, got, c.ignore)
		}
	}
}

func TestDeleteNoDaemonPod(t *testing.T) {
	yes := true
	cases := []struct {
		test string
		pod  *corev1.Pod
	}{
		{"non-daemon pod", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod_0"}, Spec: resourcePodSpec("node1", "50M", "50m")}},
		{"non-daemon pod with controller", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod_0",
			OwnerReferences: []metav1.OwnerReference{{Controller: &yes}}}, Spec: resourcePodSpec("node1", "50M", "50m")}},
		{"unscheduled pod", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod_5"}, Spec: resourcePodSpec("", "50M", "50m")}},
	}
	for _, c := range cases {
		t.Run(c.test, func(t *testing.T) {
			tc := newTestController(t)
			ds := newDaemonSet("ds")
			tc.dsStore.Add(ds)
			tc.deletePod(c.pod)
			if n := tc.queue.Len(); n != 0 {
				t.Errorf("queue length %d, want 0", n)
			}
		})
	}
}

func TestDeleteUnscheduledPodForNotExistingNode(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		tc := newTestController(t, ds)
		tc.dsStore.Add(ds)
		addNodes(tc.nodeStore, 0, 1, nil)
		addPods(tc.podStore, "node-0", simpleDaemonSetLabel, ds, 1)
		addPods(tc.podStore, "node-1", simpleDaemonSetLabel, ds, 1)
		pod := newPod("pod1-node-3", "", simpleDaemonSetLabel, ds)
		pod.Spec.Affinity = ReplaceDaemonSetPodNodeNameNodeAffinity(nil, "node-2")
		tc.podStore.Add(pod)
		expectSyncDaemonSets(t, tc, ds, 0, 1, 0)
		if got := tc.podControl.DeletePodName; got[0] != pod.Name {
			t.Errorf("deleted %v, want %s", got, pod.Name)
		}
	}
}

func TestGetNodesToDaemonPods(t *testing.T) {
	ds := newDaemonSet("foo")
	ds2 := newDaemonSet("foo2")
	terminal := func(prefix, node string, phase corev1.PodPhase, deleted bool) *corev1.Pod {
		p := newPod(prefix, node, simpleDaemonSetLabel, ds)
		p.Status.Phase = phase
		if deleted {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	cases := map[string]struct {
		includeDeletedTerminal bool
		wanted, ignored        []*corev1.Pod
	}{
		"exclude deleted terminal pods": {
			wanted: []*corev1.Pod{
				newPod("matching-owned-0-", "node-0", simpleDaemonSetLabel, ds),
				newPod("matching-orphan-0-", "node-0", simpleDaemonSetLabel, nil),
				newPod("matching-owned-1-", "node-1", simpleDaemonSetLabel, ds),
				newPod("matching-orphan-1-", "node-1", simpleDaemonSetLabel, nil),
				terminal("matching-owned-succeeded-pod-0-", "node-0", corev1.PodSucceeded, false),
				terminal("matching-owned-failed-pod-1-", "node-1", corev1.PodFailed, false),
			},
			ignored: []*corev1.Pod{
				newPod("non-matching-owned-0-", "node-0", simpleDaemonSetLabel2, ds),
				newPod("non-matching-orphan-1-", "node-1", simpleDaemonSetLabel2, nil),
				newPod("matching-owned-by-other-0-", "node-0", simpleDaemonSetLabel, ds2),
				terminal("matching-owned-succeeded-deleted-pod-0-", "node-0", corev1.PodSucceeded, true),
				terminal("matching-owned-failed-deleted-pod-1-", "node-1", corev1.PodFailed, true),
			},
		},
		"include deleted terminal pods": {
			includeDeletedTerminal: true,
			wanted: []*corev1.Pod{
				newPod("matching-owned-0-", "node-0", simpleDaemonSetLabel, ds),
				newPod("matching-orphan-0-", "node-0", simpleDaemonSetLabel, nil),
				terminal("matching-owned-succeeded-pod-0-", "node-0", corev1.PodSucceeded, false),
				terminal("matching-owned-failed-deleted-pod-1-", "node-1", corev1.PodFailed, true),
			},
			ignored: []*corev1.Pod{
				newPod("non-matching-owned-0-", "node-0", simpleDaemonSetLabel2, ds),
				newPod("non-matching-orphan-1-", "node-1", simpleDaemonSetLabel2, nil),
				newPod("matching-owned-by-other-0-", "node-0", simpleDaemonSetLabel, ds2),
			},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			tc := newTestController(t, ds, ds2)
			tc.dsStore.Add(ds)
			tc.dsStore.Add(ds2)
			addNodes(tc.nodeStore, 0, 2, nil)
			for _, p := range append(append([]*corev1.Pod(nil), c.wanted...), c.ignored...) {
				tc.podStore.Add(p)
			}
			got, err := tc.getNodesToDaemonPods(context.Background(), ds, c.includeDeletedTerminal)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for node, pods := range got {
				for _, p := range pods {
					if p.Spec.NodeName != node {
						t.Errorf("pod %s grouped into %s", p.Name, node)
					}
					seen[p.Name] = true
				}
			}
			for _, p := range c.wanted {
				if !seen[p.Name] {
					t.Errorf("missing pod %s", p.Name)
				}
				delete(seen, p.Name)
			}
			for name := range seen {
				t.Errorf("unexpected pod %s", name)
			}
		})
	}
}

func TestAddNode(t *testing.T) {
	tc := newTestController(t)
	ds := newDaemonSet("ds")
	ds.Spec.Template.Spec.NodeSelector = simpleNodeLabel
	tc.dsStore.Add(ds)
	tc.addNode(newNode("node1", nil))
	if n := tc.queue.Len(); n != 0 {
		t.Fatalf("queue length %d, want 0", n)
	}
	tc.addNode(newNode("node2", simpleNodeLabel))
	if got := queuedKeys(tc); !reflect.DeepEqual(got, []string{"default/ds"}) {
		t.Fatalf("queued %v", got)
	}
}

func bumpResourceVersion(obj metav1.Object) {
	v, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	obj.SetResourceVersion(strconv.FormatInt(v+1, 10))
}

func TestPodEventHandlers(t *testing.T) {
	type handlerCase struct {
		name string
		run  func(tc *testController, ds1, ds2 *appsv1.DaemonSet)
		want []string
	}
	cases := []handlerCase{
		{"TestAddPod", func(tc *testController, ds1, _ *appsv1.DaemonSet) {
			tc.addPod(newPod("pod1-", "node-0", simpleDaemonSetLabel, ds1))
		}, []string{"default/foo1"}},
		{"TestAddPodOrphan", func(tc *testController, _, _ *appsv1.DaemonSet) {
			tc.addPod(newPod("pod1-", "node-0", simpleDaemonSetLabel, nil))
		}, []string{"default/foo1", "default/foo2"}},
		{"TestUpdatePod", func(tc *testController, _, ds2 *appsv1.DaemonSet) {
			pod := newPod("pod2-", "node-0", simpleDaemonSetLabel, ds2)
			prev := pod.DeepCopy()
			bumpResourceVersion(pod)
			tc.updatePod(prev, pod)
		}, []string{"default/foo2"}},
		{"TestUpdatePodOrphanSameLabels", func(tc *testController, _, _ *appsv1.DaemonSet) {
			pod := newPod("pod1-", "node-0", simpleDaemonSetLabel, nil)
			prev := pod.DeepCopy()
			bumpResourceVersion(pod)
			tc.updatePod(prev, pod)
		}, nil},
		{"TestUpdatePodOrphanWithNewLabels", func(tc *testController, _, _ *appsv1.DaemonSet) {
			pod := newPod("pod1-", "node-0", simpleDaemonSetLabel, nil)
			prev := pod.DeepCopy()
			prev.Labels = map[string]string{"foo2": "bar2"}
			bumpResourceVersion(pod)
			tc.updatePod(prev, pod)
		}, []string{"default/foo1", "default/foo2"}},
		{"TestUpdatePodChangeControllerRef", func(tc *testController, ds1, ds2 *appsv1.DaemonSet) {
			pod := newPod("pod1-", "node-0", simpleDaemonSetLabel, ds1)
			prev := pod.DeepCopy()
			prev.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ds2, controllerKind)}
			bumpResourceVersion(pod)
			tc.updatePod(prev, pod)
		}, []string{"default/foo1", "default/foo2"}},
		{"TestUpdatePodControllerRefRemoved", func(tc *testController, ds1, _ *appsv1.DaemonSet) {
			pod := newPod("pod1-", "node-0", simpleDaemonSetLabel, ds1)
			prev := pod.DeepCopy()
			pod.OwnerReferences = nil
			bumpResourceVersion(pod)
			tc.updatePod(prev, pod)
		}, []string{"default/foo1", "default/foo2"}},
		{"TestDeletePod", func(tc *testController, ds1, _ *appsv1.DaemonSet) {
			tc.deletePod(newPod("pod1-", "node-0", simpleDaemonSetLabel, ds1))
		}, []string{"default/foo1"}},
		{"TestDeletePodOrphan", func(tc *testController, _, _ *appsv1.DaemonSet) {
			tc.deletePod(newPod("pod1-", "node-0", simpleDaemonSetLabel, nil))
		}, nil},
		{"tombstone delete", func(tc *testController, ds1, _ *appsv1.DaemonSet) {
			p := newPod("pod1-", "node-0", simpleDaemonSetLabel, ds1)
			tc.deletePod(cache.DeletedFinalStateUnknown{Key: "default/" + p.Name, Obj: p})
		}, []string{"default/foo1"}},
		{"pod turned ready with minReadySeconds requeues later", func(tc *testController, ds1, _ *appsv1.DaemonSet) {
			pod := newPod("pod1-", "node-0", simpleDaemonSetLabel, ds1)
			prev := pod.DeepCopy()
			markPodReady(pod, tc.clock.Now())
			bumpResourceVersion(pod)
			tc.updatePod(prev, pod)
			queuedKeys(tc)
			tc.clock.Step(11 * time.Second) // minReadySeconds 10 + 1s
		}, []string{"default/foo1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, strategy := range updateStrategies() {
				tc := newTestController(t)
				ds1 := newDaemonSet("foo1")
				ds1.Spec.UpdateStrategy = *strategy
				ds1.Spec.MinReadySeconds = 10
				ds2 := newDaemonSet("foo2")
				ds2.Spec.UpdateStrategy = *strategy
				ds3 := newDaemonSet("foo3")
				ds3.Spec.Selector = &metav1.LabelSelector{MatchLabels: simpleDaemonSetLabel2}
				tc.dsStore.Add(ds1)
				tc.dsStore.Add(ds2)
				tc.dsStore.Add(ds3)
				c.run(tc, ds1, ds2)
				got := waitQueued(t, tc, len(c.want))
				if !reflect.DeepEqual(got, c.want) {
					t.Errorf("queued %v, want %v", got, c.want)
				}
			}
		})
	}
}

// waitQueued returns the queued keys once n are there (delayed adds land
// from the queue's own goroutine after a fake-clock step).
func waitQueued(t *testing.T, tc *testController, n int) []string {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, func() error {
		if got := tc.queue.Len(); got < n {
			return fmt.Errorf("%d keys queued, want %d", got, n)
		}
		return nil
	})
	return queuedKeys(tc)
}

func TestExpectationsAccounting(t *testing.T) {
	// Kubernetes' TestExpectationsOnRecreate, handler half: a pod add lowers the
	// adds, a delete (or deletionTimestamp) lowers the dels, a DaemonSet delete
	// or UID change forgets the record.
	tc := newTestController(t)
	ds := newDaemonSet("foo")
	tc.dsStore.Add(ds)
	key := dsKey(ds)
	tc.expectations.Set(key, 2, 1)
	tc.addPod(newPod("a-", "node-0", simpleDaemonSetLabel, ds))
	if tc.expectations.Satisfied(key) {
		t.Fatal("satisfied after one of two creates")
	}
	tc.addPod(newPod("b-", "node-0", simpleDaemonSetLabel, ds))
	p := newPod("c-", "node-0", simpleDaemonSetLabel, ds)
	prev := p.DeepCopy()
	now := metav1.Now()
	p.DeletionTimestamp = &now
	bumpResourceVersion(p)
	tc.updatePod(prev, p)
	if !tc.expectations.Satisfied(key) {
		add, del, _ := tc.expectations.get(key)
		t.Fatalf("not satisfied: add=%d del=%d", add, del)
	}
	tc.expectations.Set(key, 5, 0)
	recreated := ds.DeepCopy()
	recreated.UID = newUID()
	tc.updateDaemonSet(ds, recreated)
	if _, _, ok := tc.expectations.get(key); ok {
		t.Error("expectations kept across a UID change")
	}
	tc.expectations.Set(key, 5, 0)
	tc.deleteDaemonSet(ds)
	if _, _, ok := tc.expectations.get(key); ok {
		t.Error("expectations kept after delete")
	}
	// Expired records count as satisfied.
	tc.expectations.Set(key, 5, 0)
	tc.clock.Step(ExpectationsTimeout + time.Second)
	if !tc.expectations.Satisfied(key) {
		t.Error("expired expectations not satisfied")
	}
}

func TestExpectationsBlockManage(t *testing.T) {
	// With unobserved creates pending, a sync only refreshes status
	// (without observedGeneration) and never creates again.
	ds := newDaemonSet("foo")
	ds.Generation = 3
	tc := newTestController(t, ds)
	tc.dsStore.Add(ds)
	addNodes(tc.nodeStore, 0, 3, nil)
	tc.expectations.Set(dsKey(ds), 3, 0)
	expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
	u := lastStatusUpdate(t, tc, ds)
	if u == nil || u.Status.DesiredNumberScheduled != 3 || u.Status.ObservedGeneration != 0 {
		t.Fatalf("status %+v", u)
	}
}
