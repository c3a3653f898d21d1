package printers

import (
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/everynode/everynode/resources"
)

var now = time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

func running(name string, ready bool, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Ready: ready, RestartCount: restarts,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func TestPodCells(t *testing.T) {
	sidecar := corev1.Container{Name: "side", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}
	tests := []struct {
		name                       string
		pod                        corev1.Pod
		ready, status, restartText string
	}{
		{name: "pending", pod: corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending}}, ready: "0/1", status: "Pending", restartText: "0"},
		{name: "running with restarts", pod: corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{func() corev1.ContainerStatus {
				c := running("a", true, 3)
				c.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{FinishedAt: ago(5 * time.Minute)}
				return c
			}()}}}, ready: "1/1", status: "Running", restartText: "3 (5m ago)"},
		{name: "crash loop", pod: corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}, {Name: "b"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				{Name: "a", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
				running("b", true, 0)}}}, ready: "1/2", status: "CrashLoopBackOff", restartText: "0"},
		{name: "exit code", pod: corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}},
			Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{
				{Name: "a", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2}}}}}},
			ready: "0/1", status: "ExitCode:2", restartText: "0"},
		{name: "init waiting", pod: corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i"}}, Containers: []corev1.Container{{Name: "a"}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "i", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}}}},
			ready: "0/1", status: "Init:ImagePullBackOff", restartText: "0"},
		{name: "init running", pod: corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i"}, {Name: "j"}}, Containers: []corev1.Container{{Name: "a"}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "i", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
				running("j", false, 0)}}},
			ready: "0/1", status: "Init:1/2", restartText: "0"},
		{name: "started sidecar counts", pod: corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{sidecar}, Containers: []corev1.Container{{Name: "a"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				InitContainerStatuses: []corev1.ContainerStatus{func() corev1.ContainerStatus {
					c := running("side", true, 1)
					c.Started = ptr.To(true)
					return c
				}()},
				ContainerStatuses: []corev1.ContainerStatus{running("a", true, 0)}}},
			ready: "2/2", status: "Running", restartText: "1"},
		{name: "completed but running", pod: corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}, {Name: "b"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				running("a", true, 0),
				{Name: "b", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}}}}},
			ready: "1/2", status: "NotReady", restartText: "0"},
		{name: "terminating", pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: ptr.To(ago(time.Second))},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
			ready: "0/1", status: "Terminating", restartText: "0"},
		{name: "node lost", pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: ptr.To(ago(time.Second))},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning, Reason: "NodeLost"}},
			ready: "0/1", status: "Unknown", restartText: "0"},
		{name: "scheduling gated", pod: corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Reason: corev1.PodReasonSchedulingGated}}}},
			ready: "0/1", status: "SchedulingGated", restartText: "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cells := Cells(&tt.pod, now)
			if len(cells) != len(Columns(schema.GroupKind{Kind: "Pod"})) {
				t.Fatalf("%d cells", len(cells))
			}
			if cells[1] != tt.ready || cells[2] != tt.status || cells[3] != tt.restartText {
				t.Fatalf("ready %v status %v restarts %v, want %s %s %s", cells[1], cells[2], cells[3], tt.ready, tt.status, tt.restartText)
			}
		})
	}
}

func TestCellsMatchColumns(t *testing.T) {
	objs := []struct {
		gk  schema.GroupKind
		obj runtime.Object
	}{
		{schema.GroupKind{Group: "apps", Kind: "DaemonSet"}, &appsv1.DaemonSet{}},
		{schema.GroupKind{Kind: "Node"}, &corev1.Node{}},
		{schema.GroupKind{Kind: "Namespace"}, &corev1.Namespace{}},
		{schema.GroupKind{Group: "apps", Kind: "ControllerRevision"}, &appsv1.ControllerRevision{}},
		{schema.GroupKind{Kind: "Event"}, &corev1.Event{}},
		{schema.GroupKind{Kind: "ConfigMap"}, &corev1.ConfigMap{}},
		{schema.GroupKind{Kind: "Secret"}, &corev1.Secret{}},
		{schema.GroupKind{Kind: "ServiceAccount"}, &corev1.ServiceAccount{}},
	}
	for _, o := range objs {
		cells := Cells(o.obj, now)
		if got, want := len(cells), len(Columns(o.gk)); got != want {
			t.Errorf("%s: %d cells for %d columns", o.gk, got, want)
		}
	}
	ds := &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 2}}
	if c := Cells(ds, now); c[1] != int64(2) || c[6] != "<none>" || c[7] != "<unknown>" {
		t.Errorf("daemonset cells %v", c)
	}
}

func TestNodeStatusCell(t *testing.T) {
	cond := func(s corev1.ConditionStatus) []corev1.NodeCondition {
		return []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: s}}
	}
	for _, tc := range []struct {
		name          string
		conditions    []corev1.NodeCondition
		unschedulable bool
		want          string
	}{
		{"ready", cond(corev1.ConditionTrue), false, "Ready"},
		{"not ready", cond(corev1.ConditionFalse), false, "NotReady"},
		{"unknown prints NotReady as upstream", cond(corev1.ConditionUnknown), false, "NotReady"},
		{"no Ready condition", nil, false, "Unknown"},
		{"cordoned", cond(corev1.ConditionTrue), true, "Ready,SchedulingDisabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: tc.unschedulable}, Status: corev1.NodeStatus{Conditions: tc.conditions}}
			if got := nodeCells(n, now)[1]; got != tc.want {
				t.Errorf("status cell = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestConfigKindsAsKubeAPIServer: the columns and cells of ConfigMaps,
// Secrets and ServiceAccounts are upstream's (NAME DATA AGE, NAME TYPE DATA
// AGE, NAME SECRETS AGE); a ConfigMap's DATA counts data and binaryData.
func TestConfigKindsAsKubeAPIServer(t *testing.T) {
	names := func(gk schema.GroupKind) []string {
		var out []string
		for _, c := range Columns(gk) {
			out = append(out, c.Name)
		}
		return out
	}
	created := ago(90 * time.Second)
	for _, tc := range []struct {
		kind    string
		obj     runtime.Object
		columns []string
		cells   []any
	}{
		{"ConfigMap", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", CreationTimestamp: created},
			Data: map[string]string{"a": "1", "b": "2"}, BinaryData: map[string][]byte{"c": {0}}},
			[]string{"Name", "Data", "Age"}, []any{"cm", int64(3), "90s"}},
		{"Secret", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", CreationTimestamp: created},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": nil, "tls.key": nil}},
			[]string{"Name", "Type", "Data", "Age"}, []any{"s", "kubernetes.io/tls", int64(2), "90s"}},
		{"ServiceAccount", &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa", CreationTimestamp: created},
			Secrets: []corev1.ObjectReference{{Name: "t"}}},
			[]string{"Name", "Secrets", "Age"}, []any{"sa", int64(1), "90s"}},
	} {
		gk := schema.GroupKind{Kind: tc.kind}
		if got := names(gk); !slices.Equal(got, tc.columns) {
			t.Errorf("%s columns %v, want %v", gk.Kind, got, tc.columns)
		}
		if got := Cells(tc.obj, now); !slices.Equal(got, tc.cells) {
			t.Errorf("%s cells %v, want %v", gk.Kind, got, tc.cells)
		}
	}
}

// TestEveryKindHasItsColumns: for every served kind, a row has one cell per
// column, and the kinds with upstream columns get more than Name and Age.
func TestEveryKindHasItsColumns(t *testing.T) {
	for _, r := range resources.All() {
		obj := r.New()
		obj.SetName("x")
		cols := Columns(schema.GroupKind{Group: r.Group, Kind: r.Kind})
		if got := len(Cells(obj, now)); got != len(cols) {
			t.Errorf("%s: %d cells for %d columns", r.Kind, got, len(cols))
		}
		// A CustomResourceDefinition's, a Role's and a ClusterRole's upstream
		// columns are Name and Created At.
		if len(cols) <= 2 && r != resources.CustomResourceDefinitions && r != resources.Roles && r != resources.ClusterRoles {
			t.Errorf("%s: only columns %v", r.Kind, cols)
		}
	}
}
