package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/internal/bench"
	"github.com/everynode/everynode/internal/service"
)

// benchFleetCommand is "everynode bench fleet": a simulated fleet against a
// real server, measured (package bench).
type benchFleetCommand struct {
	nodes                          int
	asJSON, gsp, rollout, detect   bool
	cpuProfile, logLevel, agentBin string
	memProfile, fanoutProfile      string
	memLimit                       string
	memoryLimit                    int64
	idle, soak, idleTraffic        time.Duration
	idleSettle                     time.Duration
	idleCPU                        time.Duration
	idleCPUProfile, agentsProfile  string
	gossipProfile                  string
	agentProcs, cpuLoad            int
	unreachable                    int
	unreachableBlocks              bool
	ownConns                       bool

	level slog.Level
}

func (c *benchFleetCommand) flags(fs *pflag.FlagSet) {
	fs.IntVar(&c.nodes, "nodes", 100, "number of simulated nodes")
	fs.BoolVar(&c.asJSON, "json", false, "print the result as JSON")
	fs.BoolVar(&c.gsp, "gossip", false, fmt.Sprintf("make every simulated node a gossip member (up to %d nodes)", bench.MaxGossipNodes))
	fs.BoolVar(&c.rollout, "rollout", false, "measure an image rollout (maxUnavailable 10%)")
	fs.BoolVar(&c.detect, "detect", false, fmt.Sprintf("measure failure detection of a killed node (turns gossip on; up to %d nodes)", bench.MaxGossipNodes))
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured phases (convergence, rollout, detect) to FILE")
	fs.StringVar(&c.memProfile, "memprofile", "", "write a heap profile of the server alone (after the agents stopped) to FILE")
	fs.StringVar(&c.fanoutProfile, "fanout-cpuprofile", "", "write a CPU profile of the benchmark's process (with --agent-procs, the server's side) over the watch fan-out's three writes to FILE")
	fs.StringVar(&c.memLimit, "memory-limit", "none", "the server's --memory-limit: "+memoryLimitUsage+"; with --agent-procs 0 it limits the agents too")
	fs.StringVar(&c.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	fs.StringVar(&c.agentBin, "agent-binary", "", "binary run as the separate agent process (default: everynode-agent next to this binary, else this one; \"none\" skips agent_rss_mb)")
	fs.DurationVar(&c.soak, "soak", 0, "keep the fleet running this long after the timed phases, counting false NotReady")
	fs.DurationVar(&c.idle, "agent-idle", bench.DefaultAgentIdle, "how long the separate agent process idles before its RSS is read")
	fs.BoolVar(&c.ownConns, "own-connections", false, "give every simulated agent its own HTTP/2 connection, as real nodes have (default: one connection pool per process)")
	fs.IntVar(&c.agentProcs, "agent-procs", 0, "run the simulated agents in K child processes (0: in this process, for profiling), so server_rss_mb is the server's own")
	fs.IntVar(&c.cpuLoad, "cpu-load", 0, "keep N goroutines busy in a separate child process from all Nodes Ready to the end of the run")
	fs.StringVar(&c.gossipProfile, "gossip-profile", gossip.ProfileLAN, "gossip profile of the server and the simulated nodes: lan, wan or local (with wan the server pings the agents' API connections every 10 s instead of 1 s)")
	fs.DurationVar(&c.idleSettle, "idle-settle", 0, "with --idle-traffic, idle this long before counting (0: 5 s); longer than twice the gossip push/pull interval counts it at its steady rate")
	fs.DurationVar(&c.idleTraffic, "idle-traffic", 0, "once every pod runs, count each agent's idle network traffic (API connections and gossip, bytes/s in and out) over this long; agents then post Node status at the real agent's 10 s period (0: not measured)")
	fs.DurationVar(&c.idleCPU, "idle-cpu", 0, "once every pod runs, measure the agent processes' idle CPU (ms/s per agent) and wake-ups (context switches/s per agent) over this long, with the load average; agents then post Node status at the real agent's period; needs --agent-procs (0: not measured)")
	fs.StringVar(&c.agentsProfile, "agents-cpuprofile", "", "with --agent-procs, write a CPU profile of the first agent process over the measured phases (convergence to the last timed phase) to FILE")
	fs.StringVar(&c.idleCPUProfile, "idle-cpuprofile", "", "with --idle-cpu, write a CPU profile of the first agent process over that window to FILE")
	fs.IntVar(&c.unreachable, "rollout-unreachable", 0, "measure one more image rollout (maxUnavailable 10%) during which PCT % of the nodes are stopped mid-rollout (0: none)")
	fs.BoolVar(&c.unreachableBlocks, "unreachable-blocks", false, "run that rollout with rollout.everynode.io/unreachable-blocks \"true\" (Kubernetes' rule), for comparison")
}

func (c *benchFleetCommand) complete(pos []string) error {
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "bench fleet takes only flags")
	}
	if c.nodes < 1 {
		return usageError("--nodes must be at least 1", "e.g. --nodes 100")
	}
	switch c.gossipProfile {
	case gossip.ProfileLAN, gossip.ProfileWAN, gossip.ProfileLocal:
	default:
		return usageError(fmt.Sprintf("--gossip-profile %q is not a profile", c.gossipProfile), "use lan, wan or local")
	}
	if c.idleTraffic < 0 || c.idleCPU < 0 {
		return usageError("--idle-traffic and --idle-cpu must not be negative", "e.g. --idle-traffic 60s --idle-cpu 30s")
	}
	if c.idleCPU > 0 && c.agentProcs == 0 {
		return usageError("--idle-cpu needs the agents in child processes", "e.g. --agent-procs 10 --idle-cpu 30s")
	}
	if c.idleCPUProfile != "" && c.idleCPU == 0 {
		return usageError("--idle-cpuprofile needs --idle-cpu", "e.g. --idle-cpu 30s --idle-cpuprofile agent.pprof")
	}
	if c.agentsProfile != "" && c.agentProcs == 0 {
		return usageError("--agents-cpuprofile needs the agents in child processes", "e.g. --agent-procs 2 --agents-cpuprofile agents.pprof")
	}
	if c.agentsProfile != "" && c.idleCPU > 0 {
		return usageError("--agents-cpuprofile and --idle-cpu cannot be combined (the profile would cover the idle window and raise its figures)", "drop one of them")
	}
	if c.fanoutProfile != "" && c.cpuProfile != "" {
		return usageError("--fanout-cpuprofile and --cpuprofile cannot be combined (a process writes one CPU profile at a time)", "drop one of them")
	}
	if c.agentProcs < 0 || c.cpuLoad < 0 {
		return usageError("--agent-procs and --cpu-load must not be negative", "e.g. --agent-procs 2 --cpu-load 2")
	}
	if c.unreachable < 0 || c.unreachable > 50 {
		return usageError("--rollout-unreachable must be a percentage from 0 to 50", "e.g. --rollout-unreachable 5")
	}
	if c.unreachableBlocks && c.unreachable == 0 {
		return usageError("--unreachable-blocks needs --rollout-unreachable", "e.g. --rollout-unreachable 5 --unreachable-blocks")
	}
	var err error
	if c.memoryLimit, err = parseMemoryLimit(c.memLimit); err != nil {
		return err
	}
	c.level, err = parseLogLevel(c.logLevel)
	return err
}

// Run runs the benchmark and prints its result.
func (c *benchFleetCommand) Run(ctx context.Context, std IO) error {
	log := slog.New(slog.NewTextHandler(std.Err, &slog.HandlerOptions{Level: c.level}))
	cfg := bench.Config{Nodes: c.nodes, Gossip: c.gsp, Rollout: c.rollout, Detect: c.detect, AgentIdle: c.idle, Soak: c.soak, Logger: log,
		GossipProfile: c.gossipProfile, IdleTraffic: c.idleTraffic, IdleSettle: c.idleSettle, IdleCPU: c.idleCPU,
		AgentProcs: c.agentProcs, MemoryLimit: c.memoryLimit, CPULoad: c.cpuLoad, RolloutUnreachable: c.unreachable, UnreachableBlocks: c.unreachableBlocks,
		OwnConnections: c.ownConns}
	if c.agentProcs > 0 || c.cpuLoad > 0 {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this binary: %w", err)
		}
		cfg.AgentsCommand = func(ctx context.Context) *exec.Cmd {
			cmd := exec.CommandContext(ctx, self, "bench", "agents", "--log-level", c.logLevel)
			cmd.Stderr = std.Err
			return cmd
		}
	}
	agentBin := c.agentBin
	if agentBin != "none" {
		if agentBin == "" {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this binary: %w", err)
			}
			agentBin = defaultAgentBinary(self)
		}
		cfg.AgentProcess = func(ctx context.Context, t bench.AgentTarget) *exec.Cmd {
			// The real agent with the fake runtime, joined with the join
			// token like any agent (in its environment, not on its command
			// line); "agent" is the command line of both "everynode agent"
			// and everynode-agent.
			cmd := exec.CommandContext(ctx, agentBin, "agent", "--server", t.Server,
				"--name", t.NodeName, "--data-dir", t.DataDir, "--runtime", "fake",
				"--gossip", "127.0.0.1:0", "--gossip-profile", "lan", "--log-listen", "127.0.0.1:0", "--log-level", "warn")
			cmd.Env = append(cmd.Environ(), TokenEnv+"="+t.JoinToken)
			cmd.Stderr = std.Err
			return cmd
		}
	}
	if c.idleCPUProfile != "" {
		// The child writes it: give it a path that does not depend on its
		// working directory.
		p, err := filepath.Abs(c.idleCPUProfile)
		if err != nil {
			return fmt.Errorf("idle cpu profile: %w", err)
		}
		cfg.IdleCPUProfile = p
	}
	if c.agentsProfile != "" {
		p, err := filepath.Abs(c.agentsProfile) // the child writes it
		if err != nil {
			return fmt.Errorf("agents cpu profile: %w", err)
		}
		cfg.AgentsCPUProfile = p
	}
	if c.memProfile != "" {
		f, err := os.Create(c.memProfile)
		if err != nil {
			return fmt.Errorf("heap profile: %w", err)
		}
		defer f.Close()
		cfg.HeapProfile = f
	}
	if c.fanoutProfile != "" {
		f, err := os.Create(c.fanoutProfile)
		if err != nil {
			return fmt.Errorf("fan-out cpu profile: %w", err)
		}
		defer f.Close()
		cfg.FanoutProfile = cpuProfileWindow(f, "fan-out cpu profile", log)
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		// The profile covers the measured phases (convergence to the last
		// timed phase), not the fleet's start-up.
		cfg.Measuring = cpuProfileWindow(f, "cpu profile", log)
		defer cfg.Measuring(false)
	}
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if res.AgentRSSMB > 0 {
		res.AgentBinary = filepath.Base(agentBin)
	}
	if c.asJSON {
		enc := json.NewEncoder(std.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printFleet(std.Out, res)
	return nil
}

// leanAgentBinary is the lean agent's file name (cmd/everynode-agent), which
// make build and make release put next to everynode.
const leanAgentBinary = service.LeanAgentBinary

// defaultAgentBinary is the binary bench fleet measures as the agent: the
// one users install on nodes, everynode-agent next to self (the everynode
// binary), else self.
func defaultAgentBinary(self string) string {
	lean := filepath.Join(filepath.Dir(self), leanAgentBinary)
	if fi, err := os.Stat(lean); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return lean
	}
	return self
}

// benchAgentsCommand is the hidden "bench agents": it serves the control
// protocol of bench.ServeAgents on stdin and stdout until stdin closes.
type benchAgentsCommand struct {
	logLevel string
	level    slog.Level
}

func (c *benchAgentsCommand) flags(fs *pflag.FlagSet) {
	fs.StringVar(&c.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
}

func (c *benchAgentsCommand) complete(pos []string) error {
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "bench agents takes only flags")
	}
	var err error
	c.level, err = parseLogLevel(c.logLevel)
	return err
}

// Run serves the agents until stdin closes.
func (c *benchAgentsCommand) Run(ctx context.Context, std IO) error {
	in, ok := std.In.(io.ReadCloser)
	if !ok {
		in = io.NopCloser(std.In)
	}
	log := slog.New(slog.NewTextHandler(std.Err, &slog.HandlerOptions{Level: c.level})).With("pid", os.Getpid())
	return bench.ServeAgents(ctx, in, std.Out, log)
}

func printFleet(out io.Writer, r *bench.Result) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	f := func(name string, v float64, unit string) {
		if v == 0 {
			fmt.Fprintf(tw, "%s\t-\t%s\n", name, unit)
			return
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%s\n", name, v, unit)
	}
	fmt.Fprintf(tw, "nodes\t%d\t(gossip %v)\n", r.Nodes, r.Gossip)
	if r.AgentProcs > 0 {
		fmt.Fprintf(tw, "agent processes\t%d\t\n", r.AgentProcs)
	} else {
		fmt.Fprintf(tw, "agent processes\tnone\t(agents in the server's process)\n")
	}
	if r.CPULoad > 0 {
		fmt.Fprintf(tw, "cpu load\t%d\tbusy goroutines in a child (%.0f CPU s burned)\n", r.CPULoad, r.CPULoadCPUS)
	}
	fmt.Fprintf(tw, "load average\t%s → %s\t\n", r.LoadAvgStart, r.LoadAvgEnd)
	f("register_s", r.RegisterS, "s")
	f("etcd_floor_s", r.EtcdFloorS, "s")
	f("converge_s", r.ConvergeS, "s")
	f("converge_cpu_s", r.ConvergeCPUS, "CPU s (this process)")
	f("ratio", r.Ratio, "converge/floor")
	f("creates_done_s", r.CreatesDoneS, "s (DaemonSet created → last pod created)")
	f("ready_lag_p50_ms", r.ReadyLagP50Ms, "ms (pod created → Running and Ready)")
	f("ready_lag_max_ms", r.ReadyLagMaxMs, "ms")
	fmt.Fprintf(tw, "writes\t%d\tpod creates %d, pod updates %d, daemonset %d, other %d, %d bytes\n",
		r.Writes.Total, r.Writes.PodCreates, r.Writes.PodUpdates, r.Writes.DaemonSetWrites, r.Writes.Other, r.Writes.Bytes)
	f("rollout_s", r.RolloutS, "s")
	f("rollout_cpu_s", r.RolloutCPUS, "CPU s (this process)")
	if r.UnreachablePct > 0 {
		rule := "everynode's rule"
		if r.UnreachableBlocks {
			rule = "unreachable-blocks: Kubernetes' rule"
		}
		fmt.Fprintf(tw, "unreachable\t%d nodes\tstopped %.2f s into the rollout (%s)\n", r.UnreachableNodes, r.UnreachableStoppedAtS, rule)
		f("rollout_reachable_s", r.RolloutReachableS, "s (update → every reachable node runs the new image, Ready)")
		if r.RolloutStatusS > 0 {
			f("rollout_status_s", r.RolloutStatusS, "s (update → status complete as kubectl rollout status checks it)")
		} else {
			fmt.Fprintf(tw, "rollout_status_s\tnever\tstatus not complete %.0f s after every reachable node was updated\n", r.UnreachableStatusWaitS)
		}
		fmt.Fprintf(tw, "unreachable_status\t%s\t\n", r.UnreachableStatus)
		f("rollout_unreachable_cpu_s", r.RolloutUnreachableCPUS, "CPU s (this process)")
	}
	if r.IdleTrafficS > 0 {
		fmt.Fprintf(tw, "idle traffic\tper agent\tover %.0f s, gossip profile %s (no IP/TCP/UDP headers)\n", r.IdleTrafficS, orNone(r.GossipProfile))
		f("idle_bytes_per_s_in", r.IdleBytesPerSIn, "B/s (API + gossip)")
		f("idle_bytes_per_s_out", r.IdleBytesPerSOut, "B/s (API + gossip)")
		f("idle_api_bytes_per_s_in", r.IdleAPIBytesPerSIn, "B/s (TLS records: watches, heartbeats, HTTP/2 pings)")
		f("idle_api_bytes_per_s_out", r.IdleAPIBytesPerSOut, "B/s")
		f("idle_gossip_bytes_per_s_in", r.IdleGossipBytesPerSIn, fmt.Sprintf("B/s (%.2f UDP datagrams/s)", r.IdleGossipPacketsPerSIn))
		f("idle_gossip_bytes_per_s_out", r.IdleGossipBytesPerSOut, fmt.Sprintf("B/s (%.2f UDP datagrams/s)", r.IdleGossipPacketsPerSOut))
		fmt.Fprintf(tw, "idle_gossip_stream_bytes_per_s\t%.1f / %.1f\tB/s in / out of the gossip figures over TCP (push/pull state exchanges); the rest is UDP (probes)\n",
			r.IdleGossipStreamBytesPerSIn, r.IdleGossipStreamBytesPerSOut)
	}
	if r.IdleCPUS > 0 {
		fmt.Fprintf(tw, "idle cpu\tper agent\tover %.0f s, gossip profile %s, load average then %s\n", r.IdleCPUS, orNone(r.GossipProfile), r.IdleLoadAvg)
		f("idle_cpu_ms_per_s", r.IdleCPUMsPerS, fmt.Sprintf("ms of CPU per second (busiest process %.2f)", r.IdleCPUMsPerSMax))
		f("idle_wakeups_per_s", r.IdleWakeupsPerS, fmt.Sprintf("context switches per second (%.1f voluntary, %.1f involuntary)", r.IdleVoluntaryPerS, r.IdleInvoluntaryPerS))
		f("idle_server_cpu_ms_per_s", r.IdleServerCPUMsPerS, "ms of CPU per second (this process: server + harness)")
	}
	f("detect_s", r.DetectS, "s (node killed → Node Ready≠True)")
	f("detect_member_s", r.DetectMemberS, "s (node killed → the server's gossip member lists it dead)")
	fmt.Fprintf(tw, "false_notready\t%d\tover %.0f s (highest 1-min load %.2f)\n", r.FalseNotReady, r.WatchedS, r.LoadAvgMax1)
	f("status_p50_ms", r.StatusP50Ms, fmt.Sprintf("ms (%d samples)", r.StatusSamples))
	f("status_p99_ms", r.StatusP99Ms, "ms")
	if r.AgentProcs > 0 {
		f("agents_converge_cpu_s", r.AgentsConvergeCPUS, "CPU s (agent processes)")
		f("agents_rollout_cpu_s", r.AgentsRolloutCPUS, "CPU s (agent processes)")
		f("server_rss_mb", r.ServerRSSMB, "MiB (server + harness; agents in other processes)")
		f("agents_rss_mb", r.AgentsRSSMB, fmt.Sprintf("MiB (the %d agent processes, summed)", r.AgentProcs))
		f("agents_anon_mb", r.AgentsAnonMB, fmt.Sprintf("MiB of it anonymous (%.2f MiB per agent)", r.AgentsAnonMB/float64(r.Nodes)))
	} else {
		f("server_rss_mb", r.ServerRSSMB, "MiB (server + simulated agents, one process)")
	}
	f("server_file_mb", r.ServerFileMB, "MiB of server_rss_mb file-backed (executable, etcd's mmap)")
	f("server_go_mb", r.ServerGoMB, "MiB held by the Go runtime then")
	f("heap_mb", r.HeapMB, "MiB live Go heap (after a collection)")
	f("heap_agents_mb", r.HeapAgentsMB, "MiB heap growth from the agents")
	f("server_alone_rss_mb", r.ServerAloneRSSMB, "MiB after the agents stopped (objects still cached; lower bound)")
	f("server_alone_file_mb", r.ServerAloneFileMB, "MiB of it file-backed (executable, etcd's mmap)")
	f("server_alone_heap_mb", r.ServerAloneHeapMB, "MiB live Go heap then")
	f("agent_rss_mb", r.AgentRSSMB, "MiB (one agent process, idle: "+r.AgentBinary+")")
	f("agent_anon_mb", r.AgentAnonMB, "MiB of it anonymous (heap, stacks)")
	f("agent_file_mb", r.AgentFileMB, "MiB of it executable pages (shared)")
	tw.Flush()
	for _, n := range r.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	for _, e := range r.FalseNotReadyEvents {
		fmt.Fprintf(out, "false NotReady: %s\n", e)
	}
}

// benchReportCommand is "everynode bench report": results of "bench fleet
// --json" rendered as docs/benchmarks.md.
type benchReportCommand struct {
	outPath, command, notes, docker string
	files                           []string
}

func (c *benchReportCommand) flags(fs *pflag.FlagSet) {
	fs.StringVarP(&c.outPath, "output", "o", "", "write the markdown to FILE (default: stdout)")
	fs.StringVar(&c.command, "command", "make bench-fleet", "the command named in the report")
	fs.StringVar(&c.notes, "notes", "", "a markdown file appended to the report (analysis)")
	fs.StringVar(&c.docker, "docker", "", "the output of make bench-docker (go test -bench BenchmarkDockerStart), rendered as the report's real-Docker section")
}

func (c *benchReportCommand) complete(pos []string) error {
	if len(pos) == 0 {
		return usageError("no result files given", "give the JSON files of \"everynode bench fleet --json\"")
	}
	c.files = pos
	return nil
}

// Run renders the report.
func (c *benchReportCommand) Run(_ context.Context, std IO) error {
	var results []bench.Result
	for _, p := range c.files {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read result: %w", err)
		}
		var r bench.Result
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("read result %s: %w", p, err)
		}
		results = append(results, r)
	}
	rep := bench.Report{Machine: bench.ThisMachine(), Date: time.Now().UTC(), Command: c.command, Results: results}
	if c.docker != "" {
		f, err := os.Open(c.docker)
		if err != nil {
			return fmt.Errorf("read the Docker benchmark's output: %w", err)
		}
		d, err := bench.ParseDockerStart(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("read %s: %w (run make bench-docker again)", c.docker, err)
		}
		rep.Docker = &d
	}
	if c.notes != "" {
		b, err := os.ReadFile(c.notes)
		if err != nil {
			return fmt.Errorf("read notes: %w", err)
		}
		rep.Notes = string(b)
	}
	var sb strings.Builder
	bench.Render(&sb, rep)
	if c.outPath == "" {
		_, err := io.WriteString(std.Out, sb.String())
		return err
	}
	return os.WriteFile(c.outPath, []byte(sb.String()), 0o644)
}

// cpuProfileWindow returns a function that starts (true) a CPU profile
// written to f and stops (false) the profile it started, if any; a profile
// that cannot start is logged as what and skipped.
func cpuProfileWindow(f *os.File, what string, log *slog.Logger) func(on bool) {
	profiling := false
	return func(on bool) {
		switch {
		case on && !profiling:
			if err := pprof.StartCPUProfile(f); err != nil {
				log.Warn(what, "err", err)
				return
			}
			profiling = true
		case !on && profiling:
			pprof.StopCPUProfile()
			profiling = false
		}
	}
}
