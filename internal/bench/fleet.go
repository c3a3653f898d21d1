package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/resources"
)

// MaxGossipNodes is the largest fleet run with gossip: a thousand memberlist
// members in one process, each probing every 300 ms on two shared cores,
// measure the process, not the protocol.
const MaxGossipNodes = 200

// DefaultAgentIdle is how long the separate agent process idles before its
// RSS is read: the agent unmaps the executable's pages 5 s after it starts
// and maps back, over the next minutes, those its periodic work runs (Node
// status, gossip push/pull, the runtime's forced collection every 2
// minutes), so an earlier reading would undercount what it holds.
const DefaultAgentIdle = 2 * time.Minute

// Namespace and name of the benchmark DaemonSet.
const (
	Namespace = "default"
	DSName    = "bench-daemon"
)

// Run runs the fleet benchmark. It cleans up everything it started,
// child processes included, on every return.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if cfg.Nodes < 1 {
		return nil, errors.New("bench: Nodes must be at least 1")
	}
	if cfg.AgentProcs < 0 || cfg.CPULoad < 0 {
		return nil, errors.New("bench: AgentProcs and CPULoad must not be negative")
	}
	if cfg.RolloutUnreachable < 0 || cfg.RolloutUnreachable > 50 {
		return nil, errors.New("bench: RolloutUnreachable must be a percentage from 0 to 50")
	}
	if (cfg.AgentProcs > 0 || cfg.CPULoad > 0) && cfg.AgentsCommand == nil {
		return nil, errors.New("bench: AgentProcs and CPULoad need AgentsCommand")
	}
	if cfg.AgentsCPUProfile != "" && (cfg.AgentProcs == 0 || cfg.IdleCPU > 0) {
		return nil, errors.New("bench: AgentsCPUProfile needs AgentProcs and cannot be combined with IdleCPU (the profile would run in the idle window)")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.AgentIdle <= 0 {
		cfg.AgentIdle = DefaultAgentIdle
	}
	procs := min(cfg.AgentProcs, cfg.Nodes)
	res = &Result{Nodes: cfg.Nodes, Started: time.Now().UTC(), LoadAvgStart: loadAvg(), AgentProcs: procs,
		CPULoad: cfg.CPULoad, SoakS: cfg.Soak.Seconds()}
	useGossip := cfg.Gossip || cfg.Detect
	if useGossip && cfg.Nodes > MaxGossipNodes {
		useGossip = false
		res.Notes = append(res.Notes, fmt.Sprintf("gossip and detect_s are measured only up to %d nodes: that many memberlist members on shared cores measure the scheduler, not the protocol", MaxGossipNodes))
	}
	res.Gossip = useGossip
	if useGossip {
		res.GossipProfile = cfg.GossipProfile
		if res.GossipProfile == "" {
			res.GossipProfile = gossip.ProfileLAN
		}
	}
	switch {
	case procs > 0:
		res.Notes = append(res.Notes, "with agent processes, server_rss_mb, the heap and the CPU seconds are the benchmark process alone: the server and the harness (its watches on Nodes and pods, in-process clients); agents_rss_mb sums the agent processes")
		if !useGossip {
			res.Notes = append(res.Notes, "without gossip, node liveness for the node lifecycle controller comes from the agent processes: an agent is alive while its process runs it")
		}
	default:
		res.Notes = append(res.Notes, "server and simulated agents share one process: server_rss_mb includes the agents; heap_mb - heap_agents_mb estimates the server's share")
		if !useGossip {
			res.Notes = append(res.Notes, "without gossip, node liveness for the node lifecycle controller comes from the agents this process runs")
		}
	}

	dir, err := os.MkdirTemp(cfg.Dir, "everynode-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: temp dir: %w", err)
	}
	defer os.RemoveAll(dir)

	log.Info("starting server", "gossip", useGossip, "memory_limit", cfg.MemoryLimit)
	var pingTimeout time.Duration
	if procs == 0 || cfg.Nodes > procs {
		pingTimeout = sharedPingTimeout
	}
	srv, err := startServer(ctx, dir, useGossip, cfg.GossipProfile, cfg.UnreachableGrace, pingTimeout, cfg.MemoryLimit, log.With("side", "server"))
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := srv.stop(); serr != nil && err == nil {
			log.Warn("server shutdown", "err", serr)
		}
	}()
	res.HeapServerIdleMB = heapMB()

	names := nodeNames(cfg.Nodes)
	victim := names[len(names)/2]
	target := srv.fleetTarget()
	target.realHeartbeat = cfg.IdleTraffic > 0 || cfg.IdleCPU > 0
	target.ownConns = cfg.OwnConnections
	res.OwnConnections = cfg.OwnConnections
	var fl agentFleet
	var pf *procFleet
	agentsCPU := func() float64 { return 0 }
	if procs > 0 {
		log.Info("starting agent processes", "processes", procs)
		if pf, err = spawnProcFleet(ctx, cfg.AgentsCommand, procs, childEnviron(procs, cfg.Nodes, runtime.NumCPU(), os.LookupEnv), srv.static, cfg.Timeout, log.With("side", "agent")); err != nil {
			return nil, err
		}
		defer pf.stop()
		fl, agentsCPU = pf, pf.cpuSeconds
	}
	log.Info("starting agents", "nodes", cfg.Nodes)
	t0 := time.Now()
	if pf != nil {
		err = pf.start(ctx, target, names)
	} else {
		var f *fleet
		if f, err = startFleet(ctx, target, names, log.With("side", "agent")); err == nil {
			defer f.stop()
			fl = f
		}
	}
	if err != nil {
		return nil, err
	}
	if err := waitNodesReady(ctx, srv.local, cfg.Nodes, cfg.Timeout); err != nil {
		return nil, err
	}
	res.RegisterS = time.Since(t0).Seconds()
	if useGossip {
		// Let gossip settle: every member known alive to the server, and
		// the join broadcasts retransmitted, before anything is timed.
		if err := waitMembers(ctx, srv, cfg.Nodes, cfg.Timeout); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(gossipSettle):
		}
	}
	res.HeapAgentsMB = heapMB() - res.HeapServerIdleMB
	log.Info("nodes ready", "nodes", cfg.Nodes, "s", res.RegisterS)
	rep, err := fl.report(ctx)
	if err != nil {
		return nil, err
	}
	res.Connections = rep.Dials
	if !cfg.OwnConnections && rep.Dials < cfg.Nodes {
		res.Notes = append(res.Notes, fmt.Sprintf("the simulated agents shared %d connections to the server; real nodes have one each, which costs the server more memory: --own-connections measures that", rep.Dials))
	}

	var load *procChild
	if cfg.CPULoad > 0 {
		log.Info("starting the CPU load", "goroutines", cfg.CPULoad)
		if load, err = startCPULoad(ctx, cfg.AgentsCommand, cfg.CPULoad, cfg.Timeout, log); err != nil {
			return nil, err
		}
		defer load.stop()
	}
	watch := startNotReadyWatch(ctx, srv, victim)
	endWatch := func() {
		if watch != nil {
			watch.end(res)
			watch = nil
		}
	}
	defer endWatch()

	if cfg.Measuring != nil {
		cfg.Measuring(true)
	}
	stopAgentsProfile, err := agentsProfile(ctx, pf, cfg.AgentsCPUProfile, log)
	if err != nil {
		return nil, err
	}
	defer stopAgentsProfile()
	cpu0, acpu0 := cpuSeconds(), agentsCPU()
	hist, err := converge(ctx, srv, fl, cfg, res, log)
	if err != nil {
		return nil, err
	}
	res.ConvergeCPUS, res.AgentsConvergeCPUS = cpuSeconds()-cpu0, agentsCPU()-acpu0
	if rep, err = fl.report(ctx); err != nil {
		return nil, err
	}
	res.ConvergeDials = rep.Dials - res.Connections
	res.ServerRSSMB = rssMB(os.Getpid())
	if kb, err := procStatusKB(os.Getpid(), "RssFile"); err == nil {
		res.ServerFileMB = float64(kb) / 1024
	}
	gm := readGoMem()
	res.ServerGo = &gm
	res.HeapMB = heapMB()
	res.ServerGoMB = goHeldMB()
	if pf != nil {
		m, err := pf.mem()
		if err != nil {
			return nil, err
		}
		res.AgentsRSSMB, res.AgentsAnonMB = m.rss, m.anon
	}
	if res.Writes, err = collectWrites(ctx, srv.etcd, hist.from, hist.to); err != nil {
		return nil, err
	}
	res.Writes.Ranges = hist.ranges
	res.Writes.summarise()

	pods := floorWork(res.Writes.seqs)
	log.Info("etcd floor: one create and one status update per pod, straight to etcd", "pods", len(pods))
	floor, conc, trials, err := srv.fixedFloor(ctx, pods)
	if err != nil {
		return nil, err
	}
	res.EtcdFloorS, res.EtcdFloorConcurrency = floor.Seconds(), conc
	for _, c := range floorConcurrencies(len(pods)) {
		res.EtcdFloorTrials = append(res.EtcdFloorTrials, FloorTrial{Writers: c, S: trials[c]})
	}
	if res.EtcdFloorS > 0 {
		res.Ratio = res.ConvergeS / res.EtcdFloorS
	}
	log.Info("etcd floor: replaying the convergence writes straight to etcd", "writes", res.Writes.Total)
	replay, err := srv.replay(ctx, res.Writes.seqs)
	if err != nil {
		return nil, err
	}
	res.EtcdReplayS = replay.Seconds()
	if res.EtcdReplayS > 0 {
		res.ReplayRatio = res.ConvergeS / res.EtcdReplayS
	}
	log.Info("floor", "s", res.EtcdFloorS, "writers", conc, "ratio", res.Ratio, "replay_s", res.EtcdReplayS, "replay_ratio", res.ReplayRatio)
	// Every pod status write of convergence has answered by now; the floor
	// made none.
	if err := fl.record(ctx, false); err != nil {
		return nil, err
	}
	if rep, err = fl.report(ctx); err != nil {
		return nil, err
	}
	res.StatusP50Ms, res.StatusP99Ms, res.StatusSamples = quantiles(rep.Samples)

	if err := fanout(ctx, srv, fl, cfg.Nodes, cfg.FanoutProfile, res, log); err != nil {
		return nil, err
	}

	if cfg.IdleTraffic > 0 {
		if err := idleTraffic(ctx, fl, cfg.IdleTraffic, cfg.IdleSettle, cfg.Nodes, res, log); err != nil {
			return nil, err
		}
	}

	if cfg.IdleCPU > 0 {
		if pf == nil {
			res.Notes = append(res.Notes, "idle CPU per agent is measured only with agent processes (--agent-procs)")
		} else if err := idleCPU(ctx, pf.pids(), cfg.Nodes, cfg.IdleCPU, pf.profiler(cfg.IdleCPUProfile, 0), res, log); err != nil {
			return nil, err
		}
	}

	if cfg.Rollout {
		cpu0, acpu0 := cpuSeconds(), agentsCPU()
		before, err := srv.etcd.Get(ctx, "/", clientv3.WithCountOnly())
		if err != nil {
			return nil, fmt.Errorf("bench: etcd revision: %w", err)
		}
		ranges0 := etcdRanges()
		if res.RolloutS, err = rollout(ctx, srv, cfg.Nodes, cfg.Timeout); err != nil {
			return nil, err
		}
		res.RolloutCPUS, res.AgentsRolloutCPUS = cpuSeconds()-cpu0, agentsCPU()-acpu0
		ranges := rangesSince(ranges0)
		after, err := srv.etcd.Get(ctx, "/", clientv3.WithCountOnly())
		if err != nil {
			return nil, fmt.Errorf("bench: etcd revision: %w", err)
		}
		ws, err := collectWrites(ctx, srv.etcd, before.Header.Revision, after.Header.Revision)
		if err != nil {
			return nil, err
		}
		ws.Ranges = ranges
		ws.summariseRollout(cfg.Nodes)
		res.RolloutWrites = &ws
		log.Info("rolled out", "s", res.RolloutS)
	}
	if cfg.Detect && useGossip {
		if res.DetectS, res.DetectMemberS, err = detect(ctx, srv, fl, victim, cfg.Timeout); err != nil {
			return nil, err
		}
		log.Info("detected", "s", res.DetectS, "member_dead_s", res.DetectMemberS)
	}
	if cfg.RolloutUnreachable > 0 {
		// Its stopped nodes are not false NotReady: stop counting first.
		endWatch()
		cpu0 := cpuSeconds()
		if err := rolloutUnreachable(ctx, srv, fl, names, victim, cfg, res, log); err != nil {
			return nil, err
		}
		res.RolloutUnreachableCPUS = cpuSeconds() - cpu0
		res.Notes = append(res.Notes, fmt.Sprintf("unreachable rollout: %d of %d nodes (%d%%) not yet updated were stopped once a fifth of the fleet ran the new image; unreachable-blocks %v", res.UnreachableNodes, cfg.Nodes, cfg.RolloutUnreachable, cfg.UnreachableBlocks))
	}
	if cfg.Measuring != nil {
		cfg.Measuring(false)
	}
	stopAgentsProfile()
	if cfg.Soak > 0 {
		log.Info("soaking: the fleet idles while Node readiness is watched", "for", cfg.Soak)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(cfg.Soak):
		}
	}
	if cfg.AgentProcess != nil {
		m, err := agentProcessRSS(ctx, srv, dir, cfg)
		if err != nil {
			return nil, err
		}
		res.AgentRSSMB, res.AgentAnonMB, res.AgentFileMB = m.rss, m.anon, m.file
		res.AgentIdleCPUMsPerS, res.AgentIdleWakeupsPerS, res.AgentIdleS = m.cpuMsPerS, m.wakeupsPerS, m.idleS
		log.Info("agent process", "rss_mb", res.AgentRSSMB, "idle_cpu_ms_per_s", res.AgentIdleCPUMsPerS, "wakeups_per_s", res.AgentIdleWakeupsPerS)
	}
	// Stopping the agents below makes their Nodes not Ready: stop
	// counting first, then the CPU load.
	endWatch()
	if useGossip {
		if rep, err = fl.report(ctx); err != nil {
			return nil, err
		}
		res.GossipLog = append(srv.glog.lines(), rep.GossipLog...)
		if len(res.GossipLog) > maxResultGossipLines {
			n := len(res.GossipLog) - maxResultGossipLines
			res.GossipLog = append(res.GossipLog[:maxResultGossipLines], fmt.Sprintf("(%d more lines left out)", n))
		}
	}
	if load != nil {
		load.stop()
		res.CPULoadCPUS = load.cpuSeconds()
	}
	// The server alone: stop the simulated agents, give their memory back,
	// and read the process again. The N Nodes and pods stay in etcd and in
	// the watch caches; the agents' connections and watch streams are gone.
	fl.stop()
	debug.FreeOSMemory()
	res.ServerAloneRSSMB = rssMB(os.Getpid())
	if kb, err := procStatusKB(os.Getpid(), "RssFile"); err == nil {
		res.ServerAloneFileMB = float64(kb) / 1024
	}
	res.ServerAloneHeapMB = heapMB()
	if cfg.HeapProfile != nil {
		if err := pprof.WriteHeapProfile(cfg.HeapProfile); err != nil {
			log.Warn("heap profile", "err", err)
		}
	}
	res.LoadAvgEnd = loadAvg()
	return res, nil
}

// daemonSet is the benchmark DaemonSet: one container on every simulated node.
func daemonSet() *appsv1.DaemonSet {
	labels := map[string]string{"app": DSName}
	maxUnavailable := intstr.FromString("10%")
	maxSurge := intstr.FromInt32(0)
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: DSName, Namespace: Namespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &maxUnavailable, MaxSurge: &maxSurge}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{NodeLabel: "true"},
					Containers: []corev1.Container{{
						Name: "daemon", Image: ImageV1, ImagePullPolicy: corev1.PullIfNotPresent,
						Resources: corev1.ResourceRequirements{},
					}},
				},
			},
		},
	}
}

// podReady reports whether a live pod is Running with Ready=True.
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// watchUntil watches r (from the current state) and calls f with every
// event until f reports done, ctx ends or timeout passes. start, when not
// nil, is called once the watch is established. A watch the server ends (a
// slow consumer's overflow) is resumed from the last resourceVersion seen,
// as an informer does.
func watchUntil(ctx context.Context, c client.Interface, r *resources.Resource, ns string, opts client.ListOptions, timeout time.Duration, start func() error, f func(watch.Event) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for resumes := 0; ; resumes++ {
		w, err := c.Watch(ctx, r, ns, opts)
		if err != nil {
			return fmt.Errorf("bench: watch %s: %w", r.Name, err)
		}
		if start != nil {
			if err := start(); err != nil {
				w.Stop()
				return err
			}
			start = nil
		}
		done, err := drain(ctx, w, r, f, &opts.ResourceVersion)
		w.Stop()
		if done || err != nil {
			return err
		}
		if resumes > 100 {
			return fmt.Errorf("bench: watch of %s keeps ending", r.Name)
		}
	}
}

// drain consumes w until f is done (true), an error, or the stream ends
// (false, nil); rv tracks the last resourceVersion seen.
func drain(ctx context.Context, w watch.Interface, r *resources.Resource, f func(watch.Event) (bool, error), rv *string) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("bench: waiting on %s: %w", r.Name, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			if ev.Type == watch.Error {
				return false, fmt.Errorf("bench: watch of %s: error event %v", r.Name, ev.Object)
			}
			if o, ok := ev.Object.(resources.Object); ok && o.GetResourceVersion() != "" {
				*rv = o.GetResourceVersion()
			}
			done, err := f(ev)
			if err != nil || done {
				return done, err
			}
		}
	}
}

// sharedPingTimeout is the API's HTTP/2 ping timeout when simulated agents
// share a process's connections. With the real agent's 1 s, a process of
// thousands of agents that answered a ping late (busy, or starved by the
// machine's other load) lost a connection carrying hundreds of their
// watches at once, and they all re-listed together: at 10,000 nodes on a
// loaded machine, thousands of re-lists during registration and
// convergence. A real node's late answer closes its own connection only.
const sharedPingTimeout = 5 * time.Second

// gossipSettle is how long a fleet with gossip idles after every member
// joined: memberlist retransmits each join about a dozen times at N=100.
const gossipSettle = 3 * time.Second

// waitMembers waits until the server's gossip member sees n alive agents.
func waitMembers(ctx context.Context, srv *benchServer, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		alive := 0
		for _, m := range srv.members.Members() {
			if m.Alive {
				alive++
			}
		}
		if alive >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %d of %d gossip members alive after %s", alive, n, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// maxResultGossipLines bounds Result.GossipLog.
const maxResultGossipLines = 5000

// maxNotReadyEvents bounds Result.FalseNotReadyEvents.
const maxNotReadyEvents = 200

// notReadyWatch counts false NotReady (see Result.FalseNotReady) and samples
// the load average while it runs.
type notReadyWatch struct {
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}
	// Set by the goroutines before done closes.
	count   int
	events  []string
	maxLoad float64
}

// startNotReadyWatch watches the simulated Nodes other than victim until end.
func startNotReadyWatch(ctx context.Context, srv *benchServer, victim string) *notReadyWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &notReadyWatch{start: time.Now(), cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		w.count, w.events = countNotReady(ctx, srv.local, victim, w.start)
	}()
	go func() {
		defer wg.Done()
		w.maxLoad = sampleLoad(ctx, 5*time.Second)
	}()
	go func() { wg.Wait(); close(w.done) }()
	return w
}

// end stops the watch and, when res is not nil, records what it saw.
func (w *notReadyWatch) end(res *Result) {
	w.cancel()
	<-w.done
	if res != nil {
		res.FalseNotReady, res.FalseNotReadyEvents, res.LoadAvgMax1 = w.count, w.events, w.maxLoad
		res.WatchedS = time.Since(w.start).Seconds()
	}
}

// sampleLoad returns the highest 1-minute load average seen every period
// until ctx ends.
func sampleLoad(ctx context.Context, period time.Duration) float64 {
	highest := loadAvg1()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return max(highest, loadAvg1())
		case <-t.C:
			highest = max(highest, loadAvg1())
		}
	}
}

// countNotReady counts, until ctx ends, how often a simulated Node other
// than victim went from Ready to not Ready, and lists those transitions and
// the recoveries (seconds since start, Ready condition's status and reason).
func countNotReady(ctx context.Context, c client.Interface, victim string, start time.Time) (int, []string) {
	ready := map[string]bool{}
	n := 0
	var events []string
	note := func(format string, a ...any) {
		if len(events) < maxNotReadyEvents {
			events = append(events, fmt.Sprintf("+%.1fs ", time.Since(start).Seconds())+fmt.Sprintf(format, a...))
		}
	}
	_ = watchUntil(ctx, c, resources.Nodes, "", client.ListOptions{LabelSelector: NodeLabel + "=true"}, 24*time.Hour, nil, func(ev watch.Event) (bool, error) {
		node, ok := ev.Object.(*corev1.Node)
		if !ok || node.Name == victim {
			return false, nil
		}
		now := ev.Type != watch.Deleted && nodeReady(node)
		was, seen := ready[node.Name]
		switch {
		case seen && was && !now:
			n++
			status, reason, msg := "deleted", "", ""
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && ev.Type != watch.Deleted {
					status, reason, msg = string(c.Status), c.Reason, c.Message
				}
			}
			note("%s Ready → %s (%s: %s)", node.Name, status, reason, msg)
		case seen && !was && now:
			note("%s Ready again", node.Name)
		}
		ready[node.Name] = now
		return false, nil
	})
	return n, events
}

// waitNodesReady waits until n simulated Nodes are Ready.
func waitNodesReady(ctx context.Context, c client.Interface, n int, timeout time.Duration) error {
	ready := map[string]bool{}
	count := 0
	return watchUntil(ctx, c, resources.Nodes, "", client.ListOptions{LabelSelector: NodeLabel + "=true"}, timeout, nil, func(ev watch.Event) (bool, error) {
		node, ok := ev.Object.(*corev1.Node)
		if !ok {
			return false, nil
		}
		now := ev.Type != watch.Deleted && nodeReady(node)
		if now != ready[node.Name] {
			ready[node.Name] = now
			if now {
				count++
			} else {
				count--
			}
		}
		return count >= n, nil
	})
}

// goHeldMB is the memory the Go runtime holds from the OS (heap spans in
// use or kept, stacks, runtime structures), less what it returned.
func goHeldMB() float64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.Sys-m.HeapReleased) / (1 << 20)
}

// heapMB is the live Go heap right after a collection (HeapAlloc then
// counts reachable objects only, not the fragmentation HeapInuse keeps).
func heapMB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// idleTrafficSettle is how long the fleet idles, by default, before idle traffic is
// counted: the pods' last status writes and the rollout controller's
// reactions are over, and a Node status period has begun.
const idleTrafficSettle = 5 * time.Second

// idleTraffic counts what the agents' sockets carry over d while nothing
// changes but the heartbeats, and sets the per-agent rates of res.
func idleTraffic(ctx context.Context, fl agentFleet, d, settle time.Duration, nodes int, res *Result, log *slog.Logger) error {
	if settle <= 0 {
		settle = idleTrafficSettle
	}
	log.Info("idling before counting idle traffic", "for", settle)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settle):
	}
	r0, err := fl.report(ctx)
	if err != nil {
		return err
	}
	t0 := time.Now()
	log.Info("counting idle traffic", "for", d)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
	}
	r1, err := fl.report(ctx)
	if err != nil {
		return err
	}
	res.IdleTrafficS = time.Since(t0).Seconds()
	idleRates(r1.Traffic.sub(r0.Traffic), res.IdleTrafficS, nodes, res)
	log.Info("idle traffic per agent", "in_bytes_per_s", res.IdleBytesPerSIn, "out_bytes_per_s", res.IdleBytesPerSOut)
	return nil
}

// agentsProfile starts a CPU profile of pf's first agent process written to
// path and returns what stops it (once; later calls do nothing). With no
// path it starts nothing.
func agentsProfile(ctx context.Context, pf *procFleet, path string, log *slog.Logger) (stop func(), err error) {
	if path == "" || pf == nil {
		return func() {}, nil
	}
	prof := pf.profiler(path, pprofDefaultHz) // the process is busy: pprof's default rate
	if err := prof(ctx, true); err != nil {
		return nil, fmt.Errorf("agents cpu profile: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			// Bounded like a child's stop: on an error path the child may be
			// wedged, and it writes the profile out when it stops anyway.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), childStopTimeout)
			defer cancel()
			if err := prof(sctx, false); err != nil {
				log.Warn("agents cpu profile", "err", err)
			}
		})
	}, nil
}
