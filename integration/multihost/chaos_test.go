package multihost_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// The chaos test (docs/ha.md "Chaos tests"): three servers on an embedded
// etcd cluster and five agents, each a container of the project's own image
// on the run's private Docker network, with the API reached on the servers'
// addresses on that network. Four scenarios run in turn on the one cluster:
//
//	partition  one server is cut off the network: it refuses writes with a
//	           Status, its agent fails over, nothing diverges after the heal
//	quorum     two of three servers are SIGKILLed: the API refuses writes
//	           with a Status, the agents keep their pods; one returns and
//	           the cluster writes again
//	leader     the server leading the controllers is SIGKILLed during each
//	           of several rollouts: every rollout completes, no node ever
//	           runs two live pods of the DaemonSet, none is left without one
//	restore    a snapshot taken on a server is restored onto a fresh data
//	           dir; the cluster is re-formed from it and reconverges
//
// Agent 1 runs pods on the host's Docker engine (its daemon container must
// survive the outages); agents 2–5 use the fake runtime, which keeps the
// test within its CI budget on a 2-core machine.

const (
	// chaosKillsEnv sets how many SIGKILLs of the leading server the leader
	// scenario makes (CI and "make chaos" set 20); unset, chaosKillsShort,
	// to keep a developer's "make test" short.
	chaosKillsEnv   = "EVERYNODE_CHAOS_KILLS"
	chaosKillsShort = 3
	chaosNodes      = 5
	chaosDS         = "chaos-daemon"
	// chaosWait bounds one convergence: generous, for a loaded machine.
	chaosWait = 3 * time.Minute
	// chaosNoQuorum is what a write is refused with when etcd cannot commit.
	chaosNoQuorum = "a majority of the servers is unreachable"
)

// chaosServer is one server container.
type chaosServer struct {
	name, container, ip, dir string
	args                     []string
	api                      *client.HTTP // this server only
}

func (s *chaosServer) url() string { return "https://" + s.ip + ":6443" }

type chaosEnv struct {
	*mhEnv
	servers []*chaosServer
	agentOf []int // server index each agent joined
	token   string
	baseCfg client.Config // admin credentials, Server set per server

	mon *podMonitor
}

const chaosDaemonSet = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: chaos-daemon
  namespace: default
spec:
  selector:
    matchLabels: {app: chaos-daemon}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate: {maxUnavailable: 2}
  template:
    metadata:
      labels: {app: chaos-daemon}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: daemon
        image: %s
        imagePullPolicy: IfNotPresent
        args: ["-every", "5s"]
`

// TestChaosHA is issue 17's chaos scenarios; see the comment above.
func TestChaosHA(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three servers and five agents in containers")
	}
	kills := chaosKillsShort
	if v := os.Getenv(chaosKillsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", chaosKillsEnv, v)
		}
		kills = n
	}
	start := time.Now()
	e := &chaosEnv{mhEnv: newMHEnv(t, true)}
	// The scenarios' whole budget: the leader scenario grows with kills.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute+time.Duration(kills)*time.Minute)
	e.ctx = ctx
	// Cleanups run last first: this one, before the removal of the
	// containers, gives that removal a live context of its own.
	t.Cleanup(func() {
		cancel()
		e.ctx, e.stopCtx = context.WithTimeout(context.Background(), 3*time.Minute)
	})
	e.startNetwork()
	e.startServers()
	e.startChaosAgents()
	for _, n := range e.nodes {
		mhEventually(t, chaosWait, "node "+n+" Ready", e.nodeReady(n))
	}
	manifest := filepath.Join(e.dir, "chaos-ds.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(chaosDaemonSet, e.daemon)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.kubecfg = e.writeKubeconfig(e.servers[0].ip, "host-s1.kubeconfig")
	if out, err := e.everynode("apply", "-f", manifest); err != nil {
		t.Fatalf("everynode apply: %v\n%s", err, out)
	}
	e.waitRolledOut(t, "the first rollout")
	t.Logf("MEASURED: 3 servers, %d agents and the DaemonSet up %s after the start", chaosNodes, time.Since(start).Round(time.Second))

	monCtx, stop := context.WithCancel(e.ctx)
	e.mon = newPodMonitor(e)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.mon.run(monCtx) }()
	defer func() {
		stop()
		wg.Wait()
		e.mon.report(t)
	}()

	// Each scenario leaves the cluster whole and converged for the next.
	for _, sc := range []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"partition", e.partition},
		{"quorum", e.quorumLoss},
		{"leader", func(t *testing.T) { e.leaderKills(t, kills) }},
		{"restore", e.restore},
	} {
		began := time.Now()
		if !t.Run(sc.name, sc.fn) {
			return // the next scenario needs a converged cluster
		}
		t.Logf("scenario %s took %s", sc.name, time.Since(began).Round(time.Second))
	}
	t.Logf("chaos test took %s in all", time.Since(start).Round(time.Second))
}

// ---- cluster ----

func (e *chaosEnv) startServers() {
	t := e.t
	for i := range 3 {
		s := &chaosServer{name: fmt.Sprintf("s%d", i+1), ip: e.ip(10 + i)}
		s.container = fmt.Sprintf("everynode-mh-%s-%s", e.run, s.name)
		s.dir = filepath.Join(e.dir, s.name)
		s.args = e.serverArgs(s, s.dir)
		if i == 0 {
			s.args = append(s.args, "--cluster-init")
		} else {
			s.args = append(s.args, "--join", e.servers[0].url(), "--token-file", filepath.Join(e.servers[0].dir, "join-token"))
		}
		e.servers = append(e.servers, s)
		e.logContainers = append(e.logContainers, s.container)
		e.runServer(s)
	}
	token, err := os.ReadFile(filepath.Join(e.servers[0].dir, "join-token"))
	if err != nil {
		t.Fatal(err)
	}
	e.token = strings.TrimSpace(string(token))
}

func (e *chaosEnv) serverArgs(s *chaosServer, dir string) []string {
	return []string{"server", "--no-agent", "--name", s.name, "--data-dir", dir, "--listen", "0.0.0.0:6443",
		"--advertise-address", s.ip, "--tls-san", "127.0.0.1", "--gossip-profile", "lan", "--log-level", "info"}
}

// runServer starts s's container (removing an earlier one of the name)
// and waits until it serves.
func (e *chaosEnv) runServer(s *chaosServer) {
	t := e.t
	t.Helper()
	_, _ = e.docker("rm", "-f", s.container)
	_ = os.Remove(filepath.Join(s.dir, "admin.kubeconfig"))
	e.mustDocker(append([]string{"run", "-d", "--name", s.container, "--label", mhRunLabel + "=" + e.run,
		"--network", e.network, "--ip", s.ip, "-v", e.dir + ":" + e.dir, e.image}, s.args...)...)
	e.waitServing(s)
}

// waitServing waits for s's admin.kubeconfig and for s to answer a read.
func (e *chaosEnv) waitServing(s *chaosServer) {
	t := e.t
	t.Helper()
	kc := filepath.Join(s.dir, "admin.kubeconfig")
	mhEventually(t, chaosWait, s.name+"'s admin.kubeconfig", func() error {
		if fi, err := os.Stat(kc); err != nil || fi.Size() == 0 {
			return fmt.Errorf("no %s yet", kc)
		}
		return nil
	})
	if e.baseCfg.Token == "" {
		cfg, err := client.LoadKubeconfigFrom([]string{kc})
		if err != nil {
			t.Fatal(err)
		}
		e.baseCfg = client.Config{CAPEM: cfg.CAPEM, Token: cfg.Token, Timeout: 5 * time.Second, ResourceFor: resources.ForObject}
	}
	if s.api == nil {
		cfg := e.baseCfg
		cfg.Server = s.url()
		h, err := client.NewHTTP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s.api = h
		t.Cleanup(h.Close)
	}
	mhEventually(t, chaosWait, s.name+" serves the API", func() error {
		_, _, err := s.api.List(e.ctx, resources.Namespaces, "", client.ListOptions{})
		if err != nil {
			s.api.Close()
		}
		return err
	})
}

// writeKubeconfig writes the admin kubeconfig with server https://ip:6443.
func (e *chaosEnv) writeKubeconfig(ip, name string) string {
	data, err := os.ReadFile(filepath.Join(e.servers[0].dir, "admin.kubeconfig"))
	if err != nil {
		e.t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "server: https://") {
			lines[i] = l[:strings.Index(l, "server:")] + "server: https://" + ip + ":6443"
		}
	}
	path := filepath.Join(e.dir, name)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// startChaosAgents runs the agents, agent i joined to server i mod 3;
// agent 1 on the Docker runtime, the others fake.
func (e *chaosEnv) startChaosAgents() {
	for i := range chaosNodes {
		name := fmt.Sprintf("everynode-mh-%s-agent%d", e.run, i+1)
		node := fmt.Sprintf("chaos-%s-n%d", e.run, i+1)
		ip := e.ip(20 + i)
		srv := i % 3
		e.agents, e.nodes, e.ips, e.agentOf = append(e.agents, name), append(e.nodes, node), append(e.ips, ip), append(e.agentOf, srv)
		rt, mounts := "fake", []string{"-v", e.dir + ":" + e.dir}
		if i == 0 {
			rt, mounts = "docker", append(mounts, "-v", "/var/run/docker.sock:/var/run/docker.sock")
		}
		args := []string{"run", "-d", "--name", name, "--label", mhRunLabel + "=" + e.run, "--network", e.network, "--ip", ip}
		args = append(append(args, mounts...), e.image, "agent", "--server", e.servers[srv].url(), "--token", e.token,
			"--name", node, "--runtime", rt, "--data-dir", fmt.Sprintf("%s/agent%d", e.dir, i+1), "--gossip-profile", "lan")
		e.mustDocker(args...)
	}
}

// any runs fn against the first server that answers it without a
// transport error (a Status from etcd counts as an answer).
func (e *chaosEnv) any(fn func(h *client.HTTP) error) error {
	var errs []error
	for _, s := range e.servers {
		err := fn(s.api)
		if err == nil {
			return nil
		}
		var st apierrors.APIStatus
		if errors.As(err, &st) && !apierrors.IsServiceUnavailable(err) && !apierrors.IsTimeout(err) && !apierrors.IsServerTimeout(err) {
			return err
		}
		s.api.Close()
		errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
	}
	return errors.Join(errs...)
}

func (e *chaosEnv) nodeReady(node string) func() error {
	return func() error {
		return e.any(func(h *client.HTTP) error {
			obj, err := h.Get(e.ctx, resources.Nodes, "", node)
			if err != nil {
				return err
			}
			if st := nodeReadyStatus(obj.(*corev1.Node)); st != corev1.ConditionTrue {
				return fmt.Errorf("node %s Ready=%s", node, st)
			}
			return nil
		})
	}
}

func (e *chaosEnv) daemonSet() (*appsv1.DaemonSet, error) {
	var ds *appsv1.DaemonSet
	err := e.any(func(h *client.HTTP) error {
		obj, err := h.Get(e.ctx, resources.DaemonSets, "default", chaosDS)
		if err == nil {
			ds = obj.(*appsv1.DaemonSet)
		}
		return err
	})
	return ds, err
}

// livePods lists the DaemonSet's pods not being deleted, by node.
func (e *chaosEnv) livePods() (map[string][]*corev1.Pod, error) {
	var out map[string][]*corev1.Pod
	err := e.any(func(h *client.HTTP) error {
		items, _, err := h.List(e.ctx, resources.Pods, "default", client.ListOptions{LabelSelector: "app=" + chaosDS})
		if err != nil {
			return err
		}
		out = map[string][]*corev1.Pod{}
		for _, it := range items {
			if p := it.(*corev1.Pod); p.DeletionTimestamp == nil {
				out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p)
			}
		}
		return nil
	})
	return out, err
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// rolledOut is nil once the DaemonSet's current generation runs on every
// node: one live pod per node, of that generation, Running and Ready, and
// the DaemonSet's status says so. It returns the pods by node.
func (e *chaosEnv) rolledOut() (map[string]*corev1.Pod, error) {
	ds, err := e.daemonSet()
	if err != nil {
		return nil, err
	}
	st := ds.Status
	if st.ObservedGeneration < ds.Generation || st.DesiredNumberScheduled != chaosNodes || st.UpdatedNumberScheduled != chaosNodes ||
		st.NumberReady != chaosNodes || st.NumberAvailable != chaosNodes || st.NumberUnavailable != 0 {
		return nil, fmt.Errorf("generation %d, status %+v", ds.Generation, st)
	}
	byNode, err := e.livePods()
	if err != nil {
		return nil, err
	}
	gen := strconv.FormatInt(ds.Generation, 10)
	out := map[string]*corev1.Pod{}
	for _, n := range e.nodes {
		ps := byNode[n]
		if len(ps) != 1 {
			return nil, fmt.Errorf("node %s has %d live pods", n, len(ps))
		}
		p := ps[0]
		if g := p.Labels["pod-template-generation"]; g != gen {
			return nil, fmt.Errorf("pod %s on %s is of generation %s, want %s", p.Name, n, g, gen)
		}
		if p.Status.Phase != corev1.PodRunning || !podReady(p) {
			return nil, fmt.Errorf("pod %s on %s is %s, ready=%v", p.Name, n, p.Status.Phase, podReady(p))
		}
		out[n] = p
	}
	if len(byNode) != chaosNodes {
		return nil, fmt.Errorf("pods on %d nodes, want %d", len(byNode), chaosNodes)
	}
	return out, nil
}

func (e *chaosEnv) waitRolledOut(t *testing.T, what string) map[string]*corev1.Pod {
	t.Helper()
	var pods map[string]*corev1.Pod
	mhEventually(t, chaosWait, what+" complete", func() (err error) {
		pods, err = e.rolledOut()
		return err
	})
	return pods
}

// rollout changes the pod template (an annotation), which starts a rollout.
func (e *chaosEnv) rollout(t *testing.T, i int) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"chaos/rollout":"%d"}}}}}`, i))
	mhEventually(t, chaosWait, "patch the DaemonSet", func() error {
		return e.any(func(h *client.HTTP) error {
			_, err := h.Patch(e.ctx, resources.DaemonSets, "default", chaosDS, types.MergePatchType, patch, client.WriteOptions{}, "")
			return err
		})
	})
}

// createNS creates namespace name through h.
func createNS(ctx context.Context, h client.Interface, name string) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	resources.Namespaces.SetTypeMeta(ns)
	obj, err := h.Create(ctx, ns, client.WriteOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Namespace), nil
}

// ---- containers ----

// running reports whether the container runs, and since when.
func (e *chaosEnv) running(container string) (bool, string) {
	out, err := e.docker("inspect", "-f", "{{.State.Running}} {{.State.StartedAt}}", container)
	if err != nil {
		return false, ""
	}
	f := strings.Fields(out)
	return len(f) == 2 && f[0] == "true", f[len(f)-1]
}

// leading reports whether s's current run leads the controllers: its log
// since its start says "leading" after the last loss of leadership.
func (e *chaosEnv) leading(s *chaosServer) bool {
	up, since := e.running(s.container)
	if !up {
		return false
	}
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "logs", "--since", since, s.container).CombinedOutput()
	if err != nil {
		return false
	}
	log := string(out)
	lead := strings.LastIndex(log, "leading: controllers start")
	return lead >= 0 && lead > strings.LastIndex(log, "leadership ended") && lead > strings.LastIndex(log, "leader session lost")
}

// leader is the one server leading the controllers.
func (e *chaosEnv) leader() (*chaosServer, error) {
	var out []*chaosServer
	for _, s := range e.servers {
		if e.leading(s) {
			out = append(out, s)
		}
	}
	if len(out) != 1 {
		var names []string
		for _, s := range out {
			names = append(names, s.name)
		}
		return nil, fmt.Errorf("servers leading the controllers: %v, want one", names)
	}
	return out[0], nil
}

func (e *chaosEnv) waitLeader(t *testing.T) *chaosServer {
	t.Helper()
	var l *chaosServer
	mhEventually(t, chaosWait, "one server leads the controllers", func() (err error) {
		l, err = e.leader()
		return err
	})
	return l
}

func (e *chaosEnv) kill(s *chaosServer) {
	e.t.Helper()
	e.mustDocker("kill", "--signal", "KILL", s.container)
}

// restart starts a stopped server container with its unchanged command line.
func (e *chaosEnv) restart(s *chaosServer) {
	e.t.Helper()
	e.mustDocker("start", s.container)
	e.waitServing(s)
}

// agentStarts is each agent container's start time, to prove none restarted.
func (e *chaosEnv) agentStarts() map[string]string {
	out := map[string]string{}
	for _, a := range e.agents {
		up, since := e.running(a)
		if !up {
			e.t.Fatalf("agent container %s is not running", a)
		}
		out[a] = since
	}
	return out
}

func (e *chaosEnv) checkAgentsNotRestarted(t *testing.T, before map[string]string) {
	t.Helper()
	for a, since := range before {
		if up, now := e.running(a); !up || now != since {
			t.Errorf("agent %s: running=%v started %s, want still running since %s", a, up, now, since)
		}
	}
}

// dockerDaemon is the ID of agent 1's (Docker runtime) daemon container;
// it fails unless exactly one runs.
func (e *chaosEnv) dockerDaemon() (string, error) {
	out, err := e.docker("ps", "-q", "--no-trunc", "--filter", "label="+mhNodeLabel+"="+e.nodes[0])
	if err != nil {
		return "", err
	}
	ids := strings.Fields(out)
	if len(ids) != 1 {
		return "", fmt.Errorf("node %s runs %d daemon containers, want 1", e.nodes[0], len(ids))
	}
	return ids[0], nil
}

// ---- pod monitor ----

// podMonitor watches the DaemonSet's pods through whichever server answers
// and records every moment a node had two live pods (a duplicate).
type podMonitor struct {
	e          *chaosEnv
	mu         sync.Mutex
	pods       map[types.UID]*corev1.Pod
	duplicates []string
	events     int
	relists    int
}

func newPodMonitor(e *chaosEnv) *podMonitor {
	return &podMonitor{e: e, pods: map[types.UID]*corev1.Pod{}}
}

func (m *podMonitor) run(ctx context.Context) {
	sel := client.ListOptions{LabelSelector: "app=" + chaosDS}
	rv := ""
	for ctx.Err() == nil {
		if rv == "" {
			var items []client.Object
			err := m.e.any(func(h *client.HTTP) (err error) {
				items, rv, err = h.List(ctx, resources.Pods, "default", sel)
				return err
			})
			if err != nil {
				rv = ""
				sleepCtx(ctx, time.Second)
				continue
			}
			m.mu.Lock()
			m.relists++
			m.pods = map[types.UID]*corev1.Pod{}
			for _, it := range items {
				p := it.(*corev1.Pod)
				m.pods[p.UID] = p
			}
			m.checkLocked("list")
			m.mu.Unlock()
		}
		rv = m.watchOnce(ctx, sel, rv)
	}
}

// watchOnce watches from rv through one server for at most 20 s and returns
// the version to continue from ("" to list again).
func (m *podMonitor) watchOnce(ctx context.Context, sel client.ListOptions, rv string) string {
	for _, s := range m.e.servers {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		opts := sel
		opts.ResourceVersion, opts.TimeoutSeconds = rv, 15
		w, err := s.api.Watch(wctx, resources.Pods, "default", opts)
		if err != nil {
			cancel()
			s.api.Close()
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				return ""
			}
			continue
		}
		got := false
		for ev := range w.ResultChan() {
			got = true
			if ev.Type == watch.Error {
				w.Stop()
				cancel()
				return ""
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			m.mu.Lock()
			m.events++
			switch ev.Type {
			case watch.Deleted:
				delete(m.pods, p.UID)
			case watch.Added, watch.Modified:
				m.pods[p.UID] = p
			}
			m.checkLocked(string(ev.Type) + " " + p.Name)
			m.mu.Unlock()
			rv = p.ResourceVersion
		}
		w.Stop()
		cancel()
		if !got && wctx.Err() != nil && ctx.Err() == nil {
			// A watch that delivered nothing until our deadline may hang
			// on a dead server: try the next one from the same version.
			s.api.Close()
			continue
		}
		return rv
	}
	sleepCtx(ctx, time.Second)
	return rv
}

// checkLocked records any node with two live pods.
func (m *podMonitor) checkLocked(at string) {
	live := map[string][]string{}
	for _, p := range m.pods {
		if p.DeletionTimestamp == nil {
			live[p.Spec.NodeName] = append(live[p.Spec.NodeName], p.Name)
		}
	}
	for n, ps := range live {
		if len(ps) > 1 {
			sort.Strings(ps)
			m.duplicates = append(m.duplicates, fmt.Sprintf("%s: node %s has live pods %v", at, n, ps))
		}
	}
}

func (m *podMonitor) dups() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.duplicates...)
}

func (m *podMonitor) report(t *testing.T) {
	d := m.dups()
	m.mu.Lock()
	ev, rl := m.events, m.relists
	m.mu.Unlock()
	t.Logf("MEASURED: pod monitor saw %d watch events (%d lists): %d moments with a duplicate pod", ev, rl, len(d))
	for _, s := range d {
		t.Errorf("duplicate: %s", s)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// ---- scenarios ----

// partition cuts a server that does not lead the controllers off the
// network (it keeps only its loopback): a write sent to it is refused with
// a Status, its agent fails over to the others and gets a new pod running,
// and after the heal every server holds the same objects and the refused
// write is nowhere.
func (e *chaosEnv) partition(t *testing.T) {
	l := e.waitLeader(t)
	var cut *chaosServer
	idx := 0
	for i := len(e.servers) - 1; i >= 0; i-- {
		if e.servers[i] != l {
			cut, idx = e.servers[i], i
			break
		}
	}
	var agentNodes []string
	for i, srv := range e.agentOf {
		if srv == idx {
			agentNodes = append(agentNodes, e.nodes[i])
		}
	}
	starts := e.agentStarts()
	before, err := e.rolledOut()
	if err != nil {
		t.Fatal(err)
	}
	local := e.writeKubeconfig("127.0.0.1", "local.kubeconfig")

	e.mustDocker("network", "disconnect", e.network, cut.container)
	cutAt := time.Now()
	t.Logf("partitioned %s (its agents' nodes: %v); %s leads the controllers", cut.name, agentNodes, l.name)

	// The agent's own pod is deleted: its replacement runs only if the
	// agent reaches the cluster through another server.
	for _, n := range agentNodes {
		name := before[n].Name
		mhEventually(t, chaosWait, "delete pod "+name, func() error {
			return e.any(func(h *client.HTTP) error {
				_, err := h.Delete(e.ctx, resources.Pods, "default", name, metav1.DeleteOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return err
			})
		})
	}
	var after map[string]*corev1.Pod
	took := mhEventually(t, chaosWait, "the partitioned server's agents run new pods", func() (err error) {
		after, err = e.rolledOut()
		return err
	})
	for _, n := range agentNodes {
		if after[n].UID == before[n].UID {
			t.Fatalf("node %s: pod %s not replaced", n, before[n].Name)
		}
	}
	t.Logf("MEASURED: agent failover: the partitioned server's agents ran replacement pods %s after the partition (%s after their old pods were deleted)",
		time.Since(cutAt).Round(100*time.Millisecond), took.Round(100*time.Millisecond))

	// The cut-off server answers on its loopback, and refuses the write.
	refusedAt := time.Now()
	nsFile := filepath.Join(e.dir, "partitioned-ns.yaml")
	if err := os.WriteFile(nsFile, []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: written-while-partitioned\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := e.execCLI(cut, local, "apply", "-f", nsFile)
	if err == nil || !strings.Contains(out, chaosNoQuorum) {
		t.Fatalf("write to the partitioned server: err=%v, output:\n%s\nwant it refused with %q", err, out, chaosNoQuorum)
	}
	t.Logf("MEASURED: the partitioned server refused a write after %s: %s", time.Since(refusedAt).Round(100*time.Millisecond), strings.TrimSpace(out))
	// The majority writes meanwhile.
	if err := e.any(func(h *client.HTTP) error {
		_, err := createNS(e.ctx, h, "written-by-majority")
		return err
	}); err != nil {
		t.Fatalf("write to the majority: %v", err)
	}

	e.mustDocker("network", "connect", "--ip", cut.ip, e.network, cut.container)
	healAt := time.Now()
	e.waitServing(cut)
	mhEventually(t, chaosWait, "every server holds the same objects", e.sameOnEveryServer)
	t.Logf("MEASURED: after the heal every server agreed %s later", time.Since(healAt).Round(100*time.Millisecond))
	for _, s := range e.servers {
		if _, err := s.api.Get(e.ctx, resources.Namespaces, "", "written-while-partitioned"); !apierrors.IsNotFound(err) {
			t.Errorf("%s: the refused write: %v, want NotFound", s.name, err)
		}
		if _, err := s.api.Get(e.ctx, resources.Namespaces, "", "written-by-majority"); err != nil {
			t.Errorf("%s: the majority's write: %v", s.name, err)
		}
	}
	e.checkAgentsNotRestarted(t, starts)
}

// execCLI runs the everynode CLI inside server s's container against
// kubeconfig kc (which names 127.0.0.1, reachable even when s is cut off).
func (e *chaosEnv) execCLI(s *chaosServer, kc string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
	defer cancel()
	if kc != "" {
		args = append(args, "--kubeconfig", kc)
	}
	cmd := exec.CommandContext(ctx, "docker", append([]string{"exec", s.container, "/everynode"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// sameOnEveryServer is nil when every server lists the same namespaces,
// DaemonSets and pods (names, UIDs and resourceVersions) — read linearizably,
// so equal lists mean equal stores up to the read.
func (e *chaosEnv) sameOnEveryServer() error {
	var ref string
	for _, s := range e.servers {
		var b strings.Builder
		for _, r := range []*resources.Resource{resources.Namespaces, resources.DaemonSets, resources.Pods} {
			items, _, err := s.api.List(e.ctx, r, "", client.ListOptions{})
			if err != nil {
				s.api.Close()
				return fmt.Errorf("%s: %w", s.name, err)
			}
			var lines []string
			for _, it := range items {
				m, err := metaOf(it)
				if err != nil {
					return err
				}
				// Pods' status changes all the time; their identity does not.
				rv := m.GetResourceVersion()
				if r == resources.Pods {
					rv = ""
				}
				lines = append(lines, fmt.Sprintf("%s %s/%s %s %s", r.Kind, m.GetNamespace(), m.GetName(), m.GetUID(), rv))
			}
			sort.Strings(lines)
			b.WriteString(strings.Join(lines, "\n"))
		}
		if ref == "" {
			ref = b.String()
		} else if b.String() != ref {
			return fmt.Errorf("%s lists other objects than %s", s.name, e.servers[0].name)
		}
	}
	return nil
}

func metaOf(o client.Object) (metav1.Object, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", o)
	}
	return m, nil
}

// quorumLoss SIGKILLs two of the three servers: the third refuses writes
// with a Status; the agents keep their pods (the Docker agent's daemon
// container runs on, untouched); when one killed server returns the
// cluster writes again, and once both are back nothing was lost.
func (e *chaosEnv) quorumLoss(t *testing.T) {
	starts := e.agentStarts()
	before, err := e.rolledOut()
	if err != nil {
		t.Fatal(err)
	}
	daemon, err := e.dockerDaemon()
	if err != nil {
		t.Fatal(err)
	}
	keep := e.servers[2]
	killed := []*chaosServer{e.servers[0], e.servers[1]}
	for _, s := range killed {
		e.kill(s)
	}
	killedAt := time.Now()
	t.Logf("SIGKILLed %s and %s; %s remains", killed[0].name, killed[1].name, keep.name)

	var refused error
	mhEventually(t, chaosWait, "a write to "+keep.name+" refused for want of a quorum", func() error {
		h := keepAPI(keep, 20*time.Second, e)
		defer h.Close()
		_, err := createNS(e.ctx, h, "written-without-quorum")
		if err == nil {
			return errors.New("a write without quorum was accepted")
		}
		if !strings.Contains(err.Error(), chaosNoQuorum) {
			return fmt.Errorf("write without quorum: %v, want a Status saying %q", err, chaosNoQuorum)
		}
		refused = err
		return nil
	})
	if !apierrors.IsServiceUnavailable(refused) {
		t.Errorf("write without quorum: %v is not a 503 Status", refused)
	}
	t.Logf("MEASURED: write without quorum refused (%s after the kills): %v", time.Since(killedAt).Round(100*time.Millisecond), refused)

	// The agents carry on: the Docker daemon container keeps running.
	time.Sleep(5 * time.Second) // let any wrong reaction of an agent show
	if id, err := e.dockerDaemon(); err != nil || id != daemon {
		t.Errorf("daemon container during quorum loss: %s %v, want %s running", id, err, daemon)
	}

	back := time.Now()
	e.restart(killed[0])
	mhEventually(t, chaosWait, "writes accepted again", func() error {
		_, err := createNS(e.ctx, keep.api, "written-after-quorum")
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	t.Logf("MEASURED: writes accepted again %s after docker start of %s", time.Since(back).Round(100*time.Millisecond), killed[0].name)
	e.restart(killed[1])
	after := e.waitRolledOut(t, "reconvergence after the quorum loss")
	for n, p := range before {
		if after[n].UID != p.UID || restarts(after[n]) != restarts(p) {
			t.Errorf("node %s: pod %s restarts %d, want the same pod %s, restarts %d", n, after[n].UID, restarts(after[n]), p.UID, restarts(p))
		}
	}
	if id, err := e.dockerDaemon(); err != nil || id != daemon {
		t.Errorf("daemon container after the quorum loss: %s %v, want %s running", id, err, daemon)
	}
	mhEventually(t, chaosWait, "every server holds the same objects", e.sameOnEveryServer)
	e.checkAgentsNotRestarted(t, starts)
}

// keepAPI is a client of s with a longer timeout: without quorum etcd
// answers only after its request timeout.
func keepAPI(s *chaosServer, timeout time.Duration, e *chaosEnv) *client.HTTP {
	cfg := e.baseCfg
	cfg.Server, cfg.Timeout = s.url(), timeout
	h, err := client.NewHTTP(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// leaderKills SIGKILLs the server leading the controllers during each of n
// rollouts, then starts it again with its unchanged command line.
func (e *chaosEnv) leaderKills(t *testing.T, n int) {
	var takeovers []time.Duration
	for i := 1; i <= n; i++ {
		l := e.waitLeader(t)
		ds, err := e.daemonSet()
		if err != nil {
			t.Fatal(err)
		}
		e.rollout(t, i)
		// Kill once the rollout is under way: a pod of the new generation exists.
		want := strconv.FormatInt(ds.Generation+1, 10)
		mhEventually(t, chaosWait, "rollout under way", func() error {
			byNode, err := e.livePods()
			if err != nil {
				return err
			}
			for _, ps := range byNode {
				for _, p := range ps {
					if p.Labels["pod-template-generation"] == want {
						return nil
					}
				}
			}
			return errors.New("no pod of the new generation yet")
		})
		e.kill(l)
		killed := time.Now()
		var next *chaosServer
		mhEventually(t, chaosWait, "another server leads", func() (err error) {
			next, err = e.leader()
			return err
		})
		took := time.Since(killed)
		takeovers = append(takeovers, took)
		t.Logf("kill %d/%d: SIGKILL of %s during rollout %d; %s leads %s later", i, n, l.name, i, next.name, took.Round(100*time.Millisecond))
		e.restart(l)
		e.waitRolledOut(t, fmt.Sprintf("rollout %d", i))
	}
	sort.Slice(takeovers, func(a, b int) bool { return takeovers[a] < takeovers[b] })
	t.Logf("MEASURED: %d SIGKILLs of the leading server during rollouts: takeover min %s, median %s, max %s; every rollout completed; duplicates so far: %d",
		n, takeovers[0].Round(100*time.Millisecond), takeovers[len(takeovers)/2].Round(100*time.Millisecond),
		takeovers[len(takeovers)-1].Round(100*time.Millisecond), len(e.mon.dups()))
}

// restore saves a snapshot on one server, writes after it, stops every
// server, restores the snapshot onto a fresh data dir as the first server of
// a new cluster, lets the others join it from fresh data dirs, and checks
// that the agents' pods run again, the DaemonSet's status converges, the
// objects of the snapshot keep their UIDs and resourceVersions, the later
// write is gone, and new writes get later resourceVersions.
func (e *chaosEnv) restore(t *testing.T) {
	before, err := e.rolledOut()
	if err != nil {
		t.Fatal(err)
	}
	var marker *corev1.Namespace
	if err := e.any(func(h *client.HTTP) (err error) {
		marker, err = createNS(e.ctx, h, "before-snapshot")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	src := e.servers[1]
	out, err := e.execCLI(src, "", "etcd", "snapshot", "save", "--data-dir", src.dir, "chaos")
	_ = out
	if err != nil {
		t.Fatalf("snapshot save: %v", err)
	}
	snap := filepath.Join(src.dir, "snapshots", "chaos.db")
	if _, err := os.Stat(snap); err != nil {
		t.Fatalf("snapshot save: %v\n%s", err, out)
	}
	if err := e.any(func(h *client.HTTP) error {
		_, err := createNS(e.ctx, h, "after-snapshot")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	starts := e.agentStarts()

	for _, s := range e.servers {
		e.kill(s)
	}
	restoredAt := time.Now()
	// The first server's key material, then the snapshot, into a fresh dir.
	first := e.servers[0]
	fresh := first.dir + "-restored"
	if err := os.MkdirAll(fresh, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.crt", "ca.key", "cluster-secret", "encryption-keys.json"} {
		data, err := os.ReadFile(filepath.Join(first.dir, f))
		if errors.Is(err, os.ErrNotExist) && f == "encryption-keys.json" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(fresh, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
	res, err := exec.CommandContext(ctx, e.bin, "etcd", "snapshot", "restore", snap, "--data-dir", fresh,
		"--cluster-init", "--name", first.name, "--advertise-address", first.ip).CombinedOutput()
	cancel()
	if err != nil {
		t.Fatalf("snapshot restore: %v\n%s", err, res)
	}
	t.Logf("%s", strings.TrimSpace(string(res)))
	first.dir = fresh
	first.args = e.serverArgs(first, fresh)
	e.runServer(first)
	for _, s := range e.servers[1:] {
		s.dir += "-restored"
		s.args = append(e.serverArgs(s, s.dir), "--join", first.url(), "--token-file", filepath.Join(fresh, "join-token"))
		e.runServer(s)
	}
	after := e.waitRolledOut(t, "reconvergence after the restore")
	t.Logf("MEASURED: restore: all servers down, restored and re-formed, DaemonSet converged %s after the servers were killed",
		time.Since(restoredAt).Round(100*time.Millisecond))
	for n, p := range before {
		if after[n].UID != p.UID {
			t.Errorf("node %s: pod %s after the restore, want the pod of the snapshot %s", n, after[n].UID, p.UID)
		}
	}
	if id, err := e.dockerDaemon(); err != nil {
		t.Errorf("daemon container after the restore: %s %v", id, err)
	}
	for _, s := range e.servers {
		obj, err := s.api.Get(e.ctx, resources.Namespaces, "", marker.Name)
		if err != nil {
			t.Fatalf("%s: %s after the restore: %v", s.name, marker.Name, err)
		}
		got := obj.(*corev1.Namespace)
		if got.UID != marker.UID || got.ResourceVersion != marker.ResourceVersion {
			t.Errorf("%s: %s is uid %s rv %s, want uid %s rv %s", s.name, marker.Name, got.UID, got.ResourceVersion, marker.UID, marker.ResourceVersion)
		}
		if _, err := s.api.Get(e.ctx, resources.Namespaces, "", "after-snapshot"); !apierrors.IsNotFound(err) {
			t.Errorf("%s: a namespace written after the snapshot: %v, want NotFound", s.name, err)
		}
	}
	var later *corev1.Namespace
	mhEventually(t, chaosWait, "a write after the restore", func() error {
		return e.any(func(h *client.HTTP) (err error) {
			later, err = createNS(e.ctx, h, "after-restore")
			return err
		})
	})
	a, _ := strconv.ParseInt(marker.ResourceVersion, 10, 64)
	b, _ := strconv.ParseInt(later.ResourceVersion, 10, 64)
	if b <= a {
		t.Errorf("a write after the restore got resourceVersion %s, not after the snapshot's %s", later.ResourceVersion, marker.ResourceVersion)
	}
	// The restored cluster works: the controllers and every agent roll the
	// DaemonSet out once more.
	rolled := time.Now()
	e.rollout(t, 1000)
	e.waitRolledOut(t, "a rollout on the restored cluster")
	t.Logf("MEASURED: a rollout on the restored cluster completed in %s", time.Since(rolled).Round(100*time.Millisecond))
	mhEventually(t, chaosWait, "every server holds the same objects", e.sameOnEveryServer)
	e.checkAgentsNotRestarted(t, starts)
}
