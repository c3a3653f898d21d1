package daemonset

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"

	"github.com/everynode/everynode/client/fake"
)

// Ports of Kubernetes' daemon_controller_test.go (REFERENCE §9.1). Each runs
// one sync against seeded caches and counts creates, deletes and events.

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
	notReady := []corev1.Taint{{Key: TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}}
	unreachable := []corev1.Taint{{Key: TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}
	pressure := []corev1.Taint{
		{Key: TaintNodeDiskPressure, Effect: corev1.TaintEffectNoSchedule},
		{Key: TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule},
		{Key: TaintNodePIDPressure, Effect: corev1.TaintEffectNoSchedule},
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
	deadline := time.Now().Add(5 * time.Second)
	for tc.queue.Len() < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
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

func TestSurgeDealsWithExistingPods(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateSurge(intstr.FromInt32(1))
	tc := newTestController(t, ds)
	tc.dsStore.Add(ds)
	addNodes(tc.nodeStore, 0, 5, nil)
	addPods(tc.podStore, "node-1", simpleDaemonSetLabel, ds, 1)
	addPods(tc.podStore, "node-2", simpleDaemonSetLabel, ds, 2)
	addPods(tc.podStore, "node-3", simpleDaemonSetLabel, ds, 5)
	addPods(tc.podStore, "node-4", simpleDaemonSetLabel2, ds, 2)
	expectSyncDaemonSets(t, tc, ds, 2, 5, 0)
}

func oldPodOn(node, prefix string, ds *appsv1.DaemonSet, created int64, ready *bool, readySince time.Time) *corev1.Pod {
	p := newPod(prefix, node, simpleDaemonSetLabel, ds)
	delete(p.Labels, RevisionHashLabel)
	p.CreationTimestamp = metav1.NewTime(time.Unix(created, 0))
	if ready != nil {
		st := corev1.ConditionFalse
		if *ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.NewTime(readySince)}}
	}
	return p
}

func sameSet(a, b []string) bool {
	a, b = append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(a)
	sort.Strings(b)
	return reflect.DeepEqual(a, b)
}

func TestSurgePreservesReadyOldPods(t *testing.T) {
	yes := true
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateSurge(intstr.FromInt32(1))
	tc := newTestController(t, ds)
	tc.dsStore.Add(ds)
	addNodes(tc.nodeStore, 0, 5, nil)
	pod := newPod("node-1-", "node-1", simpleDaemonSetLabel, ds)
	pod.CreationTimestamp = metav1.NewTime(time.Unix(100, 0))
	tc.podStore.Add(pod)
	tc.podStore.Add(oldPodOn("node-1", "node-1-old-", ds, 50, &yes, time.Time{}))
	oldReady := oldPodOn("node-1", "node-1-delete-", ds, 60, &yes, time.Time{})
	tc.podStore.Add(oldReady)
	addPods(tc.podStore, "node-2", simpleDaemonSetLabel, ds, 1)
	expectSyncDaemonSets(t, tc, ds, 3, 1, 0)
	if !sameSet(tc.podControl.DeletePodName, []string{oldReady.Name}) {
		t.Errorf("deleted %v, want %s", tc.podControl.DeletePodName, oldReady.Name)
	}
}

func TestSurgeCreatesNewPodWhenAtMaxSurgeAndOldPodDeleted(t *testing.T) {
	yes, no := true, false
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateSurge(intstr.FromInt32(1))
	tc := newTestController(t, ds)
	tc.dsStore.Add(ds)
	addNodes(tc.nodeStore, 0, 5, nil)
	pod := newPod("node-0-", "node-0", simpleDaemonSetLabel, ds)
	pod.CreationTimestamp = metav1.NewTime(time.Unix(100, 0))
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	_ = no
	tc.podStore.Add(pod)
	tc.podStore.Add(oldPodOn("node-0", "node-0-old-ready-", ds, 50, &yes, time.Time{}))
	for i := 1; i < 5; i++ {
		old := oldPodOn(fmt.Sprintf("node-%d", i), fmt.Sprintf("node-%d-preserve-", i), ds, 1, &yes, time.Time{})
		if i == 4 {
			thirty := int64(30)
			ts := metav1.NewTime(time.Unix(31, 0))
			old.DeletionGracePeriodSeconds = &thirty
			old.DeletionTimestamp = &ts
		}
		tc.podStore.Add(old)
	}
	clearExpectations(t, tc, ds)
	expectSyncDaemonSets(t, tc, ds, 1, 0, 0)
}

func TestSurgeDeletesUnreadyOldPods(t *testing.T) {
	yes, no := true, false
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateSurge(intstr.FromInt32(1))
	tc := newTestController(t, ds)
	tc.dsStore.Add(ds)
	addNodes(tc.nodeStore, 0, 5, nil)
	pod := newPod("node-1-", "node-1", simpleDaemonSetLabel, ds)
	pod.CreationTimestamp = metav1.NewTime(time.Unix(100, 0))
	tc.podStore.Add(pod)
	oldUnready := oldPodOn("node-1", "node-1-old-unready-", ds, 50, &no, time.Time{})
	tc.podStore.Add(oldUnready)
	oldReady := oldPodOn("node-1", "node-1-delete-", ds, 60, &yes, time.Time{})
	tc.podStore.Add(oldReady)
	addPods(tc.podStore, "node-2", simpleDaemonSetLabel, ds, 1)
	expectSyncDaemonSets(t, tc, ds, 3, 2, 0)
	if !sameSet(tc.podControl.DeletePodName, []string{oldReady.Name, oldUnready.Name}) {
		t.Errorf("deleted %v", tc.podControl.DeletePodName)
	}
}

func TestSurgeMinReadySeconds(t *testing.T) {
	yes := true
	cases := []struct {
		name       string
		since      int64 // seconds after the new pod went ready at t=50
		deleteBoth bool
	}{
		{"TestSurgePreservesOldReadyWithUnsatisfiedMinReady", 10, false},
		{"TestSurgeDeletesOldReadyWithUnsatisfiedMinReady", 20, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds := newDaemonSet("foo")
			ds.Spec.MinReadySeconds = 15
			ds.Spec.UpdateStrategy = newUpdateSurge(intstr.FromInt32(1))
			tc := newTestController(t, ds)
			tc.dsStore.Add(ds)
			addNodes(tc.nodeStore, 0, 5, nil)
			tc.clock.SetTime(time.Unix(50+c.since, 0))
			pod := newPod("node-1-", "node-1", simpleDaemonSetLabel, ds)
			pod.CreationTimestamp = metav1.NewTime(time.Unix(100, 0))
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Unix(50, 0))}}
			tc.podStore.Add(pod)
			oldReady := oldPodOn("node-1", "node-1-old-ready-", ds, 50, &yes, time.Time{})
			tc.podStore.Add(oldReady)
			oldExcess := oldPodOn("node-1", "node-1-delete-", ds, 60, &yes, time.Time{})
			tc.podStore.Add(oldExcess)
			addPods(tc.podStore, "node-2", simpleDaemonSetLabel, ds, 1)
			want := []string{oldExcess.Name}
			if c.deleteBoth {
				want = append(want, oldReady.Name)
			}
			expectSyncDaemonSets(t, tc, ds, 3, len(want), 0)
			if !sameSet(tc.podControl.DeletePodName, want) {
				t.Errorf("deleted %v, want %v", tc.podControl.DeletePodName, want)
			}
		})
	}
}
