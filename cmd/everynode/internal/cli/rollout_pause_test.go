package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/rollout"
)

func rolloutDS(ann map[string]string) *appsv1.DaemonSet {
	one := intstr.FromInt32(1)
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", Annotations: ann},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &one}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "busybox:2"}}},
			},
		},
	}
	resources.DaemonSets.SetTypeMeta(ds)
	return ds
}

func TestParseRolloutAnnotateVerbs(t *testing.T) {
	for _, verb := range []string{"pause", "resume", "promote"} {
		if _, err := parseTree([]string{"rollout", verb, "ds/agent", "-n", "kube-system"}); err != nil {
			t.Errorf("rollout %s: %v", verb, err)
		}
		if _, err := parseTree([]string{"rollout", verb, "po/x"}); err == nil || !strings.Contains(err.Error(), "no "+verb+" viewer has been implemented for Pod") {
			t.Errorf("rollout %s po/x: %v", verb, err)
		}
	}
}

// TestRolloutPauseResumePromote: each verb patches the annotations and
// prints kubectl's line; an action that would change nothing is an error
// with a fix, as kubectl's "already paused".
func TestRolloutPauseResumePromote(t *testing.T) {
	c := fake.New(rolloutDS(map[string]string{rollout.Partition: "2", rollout.CanarySelector: "canary=true", "keep": "me"}))
	run := func(action rolloutAction) (string, error) {
		var out bytes.Buffer
		err := (&RolloutAnnotateCommand{main: NewMain(), action: action, name: "agent"}).run(context.Background(), c, &out)
		return out.String(), err
	}
	annotations := func() map[string]string {
		o, err := c.Get(context.Background(), resources.DaemonSets, "default", "agent")
		if err != nil {
			t.Fatal(err)
		}
		return o.(*appsv1.DaemonSet).Annotations
	}
	steps := []struct {
		action  rolloutAction
		out     string
		err     string
		paused  bool
		partial bool
	}{
		{actionResume, "", `daemonsets.apps "agent" is not paused`, false, true},
		{actionPause, "daemonset.apps/agent paused\n", "", true, true},
		{actionPause, "", `daemonsets.apps "agent" is already paused; resume it with "everynode rollout resume ds/agent"`, true, true},
		{actionResume, "daemonset.apps/agent resumed\n", "", false, true},
		{actionPromote, "daemonset.apps/agent promoted\n", "", false, false},
		{actionPromote, "", `daemonsets.apps "agent" has no canary to promote: neither rollout.everynode.io/partition nor rollout.everynode.io/canary-selector is set`, false, false},
	}
	for _, s := range steps {
		out, err := run(s.action)
		switch {
		case s.err == "" && err != nil:
			t.Fatalf("%s: %v", s.action, err)
		case s.err != "" && (err == nil || !strings.Contains(FormatError(err), s.err)):
			t.Fatalf("%s: error %v, want %q", s.action, err, s.err)
		}
		if out != s.out {
			t.Fatalf("%s: printed %q, want %q", s.action, out, s.out)
		}
		ann := annotations()
		_, paused := ann[rollout.Paused]
		_, partial := ann[rollout.Partition]
		_, sel := ann[rollout.CanarySelector]
		if paused != s.paused || partial != s.partial || sel != s.partial || ann["keep"] != "me" {
			t.Fatalf("after %s: annotations %v", s.action, ann)
		}
	}
}

func TestRolloutPauseOnDelete(t *testing.T) {
	ds := rolloutDS(nil)
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	c := fake.New(ds)
	err := (&RolloutAnnotateCommand{main: NewMain(), action: actionPause, name: "agent"}).run(context.Background(), c, &bytes.Buffer{})
	if err == nil {
		t.Fatal("paused an OnDelete DaemonSet")
	}
	if got := FormatError(err); !strings.Contains(got, "uses the OnDelete update strategy; rollout pause applies to RollingUpdate only") {
		t.Fatalf("error %q", got)
	}
}

// TestRolloutStatusSettings: what "rollout status" says, and whether it is
// done, with everynode's rollout settings (docs/rollouts.md).
func TestRolloutStatusSettings(t *testing.T) {
	cond := func(reason, msg string) []appsv1.DaemonSetCondition {
		return []appsv1.DaemonSetCondition{{Type: rollout.ConditionProgressing, Status: corev1.ConditionUnknown, Reason: reason, Message: msg}}
	}
	tests := []struct {
		name   string
		ann    map[string]string
		status appsv1.DaemonSetStatus
		want   string
		done   bool
	}{
		{"plain, waiting", nil, appsv1.DaemonSetStatus{DesiredNumberScheduled: 5, UpdatedNumberScheduled: 1},
			`Waiting for daemon set "agent" rollout to finish: 1 out of 5 new pods have been updated...`, false},
		{"paused", map[string]string{rollout.Paused: "true"}, appsv1.DaemonSetStatus{DesiredNumberScheduled: 5, UpdatedNumberScheduled: 1, Conditions: cond(rollout.ReasonPaused, "DaemonSet is paused")},
			`Waiting for daemon set "agent" rollout to finish: paused with 1 out of 5 new pods updated; resume it with "everynode rollout resume ds/agent"`, false},
		{"paused with nothing to do", map[string]string{rollout.Paused: "true"}, appsv1.DaemonSetStatus{DesiredNumberScheduled: 5, UpdatedNumberScheduled: 5, NumberAvailable: 5},
			`daemon set "agent" successfully rolled out`, true},
		{"canary waiting for promote", map[string]string{rollout.Partition: "3"},
			appsv1.DaemonSetStatus{DesiredNumberScheduled: 5, UpdatedNumberScheduled: 3, NumberAvailable: 5, Conditions: cond(rollout.ReasonWaitingForPromote, rollout.CanaryMessage(3, 3))},
			"canary: 3/3 updated and ready; waiting for promote", true},
		{"canary updating", map[string]string{rollout.CanarySelector: "canary=true"},
			appsv1.DaemonSetStatus{DesiredNumberScheduled: 5, UpdatedNumberScheduled: 2, NumberAvailable: 4, Conditions: cond(rollout.ReasonCanaryUpdating, rollout.CanaryMessage(1, 3))},
			`Waiting for daemon set "agent" canary to finish: canary: 1/3 updated and ready`, false},
		{"promoted, stale condition", nil,
			appsv1.DaemonSetStatus{DesiredNumberScheduled: 5, UpdatedNumberScheduled: 3, NumberAvailable: 5, Conditions: cond(rollout.ReasonWaitingForPromote, rollout.CanaryMessage(3, 3))},
			`Waiting for daemon set "agent" rollout to finish: 3 out of 5 new pods have been updated...`, false},
		{"complete on the reachable nodes", nil,
			appsv1.DaemonSetStatus{DesiredNumberScheduled: 17, UpdatedNumberScheduled: 17, NumberAvailable: 17, Conditions: cond(rollout.ReasonUnreachablePending,
				"rolled out to every reachable node; 1 unreachable node pending, updated when back: node-3 (down since 2026-01-01T00:00:00Z)")},
			`daemon set "agent" successfully rolled out to every reachable node; 1 unreachable node pending, updated when back: node-3 (down since 2026-01-01T00:00:00Z)`, true},
		{"pre-pulling", map[string]string{"image.everynode.io/prepull": "true"},
			appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, UpdatedNumberScheduled: 0, NumberAvailable: 3, Conditions: cond(rollout.ReasonPrePulling,
				"pre-pulling the new revision's images: 2 of 3 nodes have them")},
			`Waiting for daemon set "agent" rollout: pre-pulling the new revision's images: 2 of 3 nodes have them`, false},
		{"invalid annotation", map[string]string{rollout.Paused: "maybe"}, appsv1.DaemonSetStatus{DesiredNumberScheduled: 5, UpdatedNumberScheduled: 1},
			`Waiting for daemon set "agent" rollout: held by an invalid rollout annotation: metadata.annotations[rollout.everynode.io/paused]: Unsupported value: "maybe"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := rolloutDS(tt.ann)
			ds.Status = tt.status
			line, done, err := rolloutStatus(ds)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(line, tt.want) || done != tt.done {
				t.Fatalf("%q done=%v\nwant %q done=%v", line, done, tt.want, tt.done)
			}
		})
	}
}

// TestRolloutStatusFailed: a Progressing condition that says the rollout
// failed ends `rollout status` with an error naming the reason, the
// controller's message and the fix — even once the rolled-back revision
// is back everywhere — but not before the controller observed the
// generation (a new template starts a new rollout).
func TestRolloutStatusFailed(t *testing.T) {
	cond := func(reason, msg string) []appsv1.DaemonSetCondition {
		return []appsv1.DaemonSetCondition{{Type: rollout.ConditionProgressing, Status: corev1.ConditionFalse, Reason: reason, Message: msg}}
	}
	tests := []struct {
		name   string
		status appsv1.DaemonSetStatus
		want   string
	}{
		{"deadline", appsv1.DaemonSetStatus{DesiredNumberScheduled: 5, UpdatedNumberScheduled: 1, NumberAvailable: 4,
			Conditions: cond(rollout.ReasonProgressDeadlineExceeded, `rolling out ControllerRevision "agent-abc": no updated pod became available for 60s`)},
			`daemon set "agent" rollout failed (ProgressDeadlineExceeded): rolling out ControllerRevision "agent-abc": no updated pod became available for 60s; roll it back with "everynode rollout undo ds/agent", or fix the template and apply it again`},
		{"rolled back, restored", appsv1.DaemonSetStatus{DesiredNumberScheduled: 5, UpdatedNumberScheduled: 5, NumberAvailable: 5,
			Conditions: cond(rollout.ReasonRolledBack, "rolled back to revision 3 (agent-abc): revision 4 (agent-def) failed: x")},
			`daemon set "agent" rollout failed and was rolled back automatically (RolledBack): rolled back to revision 3 (agent-abc): revision 4 (agent-def) failed: x; fix the template and apply it again: the failed revision is not rolled out again until its template changes`},
		{"bad revision", appsv1.DaemonSetStatus{DesiredNumberScheduled: 5, UpdatedNumberScheduled: 0, NumberAvailable: 5,
			Conditions: cond(rollout.ReasonBadRevision, "m")},
			`daemon set "agent" rollout held (BadRevision): m; change the template, or retry it with "everynode annotate ds/agent rollout.everynode.io/bad-revision-"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := rolloutDS(map[string]string{rollout.AutoRollback: "true"})
			ds.Status = tt.status
			_, done, err := rolloutStatus(ds)
			if err == nil || !done || err.Error() != tt.want {
				t.Fatalf("err %v done=%v\nwant %q", err, done, tt.want)
			}
			ds.Generation = ds.Status.ObservedGeneration + 1
			if _, done, err := rolloutStatus(ds); err != nil || done {
				t.Fatalf("unobserved generation: err %v done=%v, want a wait", err, done)
			}
		})
	}
}
