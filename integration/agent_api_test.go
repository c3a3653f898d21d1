package integration

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/nodeagent/runtime"
	"github.com/everynode/everynode/nodeagent/runtime/fake"
	"github.com/everynode/everynode/resources"
)

// agentNodeOpts configures startAgentNode: the agent's API address, clock,
// fake runtime and any further agent settings.
type agentNodeOpts struct {
	server string                  // the agent's API URL; empty: the cluster's
	clock  *testingclock.FakeClock // nil: the real clock
	rt     fake.Config
	tweak  func(*nodeagent.Config)
}

// startAgentNode starts a node like startNode but with the agent and its
// fake runtime configured by o (a fake clock drives both). The node is
// stopped by the cluster's cleanup.
func (c *cluster) startAgentNode(name string, o agentNodeOpts) *simNode {
	c.t.Helper()
	// The agent mounts each pod's service account token; a pod whose
	// account does not exist yet waits for it until its next resync, which a
	// fake clock never brings: have the namespace's default account first.
	eventually(c.t, waitLong, func() error {
		_, err := c.admin.Get(c.ctx, resources.ServiceAccounts, "default", "default")
		return err
	})
	token := "node-token-" + name
	c.tokens.add(token, apiserver.UserInfo{Name: "system:node:" + name, Groups: []string{"system:nodes"}})
	server := o.server
	if server == "" {
		server = c.url
	}
	api, err := client.NewHTTP(client.Config{Server: server, CAPEM: c.caPEM, Token: token, Timeout: 10 * time.Second})
	if err != nil {
		c.t.Fatalf("client.NewHTTP: %v", err)
	}
	c.root.Cleanup(api.Close)
	rcfg := o.rt
	if rcfg.Images == nil {
		rcfg.Images = []string{imageV1, imageV2}
	}
	var clk clock.WithTicker = clock.RealClock{}
	if o.clock != nil {
		rcfg.Clock, clk = o.clock, o.clock
	}
	rt := fake.New(rcfg)
	cfg := nodeagent.Config{
		NodeName:         name,
		NodeIP:           "192.0.2.1",
		Client:           api,
		Runtime:          rt,
		Clock:            clk,
		Logger:           testLogger().With("component", "agent"),
		DataDir:          c.root.TempDir(),
		RelistPeriod:     time.Second,
		ResyncPeriod:     time.Minute,
		NodeStatusPeriod: 10 * time.Second,
	}
	if o.tweak != nil {
		o.tweak(&cfg)
	}
	return c.runAgent(rt, cfg)
}

// boundPod is a bare pod of imageV1 bound to node, with annotations.
func boundPod(name, node string, ann map[string]string) *corev1.Pod {
	grace := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "app", Image: imageV1}},
		},
	}
	resources.Pods.SetTypeMeta(p)
	return p
}

// podStatusOf reads a pod through the API and returns it with its only
// container's status.
func (c *cluster) podStatusOf(name string) (*corev1.Pod, corev1.ContainerStatus, error) {
	obj, err := c.admin.Get(c.ctx, resources.Pods, ns, name)
	if err != nil {
		return nil, corev1.ContainerStatus{}, err
	}
	p := obj.(*corev1.Pod)
	if len(p.Status.ContainerStatuses) != 1 {
		return p, corev1.ContainerStatus{}, fmt.Errorf("pod %s: %d container statuses", name, len(p.Status.ContainerStatuses))
	}
	return p, p.Status.ContainerStatuses[0], nil
}

func waitingReasonOf(s corev1.ContainerStatus) string {
	if s.State.Waiting == nil {
		return ""
	}
	return s.State.Waiting.Reason
}

func TestCrashLoopBackOffThroughAPI(t *testing.T) {
	c := newCluster(t, 0)
	clk := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	const node = "crash-node"
	c.startAgentNode(node, agentNodeOpts{clock: clk})
	c.waitNode(node)
	pod := boundPod("crashy", node, map[string]string{fake.AnnotationExitAfter: "1s", fake.AnnotationExitCode: "1"})
	if _, err := c.admin.Create(c.ctx, pod, client.WriteOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	eventually(t, waitLong, func() error {
		_, s, err := c.podStatusOf("crashy")
		if err != nil {
			return err
		}
		if s.State.Running == nil || s.RestartCount != 0 {
			return fmt.Errorf("first run not reported: %+v", s.State)
		}
		return nil
	})
	// The container starts at a fixed fake time and exits 1s later; the
	// clock moves only when the test steps it.
	for i, delay := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second} {
		restarts := int32(i)
		clk.Step(time.Second) // the process exits
		eventually(t, waitLong, func() error {
			_, s, err := c.podStatusOf("crashy")
			if err != nil {
				return err
			}
			if waitingReasonOf(s) != "CrashLoopBackOff" || s.RestartCount != restarts {
				return fmt.Errorf("crash %d: want CrashLoopBackOff with restartCount %d, got %+v restartCount %d", i+1, restarts, s.State, s.RestartCount)
			}
			if !strings.Contains(s.State.Waiting.Message, "back-off "+delay.String()) {
				return fmt.Errorf("crash %d: message %q, want back-off %s", i+1, s.State.Waiting.Message, delay)
			}
			if lt := s.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 1 {
				return fmt.Errorf("crash %d: lastState %+v", i+1, s.LastTerminationState)
			}
			return nil
		})
		clk.Step(delay - time.Second)
		consistently(t, 500*time.Millisecond, func() error {
			_, s, err := c.podStatusOf("crashy")
			if err != nil {
				return err
			}
			if s.RestartCount != restarts || waitingReasonOf(s) != "CrashLoopBackOff" {
				return fmt.Errorf("crash %d: restarted 1s before the %s back-off ended: restartCount %d, state %+v", i+1, delay, s.RestartCount, s.State)
			}
			return nil
		})
		clk.Step(time.Second)
		eventually(t, waitLong, func() error {
			_, s, err := c.podStatusOf("crashy")
			if err != nil {
				return err
			}
			if s.State.Running == nil || s.RestartCount != restarts+1 {
				return fmt.Errorf("crash %d: not restarted when the %s back-off ended: restartCount %d, state %+v", i+1, delay, s.RestartCount, s.State)
			}
			return nil
		})
		t.Logf("crash %d: restarted exactly %s after the exit (fake clock)", i+1, delay)
	}
}

func TestReadinessProbeFlipsReadyThroughAPI(t *testing.T) {
	c := newCluster(t, 0)
	clk := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	var healthy atomic.Bool
	exec := func(id string, cmd []string) (int, []byte, error) {
		if healthy.Load() {
			return 0, nil, nil
		}
		return 1, []byte("cat: /tmp/ready: No such file or directory"), nil
	}
	const node = "probe-node"
	c.startAgentNode(node, agentNodeOpts{clock: clk, rt: fake.Config{Exec: exec}})
	c.waitNode(node)
	const period = 5 * time.Second
	pod := boundPod("probed", node, nil)
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/ready"}}},
		PeriodSeconds:    int32(period / time.Second),
		FailureThreshold: 1,
		SuccessThreshold: 1,
	}
	if _, err := c.admin.Create(c.ctx, pod, client.WriteOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	readiness := func(want bool) func() error {
		return func() error {
			p, s, err := c.podStatusOf("probed")
			if err != nil {
				return err
			}
			if s.State.Running == nil {
				return fmt.Errorf("container not running: %+v", s.State)
			}
			if s.Ready != want || podReady(p) != want {
				return fmt.Errorf("containerStatuses[0].ready %v, Ready condition %v; want %v", s.Ready, podReady(p), want)
			}
			if cr := podConditionOf(p, corev1.ContainersReady); cr == nil || (cr.Status == corev1.ConditionTrue) != want {
				return fmt.Errorf("ContainersReady condition %+v, want %v", cr, want)
			}
			return nil
		}
	}
	// The first probe (at start) fails.
	rt := c.nodeRuntime(node)
	eventually(t, waitLong, func() error {
		if n := rt.CountCalls("Exec"); n == 0 {
			return errors.New("no probe run yet")
		}
		return readiness(false)()
	})

	healthy.Store(true)
	clk.Step(period - time.Second)
	consistently(t, 300*time.Millisecond, readiness(false)) // the next probe is not due yet
	clk.Step(time.Second)
	eventually(t, waitLong, readiness(true))

	healthy.Store(false)
	clk.Step(period)
	eventually(t, waitLong, readiness(false))
	if n := rt.CountCalls("StopContainer"); n != 0 {
		t.Errorf("a readiness failure stopped the container (%d stops)", n)
	}

	healthy.Store(true)
	clk.Step(period)
	eventually(t, waitLong, readiness(true))
	_, s, err := c.podStatusOf("probed")
	if err != nil {
		t.Fatal(err)
	}
	if s.RestartCount != 0 {
		t.Errorf("readiness flips restarted the container: restartCount %d", s.RestartCount)
	}
}

func podConditionOf(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// nodeRuntime returns a running simulated node's fake runtime.
func (c *cluster) nodeRuntime(name string) *fake.Fake {
	c.t.Helper()
	c.nodes.mu.Lock()
	defer c.nodes.mu.Unlock()
	sn := c.nodes.m[name]
	if sn == nil {
		c.t.Fatalf("no running node %s", name)
	}
	return sn.rt
}

// gatedProxy forwards TCP connections to target once opened; until then
// its address refuses connections (nothing listens there).
type gatedProxy struct {
	addr, target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// newGatedProxy reserves a free loopback port for a closed proxy to target.
func newGatedProxy(t *testing.T, target string) *gatedProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &gatedProxy{addr: ln.Addr().String(), target: target, conns: map[net.Conn]bool{}}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return p
}

// open starts listening on the reserved address and forwarding.
func (p *gatedProxy) open(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("proxy listen %s: %v", p.addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = in.Close()
				continue
			}
			if !p.track(in, out) {
				return
			}
			p.wg.Add(2)
			go p.pipe(in, out)
			go p.pipe(out, in)
		}
	}()
}

// track records a connection pair; false (both closed) once the proxy is
// closing.
func (p *gatedProxy) track(in, out net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		_ = in.Close()
		_ = out.Close()
		return false
	}
	p.conns[in], p.conns[out] = true, true
	return true
}

func (p *gatedProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

// close stops listening, cuts every connection and waits for the copies.
func (p *gatedProxy) close() {
	p.mu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for conn := range p.conns {
		_ = conn.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

const staticWebManifest = `apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: static-web}
spec:
  containers:
  - name: web
    image: example/daemon:v1
`

func TestStaticPodRunsWithServerDown(t *testing.T) {
	c := newCluster(t, 0)
	proxy := newGatedProxy(t, strings.TrimPrefix(c.url, "https://"))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(staticWebManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	const node = "edge-node"
	mirrorName := "web-" + node
	sn := c.startAgentNode(node, agentNodeOpts{server: "https://" + proxy.addr, tweak: func(cfg *nodeagent.Config) {
		cfg.ManifestDir = dir
		cfg.ManifestPoll = 200 * time.Millisecond
		cfg.RelistPeriod = 100 * time.Millisecond
		cfg.NodeStatusPeriod = time.Second
	}})

	// The API is unreachable for the agent: the static pod runs anyway.
	var offlineID string
	eventually(t, waitLong, func() error {
		ctrs, err := sn.rt.ListContainers(c.ctx, runtime.Labels{runtime.LabelNode: node, runtime.LabelPodName: mirrorName})
		if err != nil {
			return err
		}
		if len(ctrs) != 1 || ctrs[0].State != runtime.StateRunning {
			return fmt.Errorf("static pod containers %+v, want one running", ctrs)
		}
		offlineID = ctrs[0].ID
		return nil
	})
	// ... and nothing reached the API.
	if _, err := c.admin.Get(c.ctx, resources.Nodes, "", node); err == nil {
		t.Fatal("the Node was registered although the agent's API is down")
	}
	if _, err := c.admin.Get(c.ctx, resources.Pods, ns, mirrorName); err == nil {
		t.Fatal("a mirror pod exists although the agent's API is down")
	}

	proxy.open(t)
	eventually(t, waitLong, func() error {
		obj, err := c.admin.Get(c.ctx, resources.Pods, ns, mirrorName)
		if err != nil {
			return err
		}
		m := obj.(*corev1.Pod)
		if _, ok := m.Annotations[nodeagent.AnnotationConfigMirror]; !ok || m.Spec.NodeName != node {
			return fmt.Errorf("pod %s is not a mirror on %s: annotations %v, nodeName %q", mirrorName, node, m.Annotations, m.Spec.NodeName)
		}
		if m.Status.Phase != corev1.PodRunning || len(m.Status.ContainerStatuses) != 1 || m.Status.ContainerStatuses[0].State.Running == nil {
			return fmt.Errorf("mirror status: phase %s, containers %+v", m.Status.Phase, m.Status.ContainerStatuses)
		}
		if got, want := m.Status.ContainerStatuses[0].ContainerID, fake.Name+"://"+offlineID; got != want {
			return fmt.Errorf("mirror shows container %s, want the one started offline %s", got, want)
		}
		return nil
	})
	c.waitNode(node)
	ctrs, err := sn.rt.ListContainers(c.ctx, runtime.Labels{runtime.LabelPodName: mirrorName})
	if err != nil {
		t.Fatal(err)
	}
	if len(ctrs) != 1 || ctrs[0].ID != offlineID {
		t.Errorf("the static pod was restarted when the API came back: %+v", ctrs)
	}
}
