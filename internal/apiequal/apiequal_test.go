package apiequal

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func runningStatus() *corev1.PodStatus {
	now := metav1.NewTime(time.Unix(1_700_000_000, 0))
	var conds []corev1.PodCondition
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		conds = append(conds, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	started := true
	return &corev1.PodStatus{
		Phase: corev1.PodRunning, Conditions: conds, HostIP: "10.0.0.1", HostIPs: []corev1.HostIP{{IP: "10.0.0.1"}},
		PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}, StartTime: &now, QOSClass: corev1.PodQOSBestEffort,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "daemon", Ready: true, Started: &started, Image: "example/daemon:v1", ImageID: "sha256:abc",
			ContainerID: "docker://123", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
}

// TestEqualAgreesWithSemantic runs both comparisons over pairs that are
// equal, differ in one field, or are written differently but mean the same.
func TestEqualAgreesWithSemantic(t *testing.T) {
	edits := map[string]struct {
		edit func(*corev1.PodStatus)
		want bool
	}{
		"identical":                     {func(*corev1.PodStatus) {}, true},
		"phase":                         {func(s *corev1.PodStatus) { s.Phase = corev1.PodPending }, false},
		"a condition's status":          {func(s *corev1.PodStatus) { s.Conditions[2].Status = corev1.ConditionFalse }, false},
		"conditions reordered":          {func(s *corev1.PodStatus) { s.Conditions[0], s.Conditions[1] = s.Conditions[1], s.Conditions[0] }, false},
		"a time a second later":         {func(s *corev1.PodStatus) { s.StartTime = &metav1.Time{Time: s.StartTime.Add(time.Second)} }, false},
		"started nil instead of true":   {func(s *corev1.PodStatus) { s.ContainerStatuses[0].Started = nil }, false},
		"started false instead of true": {func(s *corev1.PodStatus) { f := false; s.ContainerStatuses[0].Started = &f }, false},
		"running → terminated": {func(s *corev1.PodStatus) {
			s.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}
		}, false},
		"empty slice for nil": {func(s *corev1.PodStatus) { s.InitContainerStatuses = []corev1.ContainerStatus{} }, true},
		"nil slice for empty": {func(s *corev1.PodStatus) { s.PodIPs = nil; s.HostIPs = nil }, false},
		"a message":           {func(s *corev1.PodStatus) { s.Message = "x" }, false},
		"a resize quantity 1Gi": {func(s *corev1.PodStatus) {
			s.ContainerStatuses[0].AllocatedResources = corev1.ResourceList{"memory": resource.MustParse("1Gi")}
		}, false},
	}
	for name, tc := range edits {
		t.Run(name, func(t *testing.T) {
			a, b := runningStatus(), runningStatus()
			tc.edit(b)
			if got, sem := Equal(a, b), equality.Semantic.DeepEqual(*a, *b); got != tc.want || sem != tc.want {
				t.Errorf("Equal = %v, Semantic.DeepEqual = %v, want %v", got, sem, tc.want)
			}
			if got := Equal(b, a); got != tc.want {
				t.Errorf("Equal(b, a) = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEqualFallsBackForQuantities: "1Gi" and "1073741824" bytes differ in
// their encodings and are the same quantity.
func TestEqualFallsBackForQuantities(t *testing.T) {
	a, b := runningStatus(), runningStatus()
	a.ContainerStatuses[0].AllocatedResources = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
	b.ContainerStatuses[0].AllocatedResources = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1073741824")}
	ea, _ := a.Marshal()
	eb, _ := b.Marshal()
	if string(ea) == string(eb) {
		t.Fatal("the encodings are equal: this test no longer exercises the fallback")
	}
	if !Equal(a, b) {
		t.Error(`Equal: "1Gi" and "1073741824" bytes differ`)
	}
	b.ContainerStatuses[0].AllocatedResources = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1073741825")}
	if Equal(a, b) {
		t.Error(`Equal: "1Gi" and "1073741825" bytes are equal`)
	}
}

// TestEqualTimesToTheSecond: times within one second are equal, as the API
// stores and serves them; Semantic.DeepEqual tells them apart.
func TestEqualTimesToTheSecond(t *testing.T) {
	a, b := runningStatus(), runningStatus()
	b.StartTime = &metav1.Time{Time: a.StartTime.Add(300 * time.Millisecond)}
	if !Equal(a, b) {
		t.Error("Equal: times 300 ms apart within one second differ")
	}
	if equality.Semantic.DeepEqual(*a, *b) {
		t.Error("Semantic.DeepEqual now equates them: update the package comment")
	}
}

func TestEqualNil(t *testing.T) {
	var none *corev1.PodStatus
	if !Equal(none, none) {
		t.Error("nil and nil differ")
	}
	if Equal(none, runningStatus()) || Equal(runningStatus(), none) {
		t.Error("nil equals a status")
	}
	if !Equal(&corev1.PodSpec{}, &corev1.PodSpec{}) {
		t.Error("two empty specs differ")
	}
}

func BenchmarkEqual(b *testing.B) {
	x, y := runningStatus(), runningStatus()
	b.Run("apiequal", func(b *testing.B) {
		for b.Loop() {
			if !Equal(x, y) {
				b.Fatal("differ")
			}
		}
	})
	b.Run("semantic", func(b *testing.B) {
		for b.Loop() {
			if !equality.Semantic.DeepEqual(*x, *y) {
				b.Fatal("differ")
			}
		}
	})
}
