package daemonset

import (
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Ports of Kubernetes' surge tests of manage (docs/controller-rules.md §9.1,
// §2.5).

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
