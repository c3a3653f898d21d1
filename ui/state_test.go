package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/everynode/everynode/controller/daemonset"
)

// controllerToCell is the cell each of daemonset.Progress's states is
// drawn as; nodes Progress leaves out (not targeted) are "ineligible".
var controllerToCell = map[daemonset.NodeState]string{
	daemonset.StateUpdated: "ready", daemonset.StateUpdating: "updating", daemonset.StateFailing: "failing",
	daemonset.StateUnreachable: "unreachable", daemonset.StatePending: "pending", daemonset.StateRemoving: "removing",
	daemonset.StateWaiting: "old", daemonset.StateHeld: "old",
}

// TestCellStatesMatchController: the page's cell states (state.js, run in
// headless Chromium) agree with the controller's per-node progress
// (daemonset.Progress, what `everynode rollout status --nodes` prints) on a
// fleet with one node in each situation.
func TestCellStatesMatchController(t *testing.T) {
	path := browserPath(t)
	now := time.Now()
	old := metav1.NewTime(now.Add(-time.Hour))
	one := intstr.FromInt32(1)
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default", UID: "ds-uid", Generation: 2,
			Annotations: map[string]string{appsv1.DeprecatedTemplateGeneration: "2"}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "d"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "d"}},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"fleet": "yes"}, Containers: []corev1.Container{{Name: "c", Image: "v2"}}}},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &one}},
		},
	}
	_, hash := daemonset.Progress(ds, nil, nil, nil, metav1.NewTime(now))
	ready := func(s corev1.ConditionStatus) []corev1.NodeCondition {
		return []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s, LastTransitionTime: old}}
	}
	node := func(name string, labelled bool, readiness corev1.ConditionStatus, taints ...corev1.Taint) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
			Spec: corev1.NodeSpec{Taints: taints}, Status: corev1.NodeStatus{Conditions: ready(readiness)}}
		if labelled {
			n.Labels["fleet"] = "yes"
		}
		return n
	}
	pod := func(name, nodeName string, current, isReady bool) *corev1.Pod {
		gen, h := "1", "oldhash"
		if current {
			gen, h = "2", hash
		}
		st := corev1.ConditionFalse
		if isReady {
			st = corev1.ConditionTrue
		}
		ctrl := true
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", CreationTimestamp: old,
				Labels:          map[string]string{"app": "d", daemonset.TemplateGenerationLabel: gen, daemonset.RevisionHashLabel: h},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "d", UID: types.UID("ds-uid"), Controller: &ctrl}}},
			Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: old}}},
		}
	}
	crash := pod("p-crash", "n-crash", true, false)
	crash.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", RestartCount: 3,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
	pull := pod("p-pull", "n-pull", true, false)
	pull.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}}
	term := pod("p-term", "n-term", false, true)
	term.DeletionTimestamp = &old
	nodes := []*corev1.Node{
		node("n-ready", true, corev1.ConditionTrue), node("n-old", true, corev1.ConditionTrue),
		node("n-starting", true, corev1.ConditionTrue), node("n-crash", true, corev1.ConditionTrue),
		node("n-pull", true, corev1.ConditionTrue), node("n-unknown", true, corev1.ConditionUnknown),
		node("n-notready", true, corev1.ConditionFalse), node("n-none", true, corev1.ConditionTrue),
		node("n-term", true, corev1.ConditionTrue), node("n-unlabelled", false, corev1.ConditionTrue),
		node("n-leaving", false, corev1.ConditionTrue),
		node("n-tainted", true, corev1.ConditionTrue, corev1.Taint{Key: "gpu", Value: "yes", Effect: corev1.TaintEffectNoSchedule}),
	}
	pods := []*corev1.Pod{pod("p-ready", "n-ready", true, true), pod("p-old", "n-old", false, true),
		pod("p-starting", "n-starting", true, false), crash, pull, pod("p-unknown", "n-unknown", false, true),
		pod("p-notready", "n-notready", true, true), term, pod("p-leaving", "n-leaving", false, true)}

	rows, _ := daemonset.Progress(ds, nodes, pods, nil, metav1.NewTime(now))
	want := map[string]string{}
	for _, n := range nodes {
		want[n.Name] = "ineligible"
	}
	for _, r := range rows {
		c, ok := controllerToCell[r.State]
		if !ok {
			t.Fatalf("no cell for the controller's state %q", r.State)
		}
		want[r.Node] = c
	}
	// The fleet covers every cell state.
	seen := map[string]bool{}
	for _, c := range want {
		seen[c] = true
	}
	for _, c := range []string{"ready", "old", "updating", "pending", "failing", "unreachable", "removing", "ineligible"} {
		if !seen[c] {
			t.Fatalf("the test fleet has no %s node: %v", c, want)
		}
	}

	data, err := json.Marshal(map[string]any{"ds": ds, "nodes": nodes, "pods": pods})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{API: http.NotFoundHandler(), Authenticate: func(*http.Request, string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/ui/")); err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(ctx, time.Minute)
	defer tcancel()
	expr := fmt.Sprintf(`import('/ui/state.js').then((m) => {
		const f = %s;
		const out = {};
		for (const n of f.nodes) out[n.metadata.name] = m.cell(f.ds, n, f.pods.filter((p) => p.spec.nodeName === n.metadata.name));
		return JSON.stringify(out);
	})`, data)
	res, err := chromedp.Run(tctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]struct{ State, Reason, Pod string }
	if err := json.Unmarshal([]byte(res), &got); err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		if got[name].State != w {
			t.Errorf("%s: the page says %q (%s), the controller %q", name, got[name].State, got[name].Reason, w)
		}
	}
	for _, r := range rows {
		if r.State == daemonset.StateFailing && got[r.Node].Reason != r.Reason {
			t.Errorf("%s: failing reason %q, the controller's %q", r.Node, got[r.Node].Reason, r.Reason)
		}
	}
}
