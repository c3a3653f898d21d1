package daemonset

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/flowcontrol"
	testingclock "k8s.io/utils/clock/testing"
)

// Table tests of the pure rules of docs/controller-rules.md: eligibility (§1),
// the created pod (§2.7), podsShouldBeOnNode (§2.5), budgets (§3.3–3.4),
// status (§5).

func dsWithSpec(spec corev1.PodSpec) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: simpleDaemonSetLabel},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: simpleDaemonSetLabel}, Spec: spec},
	}}
}

func requiredAffinity(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
}

func TestNodeShouldRunDaemonPod(t *testing.T) {
	taint := func(key string, effect corev1.TaintEffect) []corev1.Taint {
		return []corev1.Taint{{Key: key, Effect: effect}}
	}
	cases := []struct {
		name                             string
		spec                             corev1.PodSpec
		nodeLabels                       map[string]string
		taints                           []corev1.Taint
		unschedulable, notReady          bool
		shouldRun, shouldContinueRunning bool
	}{
		{name: "ShouldRunDaemonPod", spec: resourcePodSpec("", "50M", "0.5"), shouldRun: true, shouldContinueRunning: true},
		{name: "InsufficientResourceError is ignored", spec: resourcePodSpec("", "200M", "0.5"), shouldRun: true, shouldContinueRunning: true},
		{name: "ErrPodNotMatchHostName", spec: resourcePodSpec("other-node", "50M", "0.5")},
		{name: "ErrPodNotFitsHostPorts is ignored", spec: corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{HostPort: 666}}}}}, shouldRun: true, shouldContinueRunning: true},
		{name: "ErrNodeSelectorNotMatch", spec: corev1.PodSpec{NodeSelector: simpleDaemonSetLabel2}},
		{name: "node selector matches", spec: corev1.PodSpec{NodeSelector: simpleDaemonSetLabel}, shouldRun: true, shouldContinueRunning: true},
		{name: "ErrPodAffinityNotMatch", spec: corev1.PodSpec{Affinity: requiredAffinity(corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "type", Operator: corev1.NodeSelectorOpIn, Values: []string{"test"}}}})}},
		{name: "affinity matches", spec: corev1.PodSpec{Affinity: requiredAffinity(corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "type", Operator: corev1.NodeSelectorOpIn, Values: []string{"production"}}}})},
			shouldRun: true, shouldContinueRunning: true},
		{name: "affinity terms are ORed", spec: corev1.PodSpec{Affinity: requiredAffinity(
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "type", Operator: corev1.NodeSelectorOpIn, Values: []string{"test"}}}},
			corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"test-node"}}}})},
			shouldRun: true, shouldContinueRunning: true},
		{name: "nodeSelector AND affinity both required", spec: corev1.PodSpec{NodeSelector: simpleDaemonSetLabel2, Affinity: requiredAffinity(corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "type", Operator: corev1.NodeSelectorOpExists}}})}},
		{name: "ShouldRunDaemonPodOnUnschedulableNode", spec: resourcePodSpec("", "50M", "0.5"), unschedulable: true,
			taints: taint(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule), shouldRun: true, shouldContinueRunning: true},
		{name: "not ready node (no taint)", notReady: true, shouldRun: true, shouldContinueRunning: true},
		{name: "untolerated NoSchedule keeps running pods", taints: noScheduleTaints, shouldContinueRunning: true},
		{name: "untolerated NoExecute evicts", taints: noExecuteTaints},
		{name: "PreferNoSchedule ignored", taints: taint("dedicated", corev1.TaintEffectPreferNoSchedule), shouldRun: true, shouldContinueRunning: true},
		{name: "tolerated NoSchedule", spec: corev1.PodSpec{Tolerations: noScheduleTolerations}, taints: noScheduleTaints, shouldRun: true, shouldContinueRunning: true},
		{name: "tolerated NoExecute", spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}},
			taints: noExecuteTaints, shouldRun: true, shouldContinueRunning: true},
		{name: "not-ready NoExecute tolerated automatically", taints: taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute), shouldRun: true, shouldContinueRunning: true},
		{name: "unreachable NoExecute tolerated automatically", taints: taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute), shouldRun: true, shouldContinueRunning: true},
		{name: "not-ready NoSchedule is not tolerated", taints: taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule), shouldContinueRunning: true},
		{name: "pressure taints tolerated", taints: []corev1.Taint{
			{Key: corev1.TaintNodeDiskPressure, Effect: corev1.TaintEffectNoSchedule},
			{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule},
			{Key: corev1.TaintNodePIDPressure, Effect: corev1.TaintEffectNoSchedule}}, shouldRun: true, shouldContinueRunning: true},
		{name: "network-unavailable without hostNetwork", taints: taint(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule), shouldContinueRunning: true},
		{name: "network-unavailable with hostNetwork", spec: corev1.PodSpec{HostNetwork: true},
			taints: taint(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule), shouldRun: true, shouldContinueRunning: true},
		{name: "template nodeName matches", spec: corev1.PodSpec{NodeName: "test-node"}, shouldRun: true, shouldContinueRunning: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, strategy := range updateStrategies() {
				node := newNode("test-node", simpleDaemonSetLabel)
				node.Status.Allocatable = allocatableResources("100M", "1")
				node.Spec.Unschedulable = c.unschedulable
				node.Spec.Taints = c.taints
				if c.notReady {
					node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
				}
				ds := dsWithSpec(c.spec)
				ds.Spec.UpdateStrategy = *strategy
				run, cont := NodeShouldRunDaemonPod(node, ds)
				if run != c.shouldRun || cont != c.shouldContinueRunning {
					t.Errorf("%s: got (%t, %t), want (%t, %t)", strategy.Type, run, cont, c.shouldRun, c.shouldContinueRunning)
				}
			}
		})
	}
}

func TestAddOrUpdateDaemonPodTolerations(t *testing.T) {
	sixty := int64(60)
	cases := []struct {
		name        string
		spec        corev1.PodSpec
		wantCount   int
		wantNetwork bool
	}{
		{"defaults", corev1.PodSpec{}, 6, false},
		{"hostNetwork adds network-unavailable", corev1.PodSpec{HostNetwork: true}, 7, true},
		{"identical toleration not duplicated", corev1.PodSpec{Tolerations: []corev1.Toleration{
			{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}}, 6, false},
		{"same key/op/effect with seconds is replaced", corev1.PodSpec{Tolerations: []corev1.Toleration{
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &sixty}}}, 6, false},
		{"user toleration kept", corev1.PodSpec{Tolerations: noScheduleTolerations}, 7, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := c.spec
			AddOrUpdateDaemonPodTolerations(&spec)
			if len(spec.Tolerations) != c.wantCount {
				t.Fatalf("tolerations %v, want %d", spec.Tolerations, c.wantCount)
			}
			network := false
			for _, tol := range spec.Tolerations {
				if tol.Key == corev1.TaintNodeNetworkUnavailable {
					network = true
				}
				if tol.Key == corev1.TaintNodeUnreachable && tol.TolerationSeconds != nil {
					t.Errorf("unreachable toleration kept tolerationSeconds")
				}
			}
			if network != c.wantNetwork {
				t.Errorf("network-unavailable toleration present = %t", network)
			}
		})
	}
}

func TestReplaceDaemonSetPodNodeNameNodeAffinity(t *testing.T) {
	want := corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}
	preferred := []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: corev1.NodeSelectorTerm{}}}
	cases := []struct {
		name          string
		in            *corev1.Affinity
		keepPreferred bool
		keepPod       bool
	}{
		{"nil affinity", nil, false, false},
		{"affinity without nodeAffinity", &corev1.Affinity{PodAffinity: &corev1.PodAffinity{}}, false, true},
		{"nodeAffinity without required", &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred}}, true, false},
		{"required replaced", &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "a", Operator: corev1.NodeSelectorOpExists}}}, {}}},
			PreferredDuringSchedulingIgnoredDuringExecution: preferred}}, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := ReplaceDaemonSetPodNodeNameNodeAffinity(c.in, "n1")
			terms := out.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			if len(terms) != 1 || fmt.Sprint(terms[0]) != fmt.Sprint(want) {
				t.Errorf("terms %v, want [%v]", terms, want)
			}
			if c.keepPreferred != (len(out.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 1) {
				t.Error("preferred terms not kept")
			}
			if c.keepPod != (out.PodAffinity != nil) {
				t.Error("pod affinity not kept")
			}
		})
	}
}

func TestNewDaemonPod(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Annotations = map[string]string{TemplateGenerationAnnotation: "3"}
	ds.Spec.Template.Annotations = map[string]string{"a": "b"}
	ds.Spec.Template.Finalizers = []string{"example.com/f"}
	gen, err := templateGeneration(ds)
	if err != nil || gen == nil || *gen != 3 {
		t.Fatalf("templateGeneration = %v, %v", gen, err)
	}
	tmpl := CreatePodTemplate(ds.Spec.Template, gen, "hash1")
	pod := NewDaemonPod(&tmpl, ds, "node-7")

	if pod.GenerateName != "foo-" || pod.Namespace != "default" || pod.Name != "" {
		t.Errorf("name %q generateName %q namespace %q", pod.Name, pod.GenerateName, pod.Namespace)
	}
	wantLabels := map[string]string{"name": "simple-daemon", "type": "production", RevisionHashLabel: "hash1", TemplateGenerationLabel: "3"}
	if fmt.Sprint(pod.Labels) != fmt.Sprint(wantLabels) {
		t.Errorf("labels %v, want %v", pod.Labels, wantLabels)
	}
	if pod.Annotations["a"] != "b" || len(pod.Finalizers) != 1 {
		t.Errorf("annotations %v finalizers %v", pod.Annotations, pod.Finalizers)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.APIVersion != "apps/v1" || ref.Kind != "DaemonSet" || ref.Name != "foo" || ref.UID != ds.UID ||
		ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("ownerReference %+v", ref)
	}
	if pod.Spec.NodeName != "node-7" {
		t.Errorf("nodeName %q", pod.Spec.NodeName)
	}
	if n, err := targetNodeName(&corev1.Pod{Spec: corev1.PodSpec{Affinity: pod.Spec.Affinity}}); err != nil || n != "node-7" {
		t.Errorf("affinity target %q, %v", n, err)
	}
	if len(pod.Spec.Tolerations) != 6 {
		t.Errorf("tolerations %v", pod.Spec.Tolerations)
	}
	// The DaemonSet's template is untouched.
	if len(ds.Spec.Template.Spec.Tolerations) != 0 || ds.Spec.Template.Labels[RevisionHashLabel] != "" {
		t.Error("CreatePodTemplate modified the DaemonSet")
	}
	// Without generation annotation no pod-template-generation label.
	tmpl = CreatePodTemplate(ds.Spec.Template, nil, "h")
	if _, ok := tmpl.Labels[TemplateGenerationLabel]; ok {
		t.Error("pod-template-generation without generation")
	}
	bad := newDaemonSet("foo")
	bad.Annotations = map[string]string{TemplateGenerationAnnotation: "x"}
	if _, err := templateGeneration(bad); err == nil {
		t.Error("unparseable template generation accepted")
	}
}

func podWith(name, node string, hash string, created int64, phase corev1.PodPhase, ready bool, readySince int64) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{RevisionHashLabel: hash},
			CreationTimestamp: metav1.NewTime(time.Unix(created, 0))},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: phase},
	}
	if ready {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Unix(readySince, 0))}}
	}
	return p
}

func TestPodsShouldBeOnNode(t *testing.T) {
	now := time.Unix(1000, 0)
	terminating := podWith("term", "n", "new", 1, corev1.PodRunning, true, 0)
	ts := metav1.NewTime(now)
	terminating.DeletionTimestamp = &ts
	unscheduledOld := podWith("unscheduled", "", "new", 1, corev1.PodRunning, true, 0)
	surge := newUpdateSurge(intstr.FromInt32(1))
	cases := []struct {
		name         string
		taints       []corev1.Taint
		strategy     *appsv1.DaemonSetUpdateStrategy
		minReady     int32
		pods         []*corev1.Pod
		exists       bool
		create       bool
		deletes      []string
		failedEvents int
	}{
		{name: "no pods: create", create: true},
		{name: "one running pod: nothing", pods: []*corev1.Pod{podWith("a", "n", "new", 1, corev1.PodRunning, true, 0)}, exists: true},
		{name: "duplicates: keep the oldest", pods: []*corev1.Pod{
			podWith("c", "n", "new", 3, corev1.PodRunning, true, 0),
			podWith("a", "n", "new", 1, corev1.PodRunning, true, 0),
			podWith("b", "n", "new", 1, corev1.PodRunning, true, 0)}, exists: true, deletes: []string{"b", "c"}},
		{name: "duplicates: scheduled pod wins over an older unscheduled one", pods: []*corev1.Pod{
			podWith("late", "n", "new", 9, corev1.PodRunning, true, 0), unscheduledOld}, exists: true, deletes: []string{"unscheduled"}},
		{name: "failed pod deleted, replacement next sync", pods: []*corev1.Pod{podWith("f", "n", "new", 1, corev1.PodFailed, false, 0)},
			exists: true, deletes: []string{"f"}, failedEvents: 1},
		{name: "succeeded pod deleted", pods: []*corev1.Pod{podWith("s", "n", "new", 1, corev1.PodSucceeded, false, 0)},
			exists: true, deletes: []string{"s"}},
		{name: "terminating only: wait", pods: []*corev1.Pod{terminating}, exists: true},
		{name: "terminating only with surge: create", strategy: &surge, pods: []*corev1.Pod{terminating}, exists: true, create: true},
		{name: "NoExecute: delete all live pods", taints: noExecuteTaints, exists: true,
			pods: []*corev1.Pod{podWith("a", "n", "new", 1, corev1.PodRunning, true, 0), terminating}, deletes: []string{"a"}},
		{name: "NoSchedule: keep, no create", taints: noScheduleTaints, exists: true,
			pods: []*corev1.Pod{podWith("a", "n", "new", 1, corev1.PodRunning, true, 0)}},
		{name: "NoSchedule, no pods: nothing", taints: noScheduleTaints},
		{name: "surge: new not available keeps ready old", strategy: &surge, minReady: 10, exists: true, pods: []*corev1.Pod{
			podWith("old", "n", "old", 1, corev1.PodRunning, true, 0),
			podWith("new", "n", "new", 2, corev1.PodRunning, true, 995)}},
		{name: "surge: new available drops old", strategy: &surge, minReady: 10, exists: true, pods: []*corev1.Pod{
			podWith("old", "n", "old", 1, corev1.PodRunning, true, 0),
			podWith("new", "n", "new", 2, corev1.PodRunning, true, 900)}, deletes: []string{"old"}},
		{name: "surge: unready old dropped at once", strategy: &surge, exists: true, pods: []*corev1.Pod{
			podWith("old", "n", "old", 1, corev1.PodRunning, false, 0),
			podWith("new", "n", "new", 2, corev1.PodRunning, false, 0)}, deletes: []string{"old"}},
		{name: "surge: extra pods of each kind deleted", strategy: &surge, exists: true, pods: []*corev1.Pod{
			podWith("old1", "n", "old", 1, corev1.PodRunning, true, 0),
			podWith("old2", "n", "old", 2, corev1.PodRunning, true, 0),
			podWith("new1", "n", "new", 3, corev1.PodRunning, false, 0),
			podWith("new2", "n", "new", 4, corev1.PodRunning, false, 0)}, deletes: []string{"old2", "new2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds := newDaemonSet("foo")
			ds.Spec.MinReadySeconds = c.minReady
			if c.strategy != nil {
				ds.Spec.UpdateStrategy = *c.strategy
			}
			node := newNode("n", nil)
			node.Spec.Taints = c.taints
			backoff := flowcontrol.NewFakeBackOff(FailedPodBackoffInitial, FailedPodBackoffMax, testingclock.NewFakeClock(now))
			d := podsShouldBeOnNode(node, c.pods, c.exists, ds, "new", backoff, now)
			if d.create != c.create || fmt.Sprint(d.deletes) != fmt.Sprint(c.deletes) || len(d.failed) != c.failedEvents {
				t.Errorf("got create=%t deletes=%v failed=%d, want %t %v %d", d.create, d.deletes, len(d.failed), c.create, c.deletes, c.failedEvents)
			}
		})
	}
}

func TestPodsShouldBeOnNodeFailedBackoff(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	backoff := flowcontrol.NewFakeBackOff(FailedPodBackoffInitial, FailedPodBackoffMax, clk)
	ds := newDaemonSet("foo")
	node := newNode("n", nil)
	failed := []*corev1.Pod{podWith("f", "n", "new", 1, corev1.PodFailed, false, 0)}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	for i, w := range want {
		d := podsShouldBeOnNode(node, failed, true, ds, "new", backoff, clk.Now())
		if len(d.deletes) != 1 || d.requeueAfter != 0 {
			t.Fatalf("round %d: decision %+v, want one delete", i, d)
		}
		d = podsShouldBeOnNode(node, failed, true, ds, "new", backoff, clk.Now())
		if len(d.deletes) != 0 || d.requeueAfter != w {
			t.Fatalf("round %d in back-off: deletes %v requeue %v, want none and %v", i, d.deletes, d.requeueAfter, w)
		}
		clk.Step(w)
	}
	// A new observed generation starts a fresh back-off.
	ds.Status.ObservedGeneration = 5
	if d := podsShouldBeOnNode(node, failed, true, ds, "new", backoff, clk.Now()); len(d.deletes) != 1 {
		t.Error("new generation still in back-off")
	}
	// The window is capped at 15 minutes.
	for i := 0; i < 20; i++ {
		backoff.Next("cap", clk.Now())
	}
	if got := backoff.Get("cap"); got != FailedPodBackoffMax {
		t.Errorf("max back-off %v", got)
	}
}

func TestBudgets(t *testing.T) {
	cases := []struct {
		name                  string
		strategy              appsv1.DaemonSetUpdateStrategy
		desired               int
		unavailable, surge    int
		allowsSurge, wantsErr bool
	}{
		{"OnDelete", *newOnDeleteStrategy(), 5, 0, 0, false, false},
		{"int", newUpdateUnavailable(intstr.FromInt32(2)), 5, 2, 0, false, false},
		{"50% of 3 rounds up", newUpdateUnavailable(intstr.FromString("50%")), 3, 2, 0, false, false},
		{"1% of 3 rounds up", newUpdateUnavailable(intstr.FromString("1%")), 3, 1, 0, false, false},
		{"surge 34% of 3", newUpdateSurge(intstr.FromString("34%")), 3, 0, 2, true, false},
		{"surge 0", newUpdateSurge(intstr.FromInt32(0)), 3, 0, 0, false, false},
		{"bad string", newUpdateUnavailable(intstr.FromString("abc")), 3, 0, 0, false, true},
		{"rolling update without parameters", appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}, 3, 0, 0, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds := newDaemonSet("foo")
			ds.Spec.UpdateStrategy = c.strategy
			u, err1 := UnavailableCount(ds, c.desired)
			s, err2 := SurgeCount(ds, c.desired)
			if (err1 != nil || err2 != nil) != c.wantsErr {
				t.Fatalf("errors %v %v", err1, err2)
			}
			if c.wantsErr {
				return
			}
			if u != c.unavailable || s != c.surge || AllowsSurge(ds) != c.allowsSurge {
				t.Errorf("unavailable %d surge %d allows %t", u, s, AllowsSurge(ds))
			}
		})
	}
}

func TestFindUpdatedPodsOnNode(t *testing.T) {
	ds := newDaemonSet("foo")
	gen := "7"
	ds.Annotations = map[string]string{TemplateGenerationAnnotation: gen}
	newP := podWith("new", "n", "h", 1, corev1.PodRunning, true, 0)
	byGen := podWith("gen", "n", "other", 1, corev1.PodRunning, true, 0)
	byGen.Labels[TemplateGenerationLabel] = gen
	oldP := podWith("old", "n", "other", 1, corev1.PodRunning, true, 0)
	deleted := podWith("del", "n", "other", 1, corev1.PodRunning, true, 0)
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	cases := []struct {
		name          string
		pods          []*corev1.Pod
		wantNew, wOld string
		ok            bool
	}{
		{"empty", nil, "", "", true},
		{"one new", []*corev1.Pod{newP}, "new", "", true},
		{"new by generation label", []*corev1.Pod{byGen}, "gen", "", true},
		{"old and new", []*corev1.Pod{oldP, newP}, "new", "old", true},
		{"deleted ignored", []*corev1.Pod{deleted, newP}, "new", "", true},
		{"two new", []*corev1.Pod{newP, byGen}, "", "", false},
		{"two old", []*corev1.Pod{oldP, oldP}, "", "", false},
	}
	name := func(p *corev1.Pod) string {
		if p == nil {
			return ""
		}
		return p.Name
	}
	for _, c := range cases {
		n, o, ok := findUpdatedPodsOnNode(ds, c.pods, "h")
		if name(n) != c.wantNew || name(o) != c.wOld || ok != c.ok {
			t.Errorf("%s: got (%s, %s, %t)", c.name, name(n), name(o), ok)
		}
	}
}

func TestIsPodAvailable(t *testing.T) {
	now := time.Unix(100, 0)
	cases := []struct {
		name     string
		pod      *corev1.Pod
		minReady int32
		want     bool
	}{
		{"not ready", podWith("a", "n", "h", 1, corev1.PodRunning, false, 0), 0, false},
		{"ready, no minReady", podWith("a", "n", "h", 1, corev1.PodRunning, true, 99), 0, true},
		{"ready long enough", podWith("a", "n", "h", 1, corev1.PodRunning, true, 89), 10, true},
		{"ready exactly minReady ago is not available", podWith("a", "n", "h", 1, corev1.PodRunning, true, 90), 10, false},
		{"ready zero transition time", &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}, 10, false},
	}
	for _, c := range cases {
		if got := IsPodAvailable(c.pod, c.minReady, now); got != c.want {
			t.Errorf("%s: %t", c.name, got)
		}
	}
}

func TestComputeStatus(t *testing.T) {
	now := time.Unix(100, 0)
	ds := newDaemonSet("foo")
	ds.Spec.MinReadySeconds = 10
	ds.Spec.Template.Spec.NodeSelector = simpleNodeLabel
	nodes := []*corev1.Node{
		newNode("a", simpleNodeLabel), newNode("b", simpleNodeLabel), newNode("c", simpleNodeLabel),
		newNode("d", simpleNodeLabel), newNode("e", nil), newNode("f", nil),
	}
	nodeToPods := map[string][]*corev1.Pod{
		// a: ready for long, updated
		"a": {podWith("a1", "a", "h", 1, corev1.PodRunning, true, 10)},
		// b: the oldest pod (old, ready, not long) decides; the newer updated one is ignored
		"b": {podWith("b2", "b", "h", 5, corev1.PodRunning, true, 10), podWith("b1", "b", "old", 1, corev1.PodRunning, true, 95)},
		// c: not ready, updated
		"c": {podWith("c1", "c", "h", 1, corev1.PodPending, false, 0)},
		// d: nothing
		// e: misscheduled pod
		"e": {podWith("e1", "e", "h", 1, corev1.PodRunning, true, 10)},
	}
	got := computeStatus(ds, nodes, nodeToPods, "h", now, nil)
	want := statusCounts{desired: 4, current: 3, misscheduled: 1, ready: 2, updated: 2, available: 1, unavailable: 3}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 4, CurrentNumberScheduled: 3, NumberMisscheduled: 1,
		NumberReady: 2, UpdatedNumberScheduled: 2, NumberAvailable: 1, NumberUnavailable: 3, ObservedGeneration: 2}
	ds.Generation = 2
	if !statusUnchanged(ds, want) {
		t.Error("identical status reported as changed")
	}
	ds.Generation = 3
	if statusUnchanged(ds, want) {
		t.Error("newer generation not written")
	}
}
