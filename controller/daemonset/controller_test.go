package daemonset

import (
	"errors"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/everynode/everynode/client/fake"
)

// Ports of Kubernetes' daemon_controller_test.go
// (docs/controller-rules.md §9.1). Each runs one sync against seeded caches and
// counts creates, deletes and events.

func TestDeleteFinalStateUnknown(t *testing.T) {
	for _, strategy := range updateStrategies() {
		tc := newTestController(t)
		addNodes(tc.nodeStore, 0, 1, nil)
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		tc.deleteDaemonSet(cache.DeletedFinalStateUnknown{Key: "foo", Obj: ds})
		if got := queuedKeys(tc); !reflect.DeepEqual(got, []string{"default/foo"}) {
			t.Errorf("queued %v, want default/foo", got)
		}
	}
}

func TestSimpleDaemonSetLaunchesPods(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		tc := newTestController(t, ds)
		addNodes(tc.nodeStore, 0, 5, nil)
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 5, 0, 0)
	}
}

func TestSimpleDaemonSetScheduleDaemonSetPodsLaunchesPods(t *testing.T) {
	const nodeNum = 5
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		tc := newTestController(t, ds)
		addNodes(tc.nodeStore, 0, nodeNum, nil)
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, nodeNum, 0, 0)

		nodes := map[string]bool{}
		for _, o := range tc.nodeStore.List() {
			nodes[o.(*corev1.Node).Name] = true
		}
		for _, pod := range tc.podControl.Templates {
			// everynode binds directly: nodeName set, and the affinity Kubernetes writes.
			sel := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
			if len(sel.NodeSelectorTerms) != 1 || len(sel.NodeSelectorTerms[0].MatchFields) != 1 {
				t.Fatalf("pod %s affinity %+v", pod.GenerateName, sel)
			}
			f := sel.NodeSelectorTerms[0].MatchFields[0]
			if f.Key != metav1.ObjectNameField || f.Operator != corev1.NodeSelectorOpIn || len(f.Values) != 1 {
				t.Fatalf("matchFields %+v", f)
			}
			if pod.Spec.NodeName != f.Values[0] {
				t.Errorf("nodeName %q != affinity node %q", pod.Spec.NodeName, f.Values[0])
			}
			delete(nodes, f.Values[0])
		}
		if len(nodes) != 0 {
			t.Fatalf("no pods on nodes %v", nodes)
		}
	}
}

func TestSimpleDaemonSetPodCreateErrors(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		tc := newTestController(t, ds)
		tc.podControl.CreateLimit = 10
		addNodes(tc.nodeStore, 0, tc.podControl.CreateLimit*10, nil)
		tc.dsStore.Add(ds)

		expectSyncDaemonSets(t, tc, ds, tc.podControl.CreateLimit, 0, 0)

		expectedLimit := 0
		for pass := uint8(0); expectedLimit <= tc.podControl.CreateLimit; pass++ {
			expectedLimit += slowStartInitialBatchSize << pass
		}
		if tc.podControl.CreateCallCount > expectedLimit {
			t.Errorf("create calls %d, want <= %d", tc.podControl.CreateCallCount, expectedLimit)
		}
		updated := lastStatusUpdate(t, tc, ds)
		if updated == nil {
			t.Fatal("status not written")
		}
		if got, want := updated.Status.DesiredNumberScheduled, int32(100); got != want {
			t.Errorf("desired = %d, want %d", got, want)
		}
		if got, want := updated.Status.CurrentNumberScheduled, int32(10); got != want {
			t.Errorf("current = %d, want %d", got, want)
		}
		if got, want := updated.Status.UpdatedNumberScheduled, int32(10); got != want {
			t.Errorf("updated = %d, want %d", got, want)
		}
	}
}

func TestDaemonSetPodCreateExpectationsError(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		tc := newTestController(t, ds)
		tc.podControl.CreateLimit = 10
		addNodes(tc.nodeStore, 0, 100, nil)
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, tc.podControl.CreateLimit, 0, 0)
		if !tc.expectations.Satisfied(dsKey(ds)) {
			add, del, _ := tc.expectations.get(dsKey(ds))
			t.Errorf("unsatisfied expectations after failed creates: add=%d del=%d", add, del)
		}
	}
}

func TestSimpleDaemonSetUpdatesStatusAfterLaunchingPods(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		tc := newTestController(t, ds)
		tc.dsStore.Add(ds)
		addNodes(tc.nodeStore, 0, 5, nil)
		expectSyncDaemonSets(t, tc, ds, 5, 0, 0)
		updated := lastStatusUpdate(t, tc, ds)
		if updated == nil || updated.Status.CurrentNumberScheduled != 5 {
			t.Errorf("status after one sync: %+v", updated)
		}
	}
}

func TestSimpleDaemonSetUpdatesStatusError(t *testing.T) {
	syncErr := errors.New("sync error")
	statusErr := errors.New("status error")
	cases := []struct {
		desc                   string
		hasSyncErr, hasStatErr bool
		want                   error
	}{
		{"sync error", true, false, syncErr},
		{"status error", false, true, statusErr},
		{"sync and status error", true, true, syncErr},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			for _, strategy := range updateStrategies() {
				ds := newDaemonSet("foo")
				ds.Spec.UpdateStrategy = *strategy
				tc := newTestController(t, ds)
				if c.hasSyncErr {
					tc.podControl.Err = syncErr
				}
				if c.hasStatErr {
					tc.client.Fail(fake.VerbUpdate, "daemonsets/status", statusErr)
				}
				tc.dsStore.Add(ds)
				addNodes(tc.nodeStore, 0, 1, nil)
				expectSyncDaemonSetsWithError(t, tc, ds, 1, 0, 0, c.want)
			}
		})
	}
}

func TestNoNodesDoesNothing(t *testing.T) {
	for _, strategy := range updateStrategies() {
		tc := newTestController(t)
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
	}
}

func TestOneNodeDaemonLaunchesPod(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		tc := newTestController(t, ds)
		tc.nodeStore.Add(newNode("only-node", nil))
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 1, 0, 0)
	}
}

func TestNotReadyNodeDaemonDoesLaunchPod(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		tc := newTestController(t, ds)
		node := newNode("not-ready", nil)
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		tc.nodeStore.Add(node)
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 1, 0, 0)
	}
}

func allocatableResources(memory, cpu string) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceMemory: resource.MustParse(memory),
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourcePods:   resource.MustParse("100"),
	}
}

func resourcePodSpec(nodeName, memory, cpu string) corev1.PodSpec {
	return corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{
		Resources: corev1.ResourceRequirements{Requests: allocatableResources(memory, cpu)},
	}}}
}

func TestInsufficientCapacityNodeDaemonDoesNotUnscheduleRunningPod(t *testing.T) {
	for _, strategy := range updateStrategies() {
		podSpec := resourcePodSpec("too-much-mem", "75M", "75m")
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		ds.Spec.Template.Spec = podSpec
		tc := newTestController(t, ds)
		node := newNode("too-much-mem", nil)
		node.Status.Allocatable = allocatableResources("100M", "200m")
		tc.nodeStore.Add(node)
		tc.podStore.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "foreign"}, Spec: podSpec})
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 1, 0, 0)
	}
}

func TestInsufficientCapacityNodeSufficientCapacityWithNodeLabelDaemonLaunchPod(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.Template.Spec = resourcePodSpec("", "50M", "75m")
	ds.Spec.Template.Spec.NodeSelector = simpleNodeLabel
	tc := newTestController(t, ds)
	node1 := newNode("not-enough-resource", nil)
	node1.Status.Allocatable = allocatableResources("10M", "20m")
	node2 := newNode("enough-resource", simpleNodeLabel)
	node2.Status.Allocatable = allocatableResources("100M", "200m")
	tc.nodeStore.Add(node1)
	tc.nodeStore.Add(node2)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, 1, 0, 0)
}

func TestNetworkUnavailableNodeDaemonLaunchesPod(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("simple")
		ds.Spec.UpdateStrategy = *strategy
		tc := newTestController(t, ds)
		node := newNode("network-unavailable", nil)
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue}}
		tc.nodeStore.Add(node)
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 1, 0, 0)
	}
}

func TestDontDoAnythingIfBeingDeleted(t *testing.T) {
	for _, strategy := range updateStrategies() {
		podSpec := resourcePodSpec("not-too-much-mem", "75M", "75m")
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		ds.Spec.Template.Spec = podSpec
		now := metav1.Now()
		ds.DeletionTimestamp = &now
		tc := newTestController(t, ds)
		node := newNode("not-too-much-mem", nil)
		node.Status.Allocatable = allocatableResources("200M", "200m")
		tc.nodeStore.Add(node)
		tc.podStore.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: podSpec})
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
		if lastStatusUpdate(t, tc, ds) != nil {
			t.Error("status written for a DaemonSet being deleted")
		}
	}
}

func TestDontDoAnythingIfBeingDeletedRace(t *testing.T) {
	for _, strategy := range updateStrategies() {
		// The API says it IS deleted.
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		now := metav1.Now()
		ds.DeletionTimestamp = &now
		tc := newTestController(t, ds)
		addNodes(tc.nodeStore, 0, 5, nil)
		// The cache says it is NOT deleted.
		ds2 := ds.DeepCopy()
		ds2.DeletionTimestamp = nil
		tc.dsStore.Add(ds2)
		// A matching orphan blocks all actions in this state.
		tc.podStore.Add(newPod("pod1-", "node-0", simpleDaemonSetLabel, nil))
		expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
		if n := len(tc.podControl.Patches); n != 0 {
			t.Errorf("%d adoption patches, want 0", n)
		}
	}
}

func TestPortConflictWithSameDaemonPodDoesNotDeletePod(t *testing.T) {
	for _, strategy := range updateStrategies() {
		podSpec := corev1.PodSpec{NodeName: "port-conflict", Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{HostPort: 666}}}}}
		tc := newTestController(t)
		node := newNode("port-conflict", nil)
		tc.nodeStore.Add(node)
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		ds.Spec.Template.Spec = podSpec
		tc.dsStore.Add(ds)
		tc.podStore.Add(newPod(ds.Name+"-", node.Name, simpleDaemonSetLabel, ds))
		expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
	}
}

func TestNoPortConflictNodeDaemonLaunchesPod(t *testing.T) {
	for _, strategy := range updateStrategies() {
		podSpec1 := corev1.PodSpec{NodeName: "no-port-conflict", Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{HostPort: 6661}}}}}
		podSpec2 := corev1.PodSpec{NodeName: "no-port-conflict", Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{HostPort: 6662}}}}}
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		ds.Spec.Template.Spec = podSpec2
		tc := newTestController(t, ds)
		tc.nodeStore.Add(newNode("no-port-conflict", nil))
		tc.podStore.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: podSpec1})
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 1, 0, 0)
	}
}

func TestPodIsNotDeletedByDaemonsetWithEmptyLabelSelector(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		ds.Spec.Selector = &metav1.LabelSelector{}
		ds.Spec.Template.Spec.NodeSelector = map[string]string{"foo": "bar"}
		tc := newTestController(t, ds)
		tc.nodeStore.Add(newNode("node1", nil))
		tc.podStore.Add(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"bang": "boom"}, Namespace: metav1.NamespaceDefault},
			Spec:       corev1.PodSpec{NodeName: "node1"},
		})
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 0, 0, 1)
		if ev := tc.recorder.Events[0]; ev != "Warning SelectingAll This daemon set is selecting all pods. A non-empty selector is required." {
			t.Errorf("event %q", ev)
		}
	}
}

func TestDealsWithExistingPods(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		tc := newTestController(t, ds)
		tc.dsStore.Add(ds)
		addNodes(tc.nodeStore, 0, 5, nil)
		addPods(tc.podStore, "node-1", simpleDaemonSetLabel, ds, 1)
		addPods(tc.podStore, "node-2", simpleDaemonSetLabel, ds, 2)
		addPods(tc.podStore, "node-3", simpleDaemonSetLabel, ds, 5)
		addPods(tc.podStore, "node-4", simpleDaemonSetLabel2, ds, 2)
		expectSyncDaemonSets(t, tc, ds, 2, 5, 0)
	}
}

func TestSelectorDaemonLaunchesPods(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		ds.Spec.Template.Spec.NodeSelector = simpleNodeLabel
		tc := newTestController(t, ds)
		addNodes(tc.nodeStore, 0, 4, nil)
		addNodes(tc.nodeStore, 4, 3, simpleNodeLabel)
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 3, 0, 0)
	}
}

func TestSelectorDaemonDeletesUnselectedPods(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		ds.Spec.Template.Spec.NodeSelector = simpleNodeLabel
		tc := newTestController(t, ds)
		tc.dsStore.Add(ds)
		addNodes(tc.nodeStore, 0, 5, nil)
		addNodes(tc.nodeStore, 5, 5, simpleNodeLabel)
		addPods(tc.podStore, "node-0", simpleDaemonSetLabel2, ds, 2)
		addPods(tc.podStore, "node-1", simpleDaemonSetLabel, ds, 3)
		addPods(tc.podStore, "node-1", simpleDaemonSetLabel2, ds, 1)
		addPods(tc.podStore, "node-4", simpleDaemonSetLabel, ds, 1)
		expectSyncDaemonSets(t, tc, ds, 5, 4, 0)
	}
}

func TestSelectorDaemonDealsWithExistingPods(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		ds.Spec.Template.Spec.NodeSelector = simpleNodeLabel
		tc := newTestController(t, ds)
		tc.dsStore.Add(ds)
		addNodes(tc.nodeStore, 0, 5, nil)
		addNodes(tc.nodeStore, 5, 5, simpleNodeLabel)
		addPods(tc.podStore, "node-0", simpleDaemonSetLabel, ds, 1)
		addPods(tc.podStore, "node-1", simpleDaemonSetLabel, ds, 3)
		addPods(tc.podStore, "node-1", simpleDaemonSetLabel2, ds, 2)
		addPods(tc.podStore, "node-2", simpleDaemonSetLabel, ds, 4)
		addPods(tc.podStore, "node-6", simpleDaemonSetLabel, ds, 13)
		addPods(tc.podStore, "node-7", simpleDaemonSetLabel2, ds, 4)
		addPods(tc.podStore, "node-9", simpleDaemonSetLabel, ds, 1)
		addPods(tc.podStore, "node-9", simpleDaemonSetLabel2, ds, 1)
		expectSyncDaemonSets(t, tc, ds, 3, 20, 0)
	}
}

func TestBadSelectorDaemonDoesNothing(t *testing.T) {
	for _, strategy := range updateStrategies() {
		tc := newTestController(t)
		addNodes(tc.nodeStore, 0, 4, nil)
		addNodes(tc.nodeStore, 4, 3, simpleNodeLabel)
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		ds.Spec.Template.Spec.NodeSelector = simpleNodeLabel2
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
	}
}

func TestNameAndSelectorCombinations(t *testing.T) {
	cases := []struct {
		name     string
		nodeName string
		selector map[string]string
		creates  int
	}{
		{"TestNameDaemonSetLaunchesPods", "node-0", nil, 1},
		{"TestBadNameDaemonSetDoesNothing", "node-10", nil, 0},
		{"TestNameAndSelectorDaemonSetLaunchesPods", "node-6", simpleNodeLabel, 1},
		{"TestInconsistentNameSelectorDaemonSetDoesNothing", "node-0", simpleNodeLabel, 0},
		{"TestSelectorDaemonSetLaunchesPods", "", simpleNodeLabel, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, strategy := range updateStrategies() {
				ds := newDaemonSet("foo")
				ds.Spec.UpdateStrategy = *strategy
				ds.Spec.Template.Spec.NodeName = c.nodeName
				ds.Spec.Template.Spec.NodeSelector = c.selector
				tc := newTestController(t, ds)
				if c.selector == nil {
					addNodes(tc.nodeStore, 0, 5, nil)
				} else {
					addNodes(tc.nodeStore, 0, 4, nil)
					addNodes(tc.nodeStore, 4, 3, simpleNodeLabel)
				}
				tc.dsStore.Add(ds)
				expectSyncDaemonSets(t, tc, ds, c.creates, 0, 0)
			}
		})
	}
}

func TestNodeAffinityDaemonLaunchesPods(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "color", Operator: corev1.NodeSelectorOpIn, Values: []string{simpleNodeLabel["color"]}}},
			}}},
		}}
		tc := newTestController(t, ds)
		addNodes(tc.nodeStore, 0, 4, nil)
		addNodes(tc.nodeStore, 4, 3, simpleNodeLabel)
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 3, 0, 0)
	}
}

func TestNumberReadyStatus(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		tc := newTestController(t, ds)
		addNodes(tc.nodeStore, 0, 2, simpleNodeLabel)
		addPods(tc.podStore, "node-0", simpleDaemonSetLabel, ds, 1)
		addPods(tc.podStore, "node-1", simpleDaemonSetLabel, ds, 1)
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
		if u := lastStatusUpdate(t, tc, ds); u == nil || u.Status.NumberReady != 0 {
			t.Fatalf("status %+v, want numberReady 0", u)
		}
		markPodsReady(tc)
		expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
		if u := lastStatusUpdate(t, tc, ds); u.Status.NumberReady != 2 || u.Status.NumberAvailable != 2 {
			t.Errorf("status %+v, want numberReady 2", u.Status)
		}
	}
}

func TestObservedGeneration(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		ds.Generation = 1
		tc := newTestController(t, ds)
		addNodes(tc.nodeStore, 0, 1, simpleNodeLabel)
		addPods(tc.podStore, "node-0", simpleDaemonSetLabel, ds, 1)
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
		if u := lastStatusUpdate(t, tc, ds); u == nil || u.Status.ObservedGeneration != ds.Generation {
			t.Errorf("observedGeneration: %+v", u)
		}
	}
}

func TestDaemonKillFailedPods(t *testing.T) {
	tests := []struct {
		failed, normal, creates, deletes, events int
		test                                     string
	}{
		{0, 1, 0, 0, 0, "normal (do nothing)"},
		{0, 0, 1, 0, 0, "no pods (create 1)"},
		{1, 0, 0, 1, 1, "1 failed pod (kill 1), 0 normal pod (create 0; will create in the next sync)"},
		{1, 3, 0, 3, 1, "1 failed pod (kill 1), 3 normal pods (kill 2)"},
	}
	for _, test := range tests {
		t.Run(test.test, func(t *testing.T) {
			for _, strategy := range updateStrategies() {
				ds := newDaemonSet("foo")
				ds.Spec.UpdateStrategy = *strategy
				tc := newTestController(t, ds)
				tc.dsStore.Add(ds)
				addNodes(tc.nodeStore, 0, 1, nil)
				addFailedPods(tc.podStore, "node-0", simpleDaemonSetLabel, ds, test.failed)
				addPods(tc.podStore, "node-0", simpleDaemonSetLabel, ds, test.normal)
				expectSyncDaemonSets(t, tc, ds, test.creates, test.deletes, test.events)
			}
		})
	}
}

func TestDaemonKillFailedPodsBackoff(t *testing.T) {
	for _, strategy := range updateStrategies() {
		t.Run(string(strategy.Type), func(t *testing.T) {
			ds := newDaemonSet("foo")
			ds.Spec.UpdateStrategy = *strategy
			tc := newTestController(t, ds)
			tc.dsStore.Add(ds)
			addNodes(tc.nodeStore, 0, 1, nil)
			pod := newPod("node-0-", "node-0", simpleDaemonSetLabel, ds)
			pod.Status.Phase = corev1.PodFailed
			tc.podStore.Add(pod)
			key := failedPodsBackoffKey(ds, "node-0")

			// First sync deletes the pod and starts the back-off.
			expectSyncDaemonSets(t, tc, ds, 0, 1, 1)
			initial := tc.failedPodsBackoff.Get(key)
			if initial != FailedPodBackoffInitial {
				t.Fatalf("initial delay %v, want %v", initial, FailedPodBackoffInitial)
			}
			tc.resetCounters()

			// An immediate second sync is held back and requeues after the delay.
			expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
			if d := tc.failedPodsBackoff.Get(key); d != initial {
				t.Fatalf("delay raised while waiting: %v", d)
			}
			tc.resetCounters()

			tc.clock.Step(initial - time.Nanosecond)
			if !tc.failedPodsBackoff.IsInBackOffSinceUpdate(key, tc.clock.Now()) {
				t.Error("back-off ended a nanosecond early")
			}
			tc.clock.Step(time.Nanosecond)
			if tc.failedPodsBackoff.IsInBackOffSinceUpdate(key, tc.clock.Now()) {
				t.Fatal("back-off did not end on time")
			}
			// After the window the failed pod is deleted again; the window doubles.
			expectSyncDaemonSets(t, tc, ds, 0, 1, 1)
			if d := tc.failedPodsBackoff.Get(key); d != 2*initial {
				t.Errorf("second delay %v, want %v", d, 2*initial)
			}
		})
	}
}

func TestTaintsAndTolerations(t *testing.T) {
	notReady := []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}}
	unreachable := []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}
	pressure := []corev1.Taint{
		{Key: corev1.TaintNodeDiskPressure, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Effect: corev1.TaintEffectNoSchedule},
	}
	cases := []struct {
		name             string
		taints           []corev1.Taint
		tolerations      []corev1.Toleration
		existingPod      bool
		creates, deletes int
	}{
		{"TestNoScheduleTaintedDoesntEvicitRunningIntolerantPod", noScheduleTaints, nil, true, 0, 0},
		{"TestNoExecuteTaintedDoesEvicitRunningIntolerantPod", noExecuteTaints, nil, true, 0, 1},
		{"TestTaintedNodeDaemonDoesNotLaunchIntolerantPod", noScheduleTaints, nil, false, 0, 0},
		{"TestTaintedNodeDaemonLaunchesToleratePod", noScheduleTaints, noScheduleTolerations, false, 1, 0},
		{"TestNodeDaemonLaunchesToleratePod", nil, noScheduleTolerations, false, 1, 0},
		{"TestNotReadyNodeDaemonLaunchesPod", notReady, nil, false, 1, 0},
		{"TestUnreachableNodeDaemonLaunchesPod", unreachable, nil, false, 1, 0},
		{"TestTaintPressureNodeDaemonLaunchesPod", pressure, nil, false, 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, strategy := range updateStrategies() {
				ds := newDaemonSet("intolerant")
				ds.Spec.UpdateStrategy = *strategy
				setDaemonSetToleration(ds, c.tolerations)
				tc := newTestController(t, ds)
				node := newNode("tainted", nil)
				setNodeTaint(node, c.taints)
				tc.nodeStore.Add(node)
				if c.existingPod {
					tc.podStore.Add(newPod("running-", "tainted", simpleDaemonSetLabel, ds))
				}
				tc.dsStore.Add(ds)
				expectSyncDaemonSets(t, tc, ds, c.creates, c.deletes, 0)
			}
		})
	}
}

func TestDaemonSetRespectsTermination(t *testing.T) {
	for _, strategy := range updateStrategies() {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = *strategy
		tc := newTestController(t, ds)
		addNodes(tc.nodeStore, 0, 1, simpleNodeLabel)
		pod := newPod("node-0-", "node-0", simpleDaemonSetLabel, ds)
		dt := metav1.Now()
		pod.DeletionTimestamp = &dt
		tc.podStore.Add(pod)
		tc.dsStore.Add(ds)
		expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
	}
}
