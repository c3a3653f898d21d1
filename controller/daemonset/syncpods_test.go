package daemonset

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// countingPodLister counts the controller's lists of a namespace's pods.
type countingPodLister struct {
	corelisters.PodLister
	lists *int
}

func (l countingPodLister) Pods(namespace string) corelisters.PodNamespaceLister {
	return countingPodNamespaceLister{l.PodLister.Pods(namespace), l.lists}
}

type countingPodNamespaceLister struct {
	corelisters.PodNamespaceLister
	lists *int
}

func (l countingPodNamespaceLister) List(sel labels.Selector) ([]*corev1.Pod, error) {
	*l.lists++
	return l.PodNamespaceLister.List(sel)
}

// TestSyncReadsPodsOnceUnlessItWrites: a sync's steps (manage, the rolling
// update, status) share one read of the DaemonSet's pods until a step
// creates or deletes pods; the steps after it read again.
func TestSyncReadsPodsOnceUnlessItWrites(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = *newRollingUpdateStrategy()
	tc := newTestController(t, ds)
	lists := 0
	tc.podLister = countingPodLister{tc.podLister, &lists}
	addNodes(tc.nodeStore, 0, 5, nil)
	tc.dsStore.Add(ds)

	// Creates: manage reads; status reads again after them (the rolling
	// update waits until the creates are observed).
	expectSyncDaemonSets(t, tc, ds, 5, 0, 0)
	if lists != 2 {
		t.Errorf("a sync that created pods listed them %d times, want 2 (manage, then status after the creates)", lists)
	}

	// Nothing to create or delete: one read for all three steps, and the
	// status counts what it read.
	markPodsReady(tc)
	clearExpectations(t, tc, ds)
	lists = 0
	expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
	if lists != 1 {
		t.Errorf("a sync that wrote nothing listed the pods %d times, want 1", lists)
	}
	if got := lastStatusUpdate(t, tc, ds); got == nil || got.Status.NumberReady != 5 || got.Status.DesiredNumberScheduled != 5 {
		t.Errorf("status after the sync: %+v", got)
	}
}
