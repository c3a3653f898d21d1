package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
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

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// MaxGossipNodes is the largest fleet run with gossip: a thousand memberlist
// members in one process, each probing every 300 ms on two shared cores,
// measure the process, not the protocol.
const MaxGossipNodes = 200

// DefaultAgentIdle is how long the separate agent process idles before its
// RSS is read.
const DefaultAgentIdle = 10 * time.Second

// Namespace and name of the benchmark DaemonSet.
const (
	Namespace = "default"
	DSName    = "bench-daemon"
)

// AgentTarget is what a separate agent process needs to reach the server.
type AgentTarget struct {
	// Server is the API's https URL.
	Server string
	// JoinToken is the cluster's join token (for "everynode agent --token").
	JoinToken string
	// CAPEM is the cluster CA; NodeToken the node credential of NodeName.
	CAPEM     []byte
	NodeToken string
	// NodeName is the name the process must use.
	NodeName string
	// DataDir is an empty directory for the process.
	DataDir string
}

// Config configures Run.
type Config struct {
	// Nodes is the number of simulated nodes (≥ 1).
	Nodes int
	// Gossip makes every simulated node a gossip member (LAN profile on
	// loopback) feeding the node lifecycle controller; only up to
	// MaxGossipNodes.
	Gossip bool
	// Rollout measures an image update with maxUnavailable 10%.
	Rollout bool
	// Detect measures failure detection of one killed node (needs gossip,
	// which it turns on up to MaxGossipNodes).
	Detect bool
	// AgentProcess, when set, builds the command of one agent process (fake
	// runtime) whose idle RSS is measured; nil skips agent_rss_mb.
	AgentProcess func(ctx context.Context, t AgentTarget) *exec.Cmd
	// Soak keeps the fleet running this long after the timed phases, so
	// FalseNotReady covers a longer window; 0: none.
	Soak time.Duration
	// AgentIdle is how long that process idles first (DefaultAgentIdle).
	AgentIdle time.Duration
	// Dir is where the temporary directory is made; "" is os.TempDir.
	Dir string
	// Timeout bounds each measured phase; 0 means 10 minutes.
	Timeout time.Duration
	// Measuring, when set, is called with true right before the DaemonSet
	// is created and with false after the last timed phase (rollout or
	// detect): the window a CPU profile should cover.
	Measuring func(on bool)
	// HeapProfile, when set, receives a heap profile of the server alone
	// (after the agents stopped).
	HeapProfile io.Writer
	// Logger; nil discards. Progress lines go to it at info level.
	Logger *slog.Logger
}

// Result is what a run measured. Durations are seconds, sizes MiB; zero
// means not measured (see Notes).
type Result struct {
	Nodes        int       `json:"nodes"`
	Gossip       bool      `json:"gossip"`
	Started      time.Time `json:"started"`
	LoadAvgStart string    `json:"loadavg_start"`
	LoadAvgEnd   string    `json:"loadavg_end"`

	// RegisterS: agents started → every Node registered and Ready.
	RegisterS  float64 `json:"register_s"`
	EtcdFloorS float64 `json:"etcd_floor_s"`
	ConvergeS  float64 `json:"converge_s"`
	Ratio      float64 `json:"ratio"`
	// ConvergeCPUS and RolloutCPUS are the CPU seconds the whole process
	// (server and simulated agents) used during those phases: the work
	// done, which other load on the machine does not inflate as much as the
	// wall-clock figures.
	ConvergeCPUS float64 `json:"converge_cpu_s"`
	RolloutCPUS  float64 `json:"rollout_cpu_s,omitempty"`
	// Writes are the etcd writes convergence made (replayed for the floor).
	Writes WriteStats `json:"writes"`
	// FalseNotReady counts Ready→not-Ready transitions of simulated nodes
	// that were not killed, over WatchedS seconds (from all Nodes Ready to
	// the end of the run, under the benchmark's own CPU load).
	FalseNotReady int     `json:"false_notready"`
	WatchedS      float64 `json:"watched_s"`
	// Connections is how many connections the agents' shared transport
	// opened until all Nodes were Ready; ConvergeDials how many more during
	// convergence.
	Connections   int `json:"connections"`
	ConvergeDials int `json:"converge_dials"`
	// CreatesDoneS: DaemonSet created → the last pod seen created;
	// ReadyLagP50Ms/MaxMs: a pod seen created → seen Running and Ready.
	CreatesDoneS  float64 `json:"creates_done_s"`
	ReadyLagP50Ms float64 `json:"ready_lag_p50_ms"`
	ReadyLagMaxMs float64 `json:"ready_lag_max_ms"`
	// PodsRunning is the number of pods Running and Ready at convergence.
	PodsRunning int `json:"pods_running"`

	RolloutS float64 `json:"rollout_s,omitempty"`
	DetectS  float64 `json:"detect_s,omitempty"`

	// StatusP50Ms, StatusP99Ms: pod status updates during convergence, at
	// the agents' HTTPS client; StatusSamples how many.
	StatusP50Ms   float64 `json:"status_p50_ms"`
	StatusP99Ms   float64 `json:"status_p99_ms"`
	StatusSamples int     `json:"status_samples"`

	// ServerRSSMB is this process's VmRSS after convergence: the server AND
	// the simulated agents. HeapMB is the live Go heap then (after a collection);
	// HeapServerIdleMB before any agent started; HeapAgentsMB the growth
	// from starting and registering the agents (their state, their watch
	// streams on both ends), so HeapMB − HeapAgentsMB approximates the
	// server's share.
	ServerRSSMB      float64 `json:"server_rss_mb"`
	HeapMB           float64 `json:"heap_mb"`
	HeapServerIdleMB float64 `json:"heap_server_idle_mb"`
	HeapAgentsMB     float64 `json:"heap_agents_mb"`
	// ServerAloneRSSMB and ServerAloneHeapMB: the process once the
	// simulated agents were stopped and their memory returned to the OS —
	// the server with every Node and pod still stored and cached, but
	// without the agents' connections (a lower bound for the server).
	ServerAloneRSSMB  float64 `json:"server_alone_rss_mb"`
	ServerAloneHeapMB float64 `json:"server_alone_heap_mb"`
	// ServerAloneFileMB is the file-backed part of ServerAloneRSSMB: the
	// executable's pages and etcd's memory-mapped database.
	ServerAloneFileMB float64 `json:"server_alone_file_mb"`
	// AgentRSSMB is one agent process alone, idle (fake runtime).
	AgentRSSMB float64 `json:"agent_rss_mb,omitempty"`
	// AgentAnonMB is its anonymous memory (heap, stacks: its own) and
	// AgentFileMB its resident pages of the executable (the one everynode
	// binary, server included; shared with other processes running it).
	AgentAnonMB float64 `json:"agent_anon_mb,omitempty"`
	AgentFileMB float64 `json:"agent_file_mb,omitempty"`

	Notes []string `json:"notes,omitempty"`
}

// Run runs the fleet benchmark. It cleans up everything it started.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if cfg.Nodes < 1 {
		return nil, errors.New("bench: Nodes must be at least 1")
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
	res = &Result{Nodes: cfg.Nodes, Started: time.Now().UTC(), LoadAvgStart: loadAvg()}
	useGossip := cfg.Gossip || cfg.Detect
	if useGossip && cfg.Nodes > MaxGossipNodes {
		useGossip = false
		res.Notes = append(res.Notes, fmt.Sprintf("gossip and detect_s are measured only up to %d nodes: that many memberlist members in one process on shared cores measure the process, not the protocol", MaxGossipNodes))
	}
	res.Gossip = useGossip
	if !useGossip {
		res.Notes = append(res.Notes, "without gossip, node liveness for the node lifecycle controller comes from the agents this process runs")
	}
	res.Notes = append(res.Notes, "server and simulated agents share one process: server_rss_mb includes the agents; heap_mb - heap_agents_mb estimates the server's share")

	dir, err := os.MkdirTemp(cfg.Dir, "everynode-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: temp dir: %w", err)
	}
	defer os.RemoveAll(dir)

	log.Info("starting server", "gossip", useGossip)
	srv, err := startServer(ctx, dir, useGossip, log.With("side", "server"))
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := srv.stop(); serr != nil && err == nil {
			log.Warn("server shutdown", "err", serr)
		}
	}()
	res.HeapServerIdleMB = heapMB()

	log.Info("starting agents", "nodes", cfg.Nodes)
	t0 := time.Now()
	fl, err := startFleet(ctx, srv, cfg.Nodes, useGossip, log.With("side", "agent"))
	if err != nil {
		return nil, err
	}
	defer fl.stop()
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

	res.Connections = int(fl.dials.Load())
	watchStart := time.Now()
	falseCtx, stopFalse := context.WithCancel(ctx)
	falseDone := make(chan int, 1)
	go func() { falseDone <- countNotReady(falseCtx, srv.local, fl.agents[len(fl.agents)/2].name) }()
	var falseOnce sync.Once
	endFalseWatch := func() {
		falseOnce.Do(func() {
			stopFalse()
			n := <-falseDone
			if res != nil {
				res.FalseNotReady = n
				res.WatchedS = time.Since(watchStart).Seconds()
			}
		})
	}
	defer endFalseWatch()
	if cfg.Measuring != nil {
		cfg.Measuring(true)
	}
	cpu0 := cpuSeconds()
	if err := converge(ctx, srv, fl, cfg, res, log); err != nil {
		return nil, err
	}
	res.ConvergeCPUS = cpuSeconds() - cpu0
	res.ConvergeDials = int(fl.dials.Load()) - res.Connections
	res.ServerRSSMB = rssMB(os.Getpid())
	res.HeapMB = heapMB()

	log.Info("etcd floor: replaying the convergence writes straight to etcd", "writes", res.Writes.Total)
	floor, err := srv.replay(ctx, res.Writes.seqs)
	if err != nil {
		return nil, err
	}
	res.EtcdFloorS = floor.Seconds()
	if res.EtcdFloorS > 0 {
		res.Ratio = res.ConvergeS / res.EtcdFloorS
	}
	log.Info("floor", "s", res.EtcdFloorS, "ratio", res.Ratio)
	// Every pod status write of convergence has answered by now; the floor
	// made none.
	fl.lat.on.Store(false)
	p50, p99, n := fl.lat.quantiles()
	res.StatusP50Ms, res.StatusP99Ms, res.StatusSamples = p50, p99, n

	if cfg.Rollout {
		cpu0 := cpuSeconds()
		if res.RolloutS, err = rollout(ctx, srv, cfg.Nodes, cfg.Timeout); err != nil {
			return nil, err
		}
		res.RolloutCPUS = cpuSeconds() - cpu0
		log.Info("rolled out", "s", res.RolloutS)
	}
	if cfg.Detect && useGossip {
		if res.DetectS, err = detect(ctx, srv, fl, cfg.Timeout); err != nil {
			return nil, err
		}
		log.Info("detected", "s", res.DetectS)
	}
	if cfg.Measuring != nil {
		cfg.Measuring(false)
	}
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
		log.Info("agent process", "rss_mb", res.AgentRSSMB)
	}
	// Stopping the agents below makes their Nodes not Ready: stop
	// counting first.
	endFalseWatch()
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

// gossipSettle is how long a fleet with gossip idles after every member
// joined: memberlist retransmits each join about a dozen times at N=100.
const gossipSettle = 3 * time.Second

// waitMembers waits until the server's gossip member sees n alive agents.
func waitMembers(ctx context.Context, srv *server, n int, timeout time.Duration) error {
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

// countNotReady counts, until ctx ends, how often a simulated Node other
// than victim went from Ready to not Ready.
func countNotReady(ctx context.Context, c client.Interface, victim string) int {
	ready := map[string]bool{}
	n := 0
	_ = watchUntil(ctx, c, resources.Nodes, "", client.ListOptions{LabelSelector: NodeLabel + "=true"}, 24*time.Hour, nil, func(ev watch.Event) (bool, error) {
		node, ok := ev.Object.(*corev1.Node)
		if !ok || node.Name == victim {
			return false, nil
		}
		now := ev.Type != watch.Deleted && nodeReady(node)
		if was, seen := ready[node.Name]; seen && was && !now {
			n++
		}
		ready[node.Name] = now
		return false, nil
	})
	return n
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

// heapMB is the live Go heap right after a collection (HeapAlloc then
// counts reachable objects only, not the fragmentation HeapInuse keeps).
func heapMB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}
