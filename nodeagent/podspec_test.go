package nodeagent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/nodeagent/runtime"
	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

// TestRunAsNonRoot: as kubelet's verifyRunAsNonRoot, with its messages, a
// runAsNonRoot container is refused (CreateContainerConfigError, nothing
// created) when its runAsUser is 0 or, without runAsUser, when its image's
// user is root, unset or a name; a numeric non-root image user runs.
func TestRunAsNonRoot(t *testing.T) {
	tests := []struct {
		name, image string
		uid         *int64
		want        string // message; empty: runs
	}{
		{"image without user", "root:v1", nil, `container has runAsNonRoot and image will run as root (pod: "nr_default(uid-nr)", container: app)`},
		{"image user 0:0", "zero:v1", nil, `container has runAsNonRoot and image will run as root (pod: "nr_default(uid-nr)", container: app)`},
		{"image user name", "named:v1", nil, `container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root (pod: "nr_default(uid-nr)", container: app)`},
		{"runAsUser 0", "user:v1", ptr(int64(0)), `container's runAsUser breaks non-root policy (pod: "nr_default(uid-nr)", container: app)`},
		{"image user 1000", "user:v1", nil, ""},
		{"runAsUser 1000 on a root image", "root:v1", ptr(int64(1000)), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, rtfake.Config{
				Images:     []string{"root:v1", "zero:v1", "named:v1", "user:v1"},
				ImageUsers: map[string]string{"zero:v1": "0:0", "named:v1": "nobody", "user:v1": "1000:1000"},
			})
			e.seed(newPod("nr", withContainer(func(c *corev1.Container) {
				c.Image = tt.image
				c.SecurityContext = &corev1.SecurityContext{RunAsUser: tt.uid}
			}), func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr(true)}
			}))
			p, _ := e.sync("nr")
			s := cstatus(t, p)
			if tt.want == "" {
				if s.State.Running == nil {
					t.Fatalf("not running: %+v", s.State)
				}
				return
			}
			if w := s.State.Waiting; w == nil || w.Reason != reasonCreateConfigError || w.Message != tt.want {
				t.Fatalf("state %+v; want %s %q", s.State, reasonCreateConfigError, tt.want)
			}
			if n := e.rt.CountCalls("CreateContainer"); n != 0 {
				t.Errorf("%d creates of a refused container", n)
			}
			if evs := byReason(e.events("nr"), eventFailed); len(evs) != 1 || evs[0].Message != "Error: "+tt.want {
				t.Errorf("Failed events %+v", evs)
			}
		})
	}
}

// TestStartupProbeGatesLiveness: until the startup probe succeeds the
// container is running but not started, not ready, and neither liveness nor
// readiness is probed; once it succeeds they run; a container whose startup
// probe fails failureThreshold times is killed and restarted.
func TestStartupProbeGatesLiveness(t *testing.T) {
	var up atomic.Bool
	var probed []string
	e := newEnv(t, rtfake.Config{Exec: func(id string, cmd []string) (int, []byte, error) {
		probed = append(probed, cmd[0])
		if cmd[0] == "startup" && !up.Load() {
			return 1, []byte("not yet"), nil
		}
		return 0, nil, nil
	}})
	probe := func(name string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{name}}},
			PeriodSeconds: period, FailureThreshold: failures}
	}
	e.seed(newPod("slow", withContainer(func(c *corev1.Container) {
		c.StartupProbe = probe("startup", 2, 3)
		c.LivenessProbe = probe("liveness", 10, 1)
		c.ReadinessProbe = probe("readiness", 10, 1)
	})))

	p, _ := e.sync("slow")
	s := cstatus(t, p)
	if s.State.Running == nil || *s.Started || s.Ready {
		t.Fatalf("before the startup probe succeeds: running %v started %v ready %v", s.State.Running != nil, *s.Started, s.Ready)
	}
	e.clock.Step(2 * time.Second)
	e.sync("slow") // first startup failure of 3
	e.clock.Step(2 * time.Second)
	p, wake := e.sync("slow") // second
	if s := cstatus(t, p); *s.Started || s.Ready || s.State.Running == nil || wake != 2*time.Second {
		t.Fatalf("after two failures: started %v ready %v running %v wake %s", *s.Started, s.Ready, s.State.Running != nil, wake)
	}
	if slices.Contains(probed, "liveness") || slices.Contains(probed, "readiness") {
		t.Fatalf("liveness or readiness probed before startup succeeded: %v", probed)
	}
	up.Store(true)
	e.clock.Step(2 * time.Second)
	p, _ = e.sync("slow")
	if s := cstatus(t, p); !*s.Started || !s.Ready || s.RestartCount != 0 {
		t.Fatalf("after startup success: started %v ready %v restarts %d; probes %v", *s.Started, s.Ready, s.RestartCount, probed)
	}
	if !slices.Contains(probed, "liveness") || !slices.Contains(probed, "readiness") {
		t.Errorf("liveness and readiness not probed after startup: %v", probed)
	}

	// A startup probe that never succeeds kills the container.
	up.Store(false)
	e.seed(newPod("never", withContainer(func(c *corev1.Container) { c.StartupProbe = probe("startup", 1, 2) })))
	e.sync("never") // started
	for range 2 {   // two failures
		e.clock.Step(time.Second)
		e.sync("never")
	}
	evs := byReason(e.events("never"), eventKilling)
	if len(evs) != 1 || evs[0].Message != "Container app failed startup probe, will be restarted" {
		t.Fatalf("Killing events %+v", evs)
	}
	if evs := byReason(e.events("never"), eventUnhealthy); len(evs) != 1 || !strings.HasPrefix(evs[0].Message, "Startup probe failed: ") {
		t.Errorf("Unhealthy events %+v", evs)
	}
	e.clock.Step(time.Minute)
	p, _ = e.sync("never")
	if s := cstatus(t, p); s.RestartCount != 1 || s.LastTerminationState.Terminated == nil {
		t.Errorf("after the kill: %+v", s)
	}
}

// TestHostPathMountFailed: a hostPath type check the runtime refuses leaves
// the container waiting in ContainerCreating with kubelet's FailedMount
// event (once), is not counted as a crash, and is retried soon.
func TestHostPathMountFailed(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.rt.InjectError("CreateContainer",
		&runtime.Error{Op: "create", Kind: runtime.MountFailed, Subject: "sock",
			Err: runtime.CheckHostPath("/nonexistent/everynode.sock", runtime.HostPathSocket)},
		&runtime.Error{Op: "create", Kind: runtime.MountFailed, Subject: "sock",
			Err: runtime.CheckHostPath("/nonexistent/everynode.sock", runtime.HostPathSocket)})
	e.seed(newPod("hp"))
	p, wake := e.sync("hp")
	if s := cstatus(t, p); waitingReason(s) != reasonContainerCreating || wake != mountRetry {
		t.Fatalf("state %+v wake %s; want %s, retry in %s", s.State, wake, reasonContainerCreating, mountRetry)
	}
	e.clock.Step(mountRetry)
	e.sync("hp")
	want := `MountVolume.SetUp failed for volume "sock" : hostPath type check failed, /nonexistent/everynode.sock is not a socket file, unable to determine its type: path "/nonexistent/everynode.sock" does not exist`
	evs := byReason(e.events("hp"), eventFailedMount)
	if len(evs) != 1 || evs[0].Message != want || evs[0].Type != corev1.EventTypeWarning {
		t.Fatalf("FailedMount events %+v; want one: %s", evs, want)
	}
	e.clock.Step(mountRetry)
	p, _ = e.sync("hp")
	if s := cstatus(t, p); s.State.Running == nil || s.RestartCount != 0 {
		t.Errorf("after the path appeared: %+v", s)
	}
}

// TestHostPathWithSubPathMountFailed: a typed hostPath that fails its check
// fails as a volume (ContainerCreating, FailedMount), not as its subPath,
// also when the container mounts it with a subPath the agent prepares; it
// starts once the path is there.
func TestHostPathWithSubPathMountFailed(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	host := filepath.Join(t.TempDir(), "data")
	e.seed(newPod("hp", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: host, Type: ptr(corev1.HostPathDirectory)}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data", SubPath: "x"}}
	}))
	p, wake := e.sync("hp")
	if s := cstatus(t, p); waitingReason(s) != reasonContainerCreating || wake != mountRetry {
		t.Fatalf("state %+v wake %s; want %s, retry in %s", s.State, wake, reasonContainerCreating, mountRetry)
	}
	evs := byReason(e.events("hp"), eventFailedMount)
	if len(evs) != 1 || !strings.HasPrefix(evs[0].Message, `MountVolume.SetUp failed for volume "data" : hostPath type check failed`) {
		t.Fatalf("FailedMount events %+v", evs)
	}
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(mountRetry)
	p, _ = e.sync("hp")
	if s := cstatus(t, p); s.State.Running == nil || s.RestartCount != 0 {
		t.Errorf("after the path appeared: %+v", s)
	}
	if fi, err := os.Stat(filepath.Join(host, "x")); err != nil || !fi.IsDir() {
		t.Errorf("subPath: %v %v", fi, err)
	}
}
