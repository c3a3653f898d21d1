package agenttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	clientfake "github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/nodeagent/runtime"
	"github.com/everynode/everynode/resources"
)

// TestPodRuns: the agent pulls nothing (the image is local), creates and
// starts the container with env from fieldRefs and a hostPath volume, reports
// it running with a docker:// container ID, and serves its logs.
func TestPodRuns(t *testing.T) {
	t.Parallel()
	n := newNode(t, "runs", clientfake.New())
	dir := t.TempDir()
	p := n.pod("web", "-say", "hello from the pod", "-exit-after", "-1ns")
	c := &p.Spec.Containers[0]
	c.Env = []corev1.EnvVar{
		{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
	}
	p.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}}}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "host", MountPath: "/host", ReadOnly: true}}
	n.seed(p)
	a, _ := n.start(nil)

	got := n.wait("web", "running", 20*time.Second, running)
	cs := got.Status.ContainerStatuses[0]
	id, ok := strings.CutPrefix(cs.ContainerID, "docker://")
	if !ok || cs.RestartCount != 0 || cs.ImageID == "" {
		t.Errorf("container status %+v", cs)
	}
	ins, err := engine.cli.ContainerInspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NODE_NAME=" + n.name, "POD_NAME=web", "HOST_IP=127.0.0.1"} {
		if !slices.Contains(ins.Config.Env, want) {
			t.Errorf("env %v lacks %s", ins.Config.Env, want)
		}
	}
	if !slices.Contains(ins.HostConfig.Binds, dir+":/host:ro") {
		t.Errorf("binds %v", ins.HostConfig.Binds)
	}
	if ins.Config.Labels[runtime.LabelPodUID] != string(p.UID) || ins.Config.Labels[runtime.LabelNode] != n.name {
		t.Errorf("labels %v", ins.Config.Labels)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		var out bytes.Buffer
		if err := a.Logs(t.Context(), "default", "web", nodeagent.LogRequest{}, &out); err != nil {
			t.Fatalf("Logs: %v", err)
		}
		if !strings.Contains(out.String(), "hello from the pod") {
			return fmt.Errorf("logs %q", out.String())
		}
		return nil
	})
}

// TestKilledContainerRestarts: a container killed behind the agent's back is
// replaced by a new attempt after the back-off, restartCount 1, and its last
// state says how it ended.
func TestKilledContainerRestarts(t *testing.T) {
	t.Parallel()
	n := newNode(t, "restart", clientfake.New())
	n.seed(n.pod("crash", "-exit-after", "-1ns"))
	n.start(nil)
	first := n.wait("crash", "running", 20*time.Second, running).Status.ContainerStatuses[0].ContainerID
	if err := engine.cli.ContainerKill(t.Context(), strings.TrimPrefix(first, "docker://"), "KILL"); err != nil {
		t.Fatal(err)
	}
	// kubelet's first back-off is 10s.
	got := n.wait("crash", "restart", 30*time.Second, func(p *corev1.Pod) bool {
		return running(p) && p.Status.ContainerStatuses[0].RestartCount == 1
	})
	cs := got.Status.ContainerStatuses[0]
	if cs.ContainerID == first {
		t.Errorf("restarted in place: %s", cs.ContainerID)
	}
	if term := cs.LastTerminationState.Terminated; term == nil || term.ExitCode != 137 || term.ContainerID != first {
		t.Errorf("last state %+v; want terminated with 137 by %s", cs.LastTerminationState, first)
	}
}

// TestMissingImage: an image no registry serves gives ErrImagePull, then
// ImagePullBackOff.
func TestMissingImage(t *testing.T) {
	t.Parallel()
	n := newNode(t, "pull", clientfake.New())
	p := n.pod("absent")
	p.Spec.Containers[0].Image = "everynode-test/absent:" + engine.run
	n.seed(p)
	// Every status the agent writes, in order (polling could miss a short one).
	w, err := n.api.Watch(t.Context(), resources.Pods, "default", client.ListOptions{FieldSelector: "metadata.name=absent"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	n.start(nil)
	var seen []string
	timeout := time.After(15 * time.Second)
	for !slices.Contains(seen, "ImagePullBackOff") {
		select {
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*corev1.Pod); ok {
				if r := waitingReason(p); r != "" && (len(seen) == 0 || seen[len(seen)-1] != r) {
					seen = append(seen, r)
				}
			}
		case <-timeout:
			t.Fatalf("waiting reasons %v; want ErrImagePull then ImagePullBackOff", seen)
		}
	}
	if seen[0] != "ErrImagePull" {
		t.Errorf("waiting reasons %v; want ErrImagePull first", seen)
	}
	if l := n.containers(p); len(l) != 0 {
		t.Errorf("containers of a pod without image: %v", l)
	}
}

// TestReadinessProbeFlips: an exec readiness probe on a file in a hostPath
// volume makes the pod Ready and not Ready as the file comes and goes.
func TestReadinessProbeFlips(t *testing.T) {
	t.Parallel()
	n := newNode(t, "probe", clientfake.New())
	dir := t.TempDir()
	p := n.pod("probed", "-exit-after", "-1ns")
	c := &p.Spec.Containers[0]
	p.Spec.Volumes = []corev1.Volume{{Name: "flag", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}}}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "flag", MountPath: "/flag"}}
	c.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/testdaemon", "-exists", "/flag/ready"}}},
		PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1, TimeoutSeconds: 2,
	}
	n.seed(p)
	n.start(nil)
	ready := func(want bool) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool { return running(p) && p.Status.ContainerStatuses[0].Ready == want }
	}
	n.wait("probed", "running, not ready", 20*time.Second, ready(false))
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	n.wait("probed", "ready", 15*time.Second, ready(true))
	if err := os.Remove(filepath.Join(dir, "ready")); err != nil {
		t.Fatal(err)
	}
	n.wait("probed", "not ready again", 15*time.Second, ready(false))
}

// chanSource feeds the agent the pods sent on it; the first value is the
// complete list.
type chanSource struct{ ch chan []*corev1.Pod }

func (s chanSource) Run(ctx context.Context, sink nodeagent.PodSink) error {
	first := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case pods := <-s.ch:
			if first {
				sink.Replace(pods)
				first = false
				continue
			}
			for _, p := range pods {
				sink.Update(p)
			}
		}
	}
}

// TestDeletedPodStopsWithinGrace: a pod marked for deletion with a 2s grace
// period, whose process ignores SIGTERM, has its container killed when the
// grace period ends and removed; then the agent deletes the pod.
func TestDeletedPodStopsWithinGrace(t *testing.T) {
	t.Parallel()
	n := newNode(t, "delete", clientfake.New())
	p := n.pod("doomed", "-ignore-term", "-say", "up", "-exit-after", "-1ns")
	n.seed(p)
	src := chanSource{ch: make(chan []*corev1.Pod, 1)}
	src.ch <- []*corev1.Pod{n.get("doomed")}
	n.start(src)
	id := strings.TrimPrefix(n.wait("doomed", "running", 20*time.Second, running).Status.ContainerStatuses[0].ContainerID, "docker://")
	// "up" is printed once the process handles SIGTERM: a SIGTERM before
	// that would end it at once, not after the grace period.
	testkit.Eventually(t, 10*time.Second, func() error {
		var b bytes.Buffer
		if err := n.rt.Logs(t.Context(), id, runtime.LogOptions{}, &b); err != nil {
			return err
		}
		if !strings.Contains(b.String(), "up") {
			return fmt.Errorf("logs %q, waiting for up", b.String())
		}
		return nil
	})

	const grace = 2
	doomed := n.get("doomed")
	now := metav1.Now()
	doomed.DeletionTimestamp, doomed.DeletionGracePeriodSeconds = &now, ptr(int64(grace))
	start := time.Now()
	src.ch <- []*corev1.Pod{doomed}
	testkit.Eventually(t, grace*time.Second+8*time.Second, func() error {
		if l := n.containers(p); len(l) > 0 {
			return fmt.Errorf("%d container(s) still there %s after deletion", len(l), time.Since(start))
		}
		return nil
	})
	if d := time.Since(start); d < grace*time.Second {
		t.Errorf("container gone after %s, before the grace period of %ds", d, grace)
	}
	t.Logf("container of the deleted pod gone after %s (grace %ds)", time.Since(start).Round(time.Millisecond), grace)
}

func ptr[T any](v T) *T { return &v }

// TestStrayContainersSwept: containers of this node that no pod owns are
// removed; another node's are not touched.
func TestStrayContainersSwept(t *testing.T) {
	t.Parallel()
	api := clientfake.New()
	n := newNode(t, "sweep", api)
	other := newNode(t, "sweep-other", api)
	ctx := t.Context()
	spec := func(node *node, uid string) runtime.ContainerSpec {
		s := runtime.ContainerSpec{Name: "stray", Image: engine.image, Args: []string{"-exit-after", "-1ns"},
			Labels: map[string]string{runtime.LabelNode: node.name, runtime.LabelContainer: "stray"}}
		if uid != "" {
			s.Labels[runtime.LabelPodUID] = uid
			s.Labels[runtime.LabelPodName] = "gone"
			s.Labels[runtime.LabelPodNamespace] = "default"
		}
		return s
	}
	var strays []string
	for _, uid := range []string{"uid-of-no-pod", ""} {
		id, err := n.rt.CreateContainer(ctx, spec(n, uid))
		if err != nil {
			t.Fatal(err)
		}
		if err := n.rt.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		strays = append(strays, id)
	}
	foreign, err := other.rt.CreateContainer(ctx, spec(other, "uid-of-no-pod"))
	if err != nil {
		t.Fatal(err)
	}
	n.seed(n.pod("kept", "-exit-after", "-1ns"))
	n.start(nil)
	kept := n.wait("kept", "running", 20*time.Second, running).Status.ContainerStatuses[0].ContainerID

	testkit.Eventually(t, 15*time.Second, func() error {
		l, err := n.rt.ListContainers(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(l) != 1 || "docker://"+l[0].ID != kept {
			return fmt.Errorf("node's containers %+v; want only %s (strays %v swept)", l, kept, strays)
		}
		return nil
	})
	if _, err := engine.cli.ContainerInspect(ctx, foreign); err != nil {
		t.Errorf("another node's container was touched: %v", err)
	}
}

// TestAgentRestartReadopts: a new agent for the same node adopts the running
// container instead of recreating it.
func TestAgentRestartReadopts(t *testing.T) {
	t.Parallel()
	n := newNode(t, "readopt", clientfake.New())
	p := n.pod("steady", "-exit-after", "-1ns")
	n.seed(p)
	_, stop := n.start(nil)
	before := n.wait("steady", "running", 20*time.Second, running).Status.ContainerStatuses[0]
	stop()

	n.start(nil)
	// Over several relists (200ms) and resyncs (1s) of the new agent, the
	// pod keeps its container.
	testkit.Consistently(t, 2*time.Second, func() error {
		pod := n.get("steady")
		if !running(pod) {
			return fmt.Errorf("after the agent restart the pod is not running: %+v", pod.Status)
		}
		after := pod.Status.ContainerStatuses[0]
		if after.ContainerID != before.ContainerID || after.RestartCount != 0 {
			return fmt.Errorf("after the agent restart: %s restarts %d; want %s, 0", after.ContainerID, after.RestartCount, before.ContainerID)
		}
		if l := n.containers(p); len(l) != 1 || l[0].State != runtime.StateRunning {
			return fmt.Errorf("containers after the agent restart: %+v", l)
		}
		return nil
	})
}

// TestTwoAgentsOneEngine: two agents share the engine and one API; each runs
// its own pod and neither's sweep touches the other's container.
func TestTwoAgentsOneEngine(t *testing.T) {
	t.Parallel()
	api := clientfake.New()
	a, b := newNode(t, "share-a", api), newNode(t, "share-b", api)
	a.seed(a.pod("pa", "-exit-after", "-1ns"))
	b.seed(b.pod("pb", "-exit-after", "-1ns"))
	a.start(nil)
	b.start(nil)
	ida := a.wait("pa", "running", 20*time.Second, running).Status.ContainerStatuses[0].ContainerID
	idb := b.wait("pb", "running", 20*time.Second, running).Status.ContainerStatuses[0].ContainerID
	// Over several relists (200ms) and resyncs (1s), each agent sees the
	// other's container on the engine and leaves it alone.
	testkit.Consistently(t, 2*time.Second, func() error {
		for _, c := range []struct {
			n   *node
			pod string
			id  string
		}{{a, "pa", ida}, {b, "pb", idb}} {
			cs := c.n.get(c.pod).Status.ContainerStatuses[0]
			if cs.ContainerID != c.id || cs.RestartCount != 0 || cs.State.Running == nil {
				return fmt.Errorf("%s: %+v; want %s still running", c.pod, cs, c.id)
			}
			ins, err := engine.cli.ContainerInspect(t.Context(), strings.TrimPrefix(c.id, "docker://"))
			if err != nil || !ins.State.Running {
				return fmt.Errorf("%s container: running %v, %v", c.pod, err == nil && ins.State.Running, err)
			}
		}
		return nil
	})
}
