package nodeagent

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

func withInit(name string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: name, Image: "busybox:1.36", Command: []string{"setup"}}}
	}
}

func TestInitContainerRunsFirst(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.seed(newPod("init", withInit("setup"), withAnnotations(rtfake.AnnotationExitAfter+".setup", "5s")))

	p, _ := e.sync("init")
	if len(p.Status.InitContainerStatuses) != 1 || p.Status.InitContainerStatuses[0].State.Running == nil {
		t.Fatalf("init container not running: %+v", p.Status.InitContainerStatuses)
	}
	if s := cstatus(t, p); waitingReason(s) != reasonPodInitializing {
		t.Errorf("app container while initializing: %+v", s.State)
	}
	if c := podCondition(p, corev1.PodInitialized); c.Status != corev1.ConditionFalse || c.Reason != reasonNotInitialized {
		t.Errorf("initialized %+v", c)
	}
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s", p.Status.Phase)
	}

	e.clock.Step(5 * time.Second)
	p, _ = e.sync("init")
	is := p.Status.InitContainerStatuses[0]
	if is.State.Terminated == nil || is.State.Terminated.Reason != "Completed" || !is.Ready {
		t.Errorf("init container after success: %+v", is)
	}
	if s := cstatus(t, p); s.State.Running == nil {
		t.Errorf("app container not started after init: %+v", s.State)
	}
	if c := podCondition(p, corev1.PodInitialized); c.Status != corev1.ConditionTrue {
		t.Errorf("initialized %+v", c)
	}
	if p.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s", p.Status.Phase)
	}
	e.clock.Step(time.Hour)
	e.sync("init")
	if n := e.rt.CountCalls("CreateContainer"); n != 2 {
		t.Errorf("%d creates, want 2 (init once, app once)", n)
	}
}

func TestInitContainerFailure(t *testing.T) {
	tests := []struct {
		policy    corev1.RestartPolicy
		wantPhase corev1.PodPhase
		wantWait  string
	}{
		{corev1.RestartPolicyAlways, corev1.PodPending, reasonCrashLoopBackOff},
		{corev1.RestartPolicyNever, corev1.PodFailed, ""},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy), func(t *testing.T) {
			e := newEnv(t, rtfake.Config{})
			e.seed(newPod("initfail", withInit("setup"),
				withAnnotations(rtfake.AnnotationExitAfter+".setup", "1s", rtfake.AnnotationExitCode+".setup", "3"),
				func(p *corev1.Pod) { p.Spec.RestartPolicy = tt.policy }))
			e.sync("initfail")
			e.clock.Step(time.Second)
			p, _ := e.sync("initfail")
			if p.Status.Phase != tt.wantPhase {
				t.Errorf("phase %s, want %s", p.Status.Phase, tt.wantPhase)
			}
			is := p.Status.InitContainerStatuses[0]
			if got := waitingReason(is); got != tt.wantWait {
				t.Errorf("init waiting %q, want %q", got, tt.wantWait)
			}
			// kubectl shows Init:Error (terminated) or Init:CrashLoopBackOff
			// (waiting, the failure in lastState), as with kubelet.
			term := is.State.Terminated
			if term == nil {
				term = is.LastTerminationState.Terminated
			}
			if term == nil || term.Reason != "Error" || term.ExitCode != 3 {
				t.Errorf("init container's failure not shown: %+v", is)
			}
			if s := cstatus(t, p); waitingReason(s) != reasonPodInitializing {
				t.Errorf("app container %+v", s.State)
			}
		})
	}
}
