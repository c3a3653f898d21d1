package agenttest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	clientfake "github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent"
)

// TestPodSpecOnDocker: a DaemonSet-style pod (hostNetwork, hostPID, a
// hostPath volume of type DirectoryOrCreate that does not exist yet, two
// init containers, capabilities, a startup probe) on real Docker: the agent
// creates the directory (0755); the init containers run one after the other
// to completion before the app container (each appends its name to a file in
// the volume, and the engine's timestamps say the second started after the
// first finished); the app container runs with exactly the capabilities
// asked for (CapEff), in the host's PID namespace, and becomes started and
// ready once its startup probe succeeds.
func TestPodSpecOnDocker(t *testing.T) {
	t.Parallel()
	n := newNode(t, "podspec", clientfake.New())
	shared := filepath.Join(t.TempDir(), "created", "by", "agent")
	p := n.pod("ds", "-append", "/shared/order=app", "-caps", "-exit-after", "-1ns")
	p.Spec.HostNetwork, p.Spec.HostPID = true, true
	p.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	p.Spec.Volumes = []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: shared, Type: ptr(corev1.HostPathDirectoryOrCreate),
	}}}}
	// No mountPropagation here: the engine refuses rslave unless the source
	// is on a shared or slave mount, which a test machine's / may not be.
	mount := []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	for _, name := range []string{"first", "second"} {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{
			Name: name, Image: engine.image, ImagePullPolicy: corev1.PullIfNotPresent, VolumeMounts: mount,
			Args: []string{"-append", "/shared/order=" + name, "-exit-after", "300ms"},
		})
	}
	c := &p.Spec.Containers[0]
	c.VolumeMounts = mount
	c.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
		Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN", "DAC_OVERRIDE"},
	}}
	c.StartupProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/testdaemon", "-exists", "/shared/order"}}},
		PeriodSeconds: 1, FailureThreshold: 30, TimeoutSeconds: 2,
	}
	n.seed(p)
	a, _ := n.start(nil)

	got := n.wait("ds", "running and ready", 60*time.Second, func(p *corev1.Pod) bool {
		return running(p) && p.Status.ContainerStatuses[0].Ready
	})
	if s := got.Status.ContainerStatuses[0]; s.Started == nil || !*s.Started {
		t.Errorf("ready but not started: %+v", s)
	}
	fi, err := os.Stat(shared)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Fatalf("DirectoryOrCreate: %v %v", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(shared, "order")); err != nil || string(b) != "first\nsecond\napp\n" {
		t.Errorf("order file %q, %v; want first, second, app", b, err)
	}
	if len(got.Status.InitContainerStatuses) != 2 {
		t.Fatalf("init statuses %+v", got.Status.InitContainerStatuses)
	}
	var finished time.Time
	for i, is := range got.Status.InitContainerStatuses {
		term := is.State.Terminated
		if term == nil || term.Reason != "Completed" || !is.Ready || is.RestartCount != 0 {
			t.Fatalf("init container %s: %+v", is.Name, is)
		}
		ins, err := engine.cli.ContainerInspect(t.Context(), strings.TrimPrefix(term.ContainerID, "docker://"))
		if err != nil {
			t.Fatal(err)
		}
		start, _ := time.Parse(time.RFC3339Nano, ins.State.StartedAt)
		if i > 0 && !start.After(finished) {
			t.Errorf("init container %s started at %s, before the previous one finished (%s)", is.Name, start, finished)
		}
		finished, _ = time.Parse(time.RFC3339Nano, ins.State.FinishedAt)
	}
	app, err := engine.cli.ContainerInspect(t.Context(), strings.TrimPrefix(got.Status.ContainerStatuses[0].ContainerID, "docker://"))
	if err != nil {
		t.Fatal(err)
	}
	if start, _ := time.Parse(time.RFC3339Nano, app.State.StartedAt); !start.After(finished) {
		t.Errorf("app started at %s, before the last init container finished (%s)", start, finished)
	}
	if app.HostConfig.PidMode != "host" || app.HostConfig.NetworkMode != "host" {
		t.Errorf("host config: pid %q network %q binds %v", app.HostConfig.PidMode, app.HostConfig.NetworkMode, app.HostConfig.Binds)
	}

	// CAP_NET_ADMIN is bit 12, CAP_DAC_OVERRIDE bit 1.
	wantCaps := fmt.Sprintf("CapEff:\t%016x", 1<<12|1<<1)
	var logs string
	testkit.Eventually(t, 10*time.Second, func() error {
		var out bytes.Buffer
		if err := a.Logs(t.Context(), "default", "ds", nodeagent.LogRequest{Container: "app"}, &out); err != nil {
			return err
		}
		if logs = out.String(); !strings.Contains(logs, "CapEff:") {
			return fmt.Errorf("logs %q", logs)
		}
		return nil
	})
	if !strings.Contains(logs, wantCaps+"\n") {
		t.Errorf("app logs %q; want %q", logs, wantCaps)
	}
	var pid int
	if _, err := fmt.Sscanf(logs, "pid=%d", &pid); err != nil || pid == 1 {
		t.Errorf("pid %d (%v) in %q: want the host's PID namespace, not 1", pid, err, logs)
	}
}

// TestRunAsNonRootRefusedOnDocker: the test image sets no user, so it runs
// as root: with runAsNonRoot and no runAsUser the agent refuses it with
// kubelet's reason and message, and creates no container; with runAsUser
// 1000 the same image runs as uid 1000.
func TestRunAsNonRootRefusedOnDocker(t *testing.T) {
	t.Parallel()
	n := newNode(t, "nonroot", clientfake.New())
	refused := n.pod("refused", "-exit-after", "-1ns")
	refused.Spec.HostNetwork = true
	refused.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr(true)}
	allowed := refused.DeepCopy()
	allowed.Name, allowed.UID = "allowed", allowed.UID+"-allowed"
	allowed.Spec.Containers[0].Args = []string{"-caps", "-exit-after", "-1ns"}
	allowed.Spec.SecurityContext.RunAsUser = ptr(int64(1000))
	n.seed(refused)
	n.seed(allowed)
	a, _ := n.start(nil)

	got := n.wait("refused", "CreateContainerConfigError", 30*time.Second, func(p *corev1.Pod) bool {
		return waitingReason(p) == "CreateContainerConfigError"
	})
	want := fmt.Sprintf("container has runAsNonRoot and image will run as root (pod: %q, container: app)",
		"refused_default("+string(refused.UID)+")")
	if msg := got.Status.ContainerStatuses[0].State.Waiting.Message; msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	if l := n.containers(refused); len(l) != 0 {
		t.Errorf("containers of a refused pod: %v", l)
	}
	n.wait("allowed", "running", 30*time.Second, running)
	testkit.Eventually(t, 10*time.Second, func() error {
		var out bytes.Buffer
		if err := a.Logs(t.Context(), "default", "allowed", nodeagent.LogRequest{}, &out); err != nil {
			return err
		}
		if !strings.Contains(out.String(), "uid="+strconv.Itoa(1000)+"\n") {
			return fmt.Errorf("logs %q; want uid=1000", out.String())
		}
		return nil
	})
}
