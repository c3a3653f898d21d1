package nodeagent

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/nodeagent/runtime"
	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

func TestSyncPodStartsContainer(t *testing.T) {
	e := newEnv(t, rtfake.Config{IP: "10.88.0.5"})
	e.seed(newPod("web"))
	p, _ := e.sync("web")

	list := e.containers(runtime.Labels{runtime.LabelNode: testNode})
	if len(list) != 1 || list[0].State != runtime.StateRunning {
		t.Fatalf("containers: %+v", list)
	}
	want := map[string]string{
		runtime.LabelNode: testNode, runtime.LabelPodNamespace: "default", runtime.LabelPodName: "web",
		runtime.LabelPodUID: "uid-web", runtime.LabelContainer: "app", runtime.LabelAttempt: "0",
	}
	for k, v := range want {
		if list[0].Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, list[0].Labels[k], v)
		}
	}
	if p.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s", p.Status.Phase)
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		if c := podCondition(p, typ); c == nil || c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Time.Equal(t0) {
			t.Errorf("condition %s = %+v", typ, c)
		}
	}
	s := cstatus(t, p)
	if s.State.Running == nil || !s.Ready || s.Started == nil || !*s.Started || s.RestartCount != 0 {
		t.Errorf("container status %+v", s)
	}
	if s.ContainerID != "fake://"+list[0].ID || !strings.HasPrefix(s.ImageID, "sha256:") || s.Image != "busybox:1.36" {
		t.Errorf("ids: %q %q %q", s.ContainerID, s.ImageID, s.Image)
	}
	if p.Status.PodIP != "10.88.0.5" || p.Status.HostIP != "192.0.2.10" || p.Status.StartTime == nil {
		t.Errorf("podIP %q hostIP %q startTime %v", p.Status.PodIP, p.Status.HostIP, p.Status.StartTime)
	}
	if n := e.rt.CountCalls("PullImage"); n != 0 {
		t.Errorf("IfNotPresent with the image present pulled %d times", n)
	}

	// A second pass with nothing changed writes nothing.
	rv := p.ResourceVersion
	e.clock.Step(time.Second)
	p, _ = e.sync("web")
	if p.ResourceVersion != rv {
		t.Errorf("unchanged status was written again (rv %s -> %s)", rv, p.ResourceVersion)
	}
	if n := e.rt.CountCalls("CreateContainer"); n != 1 {
		t.Errorf("CreateContainer called %d times", n)
	}
}

func TestCrashLoopBackOff(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.seed(newPod("crash", withAnnotations(rtfake.AnnotationExitAfter, "1s", rtfake.AnnotationExitCode, "2")))
	p, _ := e.sync("crash")
	if s := cstatus(t, p); s.State.Running == nil {
		t.Fatalf("first run: %+v", s)
	}
	wantDelays := []time.Duration{10, 20, 40, 80, 160, 300, 300}
	for i, d := range wantDelays {
		delay := d * time.Second
		e.clock.Step(time.Second) // the container exits
		exitedAt := e.clock.Now()
		p, wake := e.sync("crash")
		s := cstatus(t, p)
		if waitingReason(s) != reasonCrashLoopBackOff || s.RestartCount != int32(i) {
			t.Fatalf("restart %d: after exit: %+v", i+1, s)
		}
		if !strings.Contains(s.State.Waiting.Message, "back-off "+delay.String()) {
			t.Errorf("restart %d: message %q, want back-off %s", i+1, s.State.Waiting.Message, delay)
		}
		if lt := s.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 2 || lt.Reason != "Error" {
			t.Errorf("restart %d: lastState %+v", i+1, s.LastTerminationState)
		}
		if want := min(delay, DefaultResyncPeriod); wake != want {
			t.Errorf("restart %d: wake after %s, want %s", i+1, wake, want)
		}
		if p.Status.Phase != corev1.PodRunning || podCondition(p, corev1.PodReady).Status != corev1.ConditionFalse {
			t.Errorf("restart %d: phase %s ready %v", i+1, p.Status.Phase, podCondition(p, corev1.PodReady))
		}
		e.clock.Step(delay - time.Millisecond)
		p, _ = e.sync("crash")
		if s := cstatus(t, p); waitingReason(s) != reasonCrashLoopBackOff {
			t.Fatalf("restart %d: restarted before %s: %+v", i+1, delay, s)
		}
		e.clock.Step(time.Millisecond)
		p, _ = e.sync("crash")
		s = cstatus(t, p)
		if s.State.Running == nil || s.RestartCount != int32(i+1) {
			t.Fatalf("restart %d: not restarted at +%s: %+v", i+1, delay, s)
		}
		if got := s.State.Running.StartedAt.Time.Sub(exitedAt); got != delay {
			t.Errorf("restart %d: restarted %s after exit, want %s", i+1, got, delay)
		}
	}
	// Only the newest container and its predecessor are kept.
	e.sync("crash")
	if n := len(e.containers(runtime.Labels{runtime.LabelPodUID: "uid-crash"})); n != 2 {
		t.Errorf("%d containers kept, want 2", n)
	}
}

func TestCrashLoopBackOffResetsAfterLongRun(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.seed(newPod("slow", withAnnotations(rtfake.AnnotationExitAfter, "11m", rtfake.AnnotationExitCode, "1")))
	e.sync("slow")
	for i := range 3 {
		e.clock.Step(11 * time.Minute)
		p, wake := e.sync("slow")
		if s := cstatus(t, p); waitingReason(s) != reasonCrashLoopBackOff || wake != 10*time.Second {
			t.Fatalf("crash %d: wake %s, status %+v", i+1, wake, s)
		}
		e.clock.Step(10 * time.Second)
		if p, _ = e.sync("slow"); cstatus(t, p).State.Running == nil {
			t.Fatalf("crash %d: not restarted after 10s", i+1)
		}
	}
}

func TestRestartPolicies(t *testing.T) {
	tests := []struct {
		policy    corev1.RestartPolicy
		code      string
		wantPhase corev1.PodPhase
	}{
		{corev1.RestartPolicyNever, "0", corev1.PodSucceeded},
		{corev1.RestartPolicyNever, "1", corev1.PodFailed},
		{corev1.RestartPolicyOnFailure, "0", corev1.PodSucceeded},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy)+"/"+tt.code, func(t *testing.T) {
			e := newEnv(t, rtfake.Config{})
			e.seed(newPod("job", withAnnotations(rtfake.AnnotationExitAfter, "5s", rtfake.AnnotationExitCode, tt.code),
				func(p *corev1.Pod) { p.Spec.RestartPolicy = tt.policy }))
			e.sync("job")
			e.clock.Step(time.Minute)
			p, _ := e.sync("job")
			if p.Status.Phase != tt.wantPhase {
				t.Errorf("phase %s, want %s", p.Status.Phase, tt.wantPhase)
			}
			if s := cstatus(t, p); s.State.Terminated == nil || s.RestartCount != 0 {
				t.Errorf("status %+v", s)
			}
			if c := podCondition(p, corev1.PodReady); c.Reason != reasonPodCompleted {
				t.Errorf("ready %+v", c)
			}
			e.clock.Step(time.Hour)
			e.sync("job")
			if n := e.rt.CountCalls("CreateContainer"); n != 1 {
				t.Errorf("terminal pod: %d creates", n)
			}
		})
	}
}

func TestImagePullErrors(t *testing.T) {
	e := newEnv(t, rtfake.Config{Unpullable: "registry.invalid/*"})
	e.seed(newPod("pull", withContainer(func(c *corev1.Container) { c.Image = "registry.invalid/app:v1" })))

	p, wake := e.sync("pull")
	s := cstatus(t, p)
	if waitingReason(s) != reasonErrImagePull || !strings.Contains(s.State.Waiting.Message, "fake registry refuses") {
		t.Fatalf("first sync: %+v", s)
	}
	if p.Status.Phase != corev1.PodPending || wake != pullErrorShown {
		t.Errorf("phase %s wake %s", p.Status.Phase, wake)
	}
	e.clock.Step(wake)
	p, wake = e.sync("pull")
	if s := cstatus(t, p); waitingReason(s) != reasonImagePullBackOff || !strings.Contains(s.State.Waiting.Message, `Back-off pulling image "registry.invalid/app:v1"`) {
		t.Fatalf("in back-off: %+v", s)
	}
	if wake != min(10*time.Second-pullErrorShown, DefaultResyncPeriod) {
		t.Errorf("wake %s", wake)
	}
	if n := e.rt.CountCalls("PullImage"); n != 1 {
		t.Errorf("%d pulls during back-off", n)
	}
	e.clock.Step(wake)
	p, _ = e.sync("pull")
	if s := cstatus(t, p); waitingReason(s) != reasonErrImagePull {
		t.Fatalf("retry: %+v", s)
	}
	e.clock.Step(pullErrorShown)
	if p, _ = e.sync("pull"); waitingReason(cstatus(t, p)) != reasonImagePullBackOff {
		t.Errorf("second back-off: %+v", cstatus(t, p))
	}
	e.clock.Step(20*time.Second - pullErrorShown - time.Millisecond)
	if p, _ = e.sync("pull"); waitingReason(cstatus(t, p)) != reasonImagePullBackOff {
		t.Errorf("second back-off is not 20s: %+v", cstatus(t, p))
	}

	// Once the image becomes available the container starts.
	e.rt.AddImage("registry.invalid/app:v1")
	e.clock.Step(time.Millisecond)
	p, _ = e.sync("pull")
	if s := cstatus(t, p); s.State.Running == nil {
		t.Fatalf("after the image appeared: %+v", s)
	}
}

func TestImagePullPolicy(t *testing.T) {
	tests := []struct {
		name      string
		image     string
		policy    corev1.PullPolicy
		wantPulls int
		wantWait  string
	}{
		{"IfNotPresent present", "busybox:1.36", corev1.PullIfNotPresent, 0, ""},
		{"IfNotPresent absent", "app:v2", corev1.PullIfNotPresent, 1, ""},
		{"Always present", "busybox:1.36", corev1.PullAlways, 1, ""},
		{"Never absent", "app:v2", corev1.PullNever, 0, reasonErrImageNeverPull},
		{"Never present", "busybox:1.36", corev1.PullNever, 0, ""},
		{"default latest pulls", "busybox", "", 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, rtfake.Config{Images: []string{"busybox:1.36", "busybox:latest"}})
			e.seed(newPod("p", withContainer(func(c *corev1.Container) { c.Image, c.ImagePullPolicy = tt.image, tt.policy })))
			p, _ := e.sync("p")
			if n := e.rt.CountCalls("PullImage"); n != tt.wantPulls {
				t.Errorf("pulls %d, want %d", n, tt.wantPulls)
			}
			if got := waitingReason(cstatus(t, p)); got != tt.wantWait {
				t.Errorf("waiting %q, want %q", got, tt.wantWait)
			}
		})
	}
}

func TestPodPhase(t *testing.T) {
	running := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	waiting := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}}
	backoff := corev1.ContainerStatus{State: waiting.State, LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}
	ok := corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}
	failed := corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}
	tests := []struct {
		name   string
		policy corev1.RestartPolicy
		in     []corev1.ContainerStatus
		want   corev1.PodPhase
	}{
		{"all running", corev1.RestartPolicyAlways, []corev1.ContainerStatus{running, running}, corev1.PodRunning},
		{"one creating", corev1.RestartPolicyAlways, []corev1.ContainerStatus{running, waiting}, corev1.PodPending},
		{"crash loop", corev1.RestartPolicyAlways, []corev1.ContainerStatus{running, backoff}, corev1.PodRunning},
		{"exited always", corev1.RestartPolicyAlways, []corev1.ContainerStatus{failed}, corev1.PodRunning},
		{"succeeded never", corev1.RestartPolicyNever, []corev1.ContainerStatus{ok, ok}, corev1.PodSucceeded},
		{"failed never", corev1.RestartPolicyNever, []corev1.ContainerStatus{ok, failed}, corev1.PodFailed},
		{"failed onfailure", corev1.RestartPolicyOnFailure, []corev1.ContainerStatus{failed}, corev1.PodRunning},
		{"none", corev1.RestartPolicyAlways, nil, corev1.PodPending},
	}
	for _, tt := range tests {
		if got := podPhase(tt.policy, tt.in); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestCrashDelay(t *testing.T) {
	want := []time.Duration{10, 20, 40, 80, 160, 300, 300, 300}
	for n, w := range want {
		if got := crashDelay(n); got != w*time.Second {
			t.Errorf("crashDelay(%d) = %s, want %ds", n, got, w)
		}
	}
}

func TestImageChangeReplacesContainer(t *testing.T) {
	e := newEnv(t, rtfake.Config{Images: []string{"busybox:1.36", "busybox:1.37"}})
	e.seed(newPod("upd"))
	e.sync("upd")
	p := e.get("upd")
	p.Spec.Containers[0].Image = "busybox:1.37"
	e.agent.pods.Update(p)
	if _, err := e.agent.syncPod(t.Context(), p.UID); err != nil {
		t.Fatal(err)
	}
	p = e.get("upd")
	s := cstatus(t, p)
	if s.State.Running == nil || s.RestartCount != 1 || s.Image != "busybox:1.37" {
		t.Fatalf("after the image change: %+v", s)
	}
	var running []string
	for _, c := range e.containers(runtime.Labels{runtime.LabelPodUID: "uid-upd"}) {
		if c.State == runtime.StateRunning {
			running = append(running, c.Image)
		}
	}
	if len(running) != 1 || running[0] != "busybox:1.37" {
		t.Errorf("running containers: %v", running)
	}
}

func TestStartErrorBacksOff(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	boom := errors.New("cannot start: port 80 taken")
	e.rt.InjectError("StartContainer", boom, boom)
	e.seed(newPod("busy"))
	p, wake := e.sync("busy")
	if s := cstatus(t, p); waitingReason(s) != reasonRunContainerError || !strings.Contains(s.State.Waiting.Message, "port 80 taken") {
		t.Fatalf("first start: %+v", s.State)
	}
	if wake != 10*time.Second {
		t.Errorf("wake %s", wake)
	}
	e.clock.Step(10 * time.Second)
	if _, wake = e.sync("busy"); wake != min(20*time.Second, DefaultResyncPeriod) {
		t.Errorf("second failure: wake %s", wake)
	}
	e.clock.Step(20 * time.Second)
	if p, _ = e.sync("busy"); cstatus(t, p).State.Running == nil {
		t.Fatalf("not running once start works: %+v", cstatus(t, p).State)
	}
	if n := len(e.containers(runtime.Labels{runtime.LabelPodUID: "uid-busy"})); n != 1 {
		t.Errorf("%d containers; failed starts must not leave theirs", n)
	}
}
