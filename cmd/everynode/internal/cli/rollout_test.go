package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

func TestParseRollout(t *testing.T) {
	tests := []struct {
		args    string
		name    string
		ns      string
		wantErr string
	}{
		{args: "status ds/agent", name: "agent", ns: "default"},
		{args: "status daemonset agent -n kube-system", name: "agent", ns: "kube-system"},
		{args: "status daemonsets.apps/agent --timeout=5s -w=false", name: "agent", ns: "default"},
		{args: "history ds/agent --revision 2", name: "agent", ns: "default"},
		{args: "undo ds/agent --to-revision=1", name: "agent", ns: "default"},
		{args: "restart ds/agent", name: "agent", ns: "default"},
		{args: "status", wantErr: "required resource not specified"},
		{args: "status po/x", wantErr: "no status viewer has been implemented for Pod"},
		{args: "history ds/a ds/b", wantErr: "exactly one DaemonSet"},
		{args: "history ds/a --revision=-1", wantErr: "revision must be a positive integer"},
		{args: "undo ds/a --to-revision=-2", wantErr: "revision must be a positive integer"},
		{args: "status widgets/x", wantErr: `resource type "widgets"`},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			args := strings.Fields(tt.args)
			var name, ns string
			var err error
			switch args[0] {
			case "status":
				c := &RolloutStatusCommand{main: NewMain()}
				err = parse(c, args[1:])
				name, ns = c.name, c.ns()
			case "history":
				c := &RolloutHistoryCommand{main: NewMain()}
				err = parse(c, args[1:])
				name, ns = c.name, c.ns()
			case "undo":
				c := &RolloutUndoCommand{main: NewMain()}
				err = parse(c, args[1:])
				name, ns = c.name, c.ns()
			case "restart":
				c := &RolloutRestartCommand{main: NewMain()}
				err = parse(c, args[1:])
				name, ns = c.name, c.ns()
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if name != tt.name || ns != tt.ns {
				t.Fatalf("parsed name=%q ns=%q", name, ns)
			}
		})
	}
}

func TestRolloutUnknownSubcommand(t *testing.T) {
	err := NewMain().Run(context.Background(), []string{"rollout", "frobnicate", "ds/a"}, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `unknown rollout subcommand "frobnicate"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestDaemonSetStatus(t *testing.T) {
	ds := func(gen, observed int64, desired, updated, available int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "agent", Generation: gen},
			Spec:       appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: observed, DesiredNumberScheduled: desired,
				UpdatedNumberScheduled: updated, NumberAvailable: available},
		}
	}
	tests := []struct {
		name string
		ds   *appsv1.DaemonSet
		line string
		done bool
	}{
		{"not observed", ds(2, 1, 3, 3, 3), "Waiting for daemon set spec update to be observed...\n", false},
		{"updating", ds(2, 2, 3, 1, 3), "Waiting for daemon set \"agent\" rollout to finish: 1 out of 3 new pods have been updated...\n", false},
		{"becoming available", ds(2, 2, 3, 3, 2), "Waiting for daemon set \"agent\" rollout to finish: 2 of 3 updated pods are available...\n", false},
		{"done", ds(2, 2, 3, 3, 3), "daemon set \"agent\" successfully rolled out\n", true},
		{"no nodes", ds(1, 1, 0, 0, 0), "daemon set \"agent\" successfully rolled out\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, done, err := daemonSetStatus(tt.ds)
			if err != nil || line != tt.line || done != tt.done {
				t.Fatalf("got %q %v %v, want %q %v", line, done, err, tt.line, tt.done)
			}
		})
	}
	onDelete := ds(1, 1, 1, 1, 1)
	onDelete.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
	if _, _, err := daemonSetStatus(onDelete); err == nil || err.Error() != "rollout status is only available for RollingUpdate strategy type" {
		t.Fatalf("OnDelete: %v", err)
	}
}

func TestNodeProgressLine(t *testing.T) {
	pod := func(hash string, ready bool, mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "agent-x1", Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: hash}},
			Spec:       corev1.PodSpec{NodeName: "node-1"},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		current string
		deleted bool
		want    string
	}{
		{"new ready", pod("abc", true, nil), "abc", false, "  node node-1: pod agent-x1 revision abc (new) ready"},
		{"old ready", pod("old", true, nil), "abc", false, "  node node-1: pod agent-x1 revision old (old) ready"},
		{"unknown current", pod("abc", false, nil), "", false, "  node node-1: pod agent-x1 revision abc not ready"},
		{"pulling", pod("abc", false, func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}}
		}), "abc", false, "  node node-1: pod agent-x1 revision abc (new) not ready (ImagePullBackOff)"},
		{"terminating", pod("old", true, func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }), "abc", false, "  node node-1: pod agent-x1 revision old (old) terminating"},
		{"deleted", pod("old", true, nil), "abc", true, "  node node-1: pod agent-x1 revision old (old) deleted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nodeProgressLine(tt.pod, tt.current, tt.deleted); got != tt.want {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
	tr := newNodeTracker()
	tr.setCurrent("abc")
	p := pod("abc", true, nil)
	if got := tr.update(p, false); len(got) != 1 {
		t.Fatalf("first update: %q", got)
	}
	if got := tr.update(p, false); len(got) != 0 {
		t.Fatalf("unchanged pod printed again: %q", got)
	}
}

// historyFixture is a DaemonSet with two revisions (busybox:1 then :2) in
// a fake API, plus a revision another owner controls.
func historyFixture(t *testing.T) (*fake.Client, *appsv1.DaemonSet) {
	t.Helper()
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "ds-uid", Generation: 2},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "busybox:2"}}},
			},
		},
	}
	// The revisions hold the template as the API stored it (defaulted), as
	// the DaemonSet controller writes them.
	c := fake.New(ds)
	stored, err := c.Get(context.Background(), resources.DaemonSets, "default", "agent")
	if err != nil {
		t.Fatal(err)
	}
	ds = stored.(*appsv1.DaemonSet)
	rev := func(n int64, image, owner, cause string) *appsv1.ControllerRevision {
		d := ds.DeepCopy()
		d.Spec.Template.Spec.Containers[0].Image = image
		data, err := daemonSetPatch(d)
		if err != nil {
			t.Fatal(err)
		}
		cr := &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: "agent-" + strings.ReplaceAll(image, ":", "-") + owner, Namespace: "default",
				Labels:          map[string]string{"app": "agent", appsv1.DefaultDaemonSetUniqueLabelKey: image},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds-uid", Controller: ptr.To(true)}}},
			Data:     runtime.RawExtension{Raw: data},
			Revision: n,
		}
		if owner != "" {
			cr.OwnerReferences[0].UID = "other"
		}
		if cause != "" {
			cr.Annotations = map[string]string{changeCauseAnnotation: cause}
		}
		resources.ControllerRevisions.SetTypeMeta(cr)
		return cr
	}
	for _, cr := range []*appsv1.ControllerRevision{rev(2, "busybox:2", "", ""), rev(1, "busybox:1", "", "first"), rev(7, "busybox:7", "x", "")} {
		if err := c.Seed(cr); err != nil {
			t.Fatal(err)
		}
	}
	return c, ds
}

func TestRolloutHistory(t *testing.T) {
	c, _ := historyFixture(t)
	var out bytes.Buffer
	cmd := &RolloutHistoryCommand{main: NewMain(), name: "agent"}
	if err := cmd.run(context.Background(), c, &out); err != nil {
		t.Fatal(err)
	}
	want := "daemonset.apps/agent \nREVISION  CHANGE-CAUSE\n1         first\n2         <none>\n\n"
	if out.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", out.String(), want)
	}

	out.Reset()
	cmd.revision = 1
	if err := cmd.run(context.Background(), c, &out); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"daemonset.apps/agent with revision #1\n", "Pod Template:\n", "busybox:1\n"} {
		if !strings.Contains(out.String(), s) {
			t.Fatalf("--revision 1 output lacks %q:\n%s", s, out.String())
		}
	}
	cmd.revision = 7 // controlled by another owner: not this DaemonSet's history
	if err := cmd.run(context.Background(), c, &out); err == nil || !strings.Contains(err.Error(), "unable to find the specified revision") {
		t.Fatalf("revision 7: %v", err)
	}
}

func TestRolloutUndo(t *testing.T) {
	tests := []struct {
		name      string
		to        int64
		wantOut   string
		wantErr   string
		wantImage string
	}{
		{name: "previous", to: 0, wantOut: "daemonset.apps/agent rolled back\n", wantImage: "busybox:1"},
		{name: "explicit", to: 1, wantOut: "daemonset.apps/agent rolled back\n", wantImage: "busybox:1"},
		{name: "current", to: 2, wantOut: "daemonset.apps/agent skipped rollback (current template already matches revision 2)\n", wantImage: "busybox:2"},
		{name: "missing", to: 5, wantErr: "unable to find specified revision 5 in history", wantImage: "busybox:2"},
		{name: "other owner", to: 7, wantErr: "unable to find specified revision 7 in history", wantImage: "busybox:2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := historyFixture(t)
			var out bytes.Buffer
			err := (&RolloutUndoCommand{main: NewMain(), name: "agent", toRevision: tt.to}).run(context.Background(), c, &out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
			} else if err != nil || out.String() != tt.wantOut {
				t.Fatalf("got %q, %v; want %q", out.String(), err, tt.wantOut)
			}
			obj, err := c.Get(context.Background(), resources.DaemonSets, "default", "agent")
			if err != nil {
				t.Fatal(err)
			}
			if img := obj.(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0].Image; img != tt.wantImage {
				t.Fatalf("image after undo %q, want %q", img, tt.wantImage)
			}
		})
	}
}

func TestRolloutUndoNoHistory(t *testing.T) {
	c, _ := historyFixture(t)
	if _, err := c.Delete(context.Background(), resources.ControllerRevisions, "default", "agent-busybox-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := (&RolloutUndoCommand{main: NewMain(), name: "agent"}).run(context.Background(), c, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no last revision to roll back to") {
		t.Fatalf("err = %v", err)
	}
}

func TestRestartPatch(t *testing.T) {
	now := time.Date(2026, 11, 22, 3, 39, 9, 500, time.UTC)
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}
	got, err := restartPatch(ds, now)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-11-22T03:39:09Z"}}}}}`
	if string(got) != want {
		t.Fatalf("patch %s, want %s", got, want)
	}
	ds.Spec.Template.Annotations = map[string]string{restartedAtAnnotation: "2026-11-22T03:39:09Z"}
	if _, err := restartPatch(ds, now); err == nil || !strings.Contains(err.Error(), "within the past second") {
		t.Fatalf("same second: %v", err)
	}
}

func TestRolloutRestartRun(t *testing.T) {
	c, _ := historyFixture(t)
	m := &Main{Now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }}
	var out bytes.Buffer
	if err := (&RolloutRestartCommand{main: m, name: "agent"}).run(context.Background(), c, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "daemonset.apps/agent restarted\n" {
		t.Fatalf("output %q", out.String())
	}
	obj, _ := c.Get(context.Background(), resources.DaemonSets, "default", "agent")
	if got := obj.(*appsv1.DaemonSet).Spec.Template.Annotations[restartedAtAnnotation]; got != "2026-01-02T03:04:05Z" {
		t.Fatalf("restartedAt = %q", got)
	}
}

func TestDaemonSetPatchShape(t *testing.T) {
	_, ds := historyFixture(t)
	data, err := daemonSetPatch(ds)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]map[string]map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if v["spec"]["template"]["$patch"] != "replace" {
		t.Fatalf("patch %s lacks $patch: replace", data)
	}
}

func TestRolloutStatusWatches(t *testing.T) {
	c, ds := historyFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 2, UpdatedNumberScheduled: 1, NumberAvailable: 1}
	if _, err := c.UpdateStatus(ctx, ds, clientWriteOptions()); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-a", Namespace: "default", Labels: map[string]string{"app": "agent", appsv1.DefaultDaemonSetUniqueLabelKey: "busybox:2"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds-uid", Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	resources.Pods.SetTypeMeta(pod)
	if err := c.Seed(pod); err != nil {
		t.Fatal(err)
	}
	var out testkit.Buffer
	done := make(chan error, 1)
	go func() {
		done <- (&RolloutStatusCommand{main: NewMain(), name: "agent", watch: true, progress: true}).run(ctx, c, &out)
	}()
	for _, want := range []string{"1 out of 2 new pods have been updated", "  node node-1: pod agent-a revision busybox:2 (new) ready"} {
		testkit.Eventually(t, 5*time.Second, func() error {
			if !out.Contains(want) {
				return fmt.Errorf("output lacks %q:\n%s", want, out.String())
			}
			return nil
		})
	}
	obj, _ := c.Get(ctx, resources.DaemonSets, "default", "agent")
	d := obj.(*appsv1.DaemonSet)
	d.Status.UpdatedNumberScheduled, d.Status.NumberAvailable = 2, 2
	if _, err := c.UpdateStatus(ctx, d, clientWriteOptions()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := "Waiting for daemon set \"agent\" rollout to finish: 1 out of 2 new pods have been updated...\n" +
		"  node node-1: pod agent-a revision busybox:2 (new) ready\n" +
		"daemon set \"agent\" successfully rolled out\n"
	if out.String() != want {
		t.Fatalf("output\n%s\nwant\n%s", out.String(), want)
	}

	// -w=false prints once and succeeds although not done; --timeout fails.
	obj, _ = c.Get(ctx, resources.DaemonSets, "default", "agent")
	d = obj.(*appsv1.DaemonSet)
	d.Status.UpdatedNumberScheduled = 1
	if _, err := c.UpdateStatus(ctx, d, clientWriteOptions()); err != nil {
		t.Fatal(err)
	}
	var once bytes.Buffer
	if err := (&RolloutStatusCommand{main: NewMain(), name: "agent"}).run(ctx, c, &once); err != nil || !strings.Contains(once.String(), "1 out of 2") {
		t.Fatalf("-w=false: %q %v", once.String(), err)
	}
	err := (&RolloutStatusCommand{main: NewMain(), name: "agent", watch: true, timeout: 100 * time.Millisecond}).run(ctx, c, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "timed out waiting for the condition") {
		t.Fatalf("timeout: %v", err)
	}
}

func clientWriteOptions() client.WriteOptions { return client.WriteOptions{} }

func TestKubectlToleration(t *testing.T) {
	secs := int64(30)
	tests := []struct {
		tol  corev1.Toleration
		want string
	}{
		{corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, Effect: "NoSchedule"}, "k:NoSchedule op=Exists"},
		{corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: "NoSchedule"}, ":NoSchedule op=Exists"},
		{corev1.Toleration{Operator: corev1.TolerationOpExists}, "op=Exists"},
		{corev1.Toleration{Key: "k", Value: "v", Effect: "NoExecute", TolerationSeconds: &secs}, "k=v:NoExecute for 30s"},
		{corev1.Toleration{Key: "node-role.kubernetes.io/master", Effect: "NoSchedule"}, "node-role.kubernetes.io/master:NoSchedule"},
	}
	for _, tt := range tests {
		if got := kubectlToleration(tt.tol); got != tt.want {
			t.Errorf("%+v: got %q, want %q", tt.tol, got, tt.want)
		}
	}
}

func TestPodTemplateText(t *testing.T) {
	tpl := &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"b": "2", "a": "1"}, Annotations: map[string]string{restartedAtAnnotation: "now"}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"zone": "edge"},
			Containers: []corev1.Container{{Name: "c", Image: "x:1", Command: []string{"run"},
				Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: "TCP"}, {ContainerPort: 53, HostPort: 53, Protocol: "UDP"}},
				Env:   []corev1.EnvVar{{Name: "A", Value: "1"}}}},
			Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	want := "Pod Template:\n  Labels:\ta=1\n\tb=2\n  Annotations:\tkubectl.kubernetes.io/restartedAt: now\n  Containers:\n   c:\n" +
		"    Image:\tx:1\n    Ports:\t80/TCP, 53/UDP\n    Host Ports:\t0/TCP, 53/UDP\n    Command:\n      run\n" +
		"    Environment:\n      A:\t1\n    Mounts:\t<none>\n  Volumes:\n   tmp:\n" +
		"    Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)\n    Medium:\t\n    SizeLimit:\t<unset>\n" +
		"  Node-Selectors:\tzone=edge\n  Tolerations:\t<none>\n"
	if got := podTemplateText(tpl); got != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
}
