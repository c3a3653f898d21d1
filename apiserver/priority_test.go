package apiserver

import (
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestPodPriorityAdmission: as Kubernetes' Priority admission, a pod's
// priorityClassName resolves to spec.priority and preemptionPolicy on
// create; without one the globalDefault class (or 0) applies; an unknown
// class, or a priority that disagrees with the class, is forbidden with
// Kubernetes' message and nothing is stored.
func TestPodPriorityAdmission(t *testing.T) {
	e := newEnv(t)
	if err := e.s.EnsurePriorityClasses(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	withClass := func(name, class string, prio *int32) *corev1.Pod {
		p := newPod(name, "")
		p.Spec.PriorityClassName = class
		p.Spec.Priority = prio
		return p
	}
	check := func(p *corev1.Pod, class string, prio int32, policy corev1.PreemptionPolicy) {
		t.Helper()
		if p.Spec.PriorityClassName != class || p.Spec.Priority == nil || *p.Spec.Priority != prio ||
			p.Spec.PreemptionPolicy == nil || *p.Spec.PreemptionPolicy != policy {
			t.Errorf("pod %s: class %q priority %v policy %v; want %q %d %s", p.Name, p.Spec.PriorityClassName,
				p.Spec.Priority, p.Spec.PreemptionPolicy, class, prio, policy)
		}
	}
	check(e.createPod(withClass("critical", "system-node-critical", nil)), "system-node-critical", 2000001000, corev1.PreemptLowerPriority)
	check(e.createPod(withClass("plain", "", nil)), "", 0, corev1.PreemptLowerPriority)

	const pcs = "/apis/scheduling.k8s.io/v1/priorityclasses"
	e.do(req{method: "POST", path: pcs, body: `{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"agents"},"value":1000,"globalDefault":true,"preemptionPolicy":"Never"}`}).
		must(t, http.StatusCreated, nil)
	check(e.createPod(withClass("defaulted", "", nil)), "agents", 1000, corev1.PreemptNever)
	v := int32(1000)
	check(e.createPod(withClass("agreeing", "agents", &v)), "agents", 1000, corev1.PreemptNever)

	wrong := int32(7)
	for _, tt := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{withClass("unknown", "logdna-agent-ds-priority", nil), `pods "unknown" is forbidden: no PriorityClass with name logdna-agent-ds-priority was found`},
		{withClass("disagrees", "system-node-critical", &wrong), `pods "disagrees" is forbidden: the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 2000001000 from the given PriorityClass name`},
	} {
		r := e.do(req{method: "POST", path: podsPath, body: toJSON(t, tt.pod)})
		if st := r.status(t); r.code != http.StatusForbidden || st.Message != tt.want {
			t.Errorf("%s: %d %q, want 403 %q", tt.pod.Name, r.code, st.Message, tt.want)
		}
		if r := e.get(podsPath + "/" + tt.pod.Name); r.code != http.StatusNotFound {
			t.Errorf("%s stored after a refused create: %d", tt.pod.Name, r.code)
		}
	}
}
