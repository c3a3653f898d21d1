package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/everynode/everynode/bench"
)

// BenchCommand is "everynode bench": "fleet" runs the fleet benchmark,
// "report" renders results as docs/benchmarks.md.
type BenchCommand struct{}

// Run dispatches to the bench subcommands.
func (c *BenchCommand) Run(ctx context.Context, args []string, std IO) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(std.Out, "Usage:\n  everynode bench fleet --nodes N [--json] [--gossip] [--rollout] [--detect] [--agent-procs K] [--cpu-load N] [--soak D] [--cpuprofile FILE]\n  everynode bench report [-o FILE] [--command CMD] [--notes FILE] RESULT.json...\n")
		if len(args) == 0 {
			return usageError("no bench subcommand given", "use \"everynode bench fleet --nodes 100\"")
		}
		return nil
	}
	switch args[0] {
	case "fleet":
		return c.fleet(ctx, args[1:], std)
	case "report":
		return c.report(args[1:], std)
	case "agents":
		// Hidden: the child process of "bench fleet --agent-procs" and
		// "--cpu-load", driven over its stdin and stdout.
		return c.agents(ctx, args[1:], std)
	}
	return usageError(fmt.Sprintf("unknown bench subcommand %q", args[0]), "use fleet or report")
}

func (c *BenchCommand) fleet(ctx context.Context, args []string, std IO) error {
	var (
		nodes                          int
		asJSON, gsp, rollout, detect   bool
		cpuProfile, logLevel, agentBin string
		memProfile                     string
		idle, soak                     time.Duration
		agentProcs, cpuLoad            int
	)
	fs := newFlagSet("bench fleet", "bench fleet --nodes N [--json] [--gossip] [--rollout] [--detect] [--agent-procs K] [--cpu-load N] [--soak D] [--cpuprofile FILE]", std.Out)
	fs.IntVar(&nodes, "nodes", 100, "number of simulated nodes")
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	fs.BoolVar(&gsp, "gossip", false, fmt.Sprintf("make every simulated node a gossip member (up to %d nodes)", bench.MaxGossipNodes))
	fs.BoolVar(&rollout, "rollout", false, "measure an image rollout (maxUnavailable 10%)")
	fs.BoolVar(&detect, "detect", false, fmt.Sprintf("measure failure detection of a killed node (turns gossip on; up to %d nodes)", bench.MaxGossipNodes))
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the measured phases (convergence, rollout, detect) to FILE")
	fs.StringVar(&memProfile, "memprofile", "", "write a heap profile of the server alone (after the agents stopped) to FILE")
	fs.StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	fs.StringVar(&agentBin, "agent-binary", "", "everynode binary run as the separate agent process (default: this one; \"none\" skips agent_rss_mb)")
	fs.DurationVar(&soak, "soak", 0, "keep the fleet running this long after the timed phases, counting false NotReady")
	fs.DurationVar(&idle, "agent-idle", bench.DefaultAgentIdle, "how long the separate agent process idles before its RSS is read")
	fs.IntVar(&agentProcs, "agent-procs", 0, "run the simulated agents in K child processes (0: in this process, for profiling), so server_rss_mb is the server's own")
	fs.IntVar(&cpuLoad, "cpu-load", 0, "keep N goroutines busy in a separate child process from all Nodes Ready to the end of the run")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "bench fleet takes only flags")
	}
	if nodes < 1 {
		return usageError("--nodes must be at least 1", "e.g. --nodes 100")
	}
	if agentProcs < 0 || cpuLoad < 0 {
		return usageError("--agent-procs and --cpu-load must not be negative", "e.g. --agent-procs 2 --cpu-load 2")
	}
	level, err := parseLogLevel(logLevel)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(std.Err, &slog.HandlerOptions{Level: level}))
	cfg := bench.Config{Nodes: nodes, Gossip: gsp, Rollout: rollout, Detect: detect, AgentIdle: idle, Soak: soak, Logger: log,
		AgentProcs: agentProcs, CPULoad: cpuLoad}
	if agentProcs > 0 || cpuLoad > 0 {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this binary: %w", err)
		}
		cfg.AgentsCommand = func(ctx context.Context) *exec.Cmd {
			cmd := exec.CommandContext(ctx, self, "bench", "agents", "--log-level", logLevel)
			cmd.Stderr = std.Err
			return cmd
		}
	}
	if agentBin != "none" {
		if agentBin == "" {
			if agentBin, err = os.Executable(); err != nil {
				return fmt.Errorf("find this binary: %w", err)
			}
		}
		cfg.AgentProcess = func(ctx context.Context, t bench.AgentTarget) *exec.Cmd {
			// The real "everynode agent" with the fake runtime, joined with
			// the join token like any agent.
			cmd := exec.CommandContext(ctx, agentBin, "agent", "--server", t.Server, "--token", t.JoinToken,
				"--name", t.NodeName, "--data-dir", t.DataDir, "--runtime", "fake",
				"--gossip", "127.0.0.1:0", "--gossip-profile", "lan", "--log-listen", "127.0.0.1:0", "--log-level", "warn")
			cmd.Stderr = std.Err
			return cmd
		}
	}
	if memProfile != "" {
		f, err := os.Create(memProfile)
		if err != nil {
			return fmt.Errorf("heap profile: %w", err)
		}
		defer f.Close()
		cfg.HeapProfile = f
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		// The profile covers the measured phases (convergence to the last
		// timed phase), not the fleet's start-up.
		profiling := false
		cfg.Measuring = func(on bool) {
			switch {
			case on && !profiling:
				if err := pprof.StartCPUProfile(f); err != nil {
					log.Warn("cpu profile", "err", err)
					return
				}
				profiling = true
			case !on && profiling:
				pprof.StopCPUProfile()
				profiling = false
			}
		}
		defer cfg.Measuring(false)
	}
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(std.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printFleet(std.Out, res)
	return nil
}

// agents is the hidden "bench agents": it serves the control protocol of
// bench.ServeAgents on stdin and stdout until stdin closes.
func (c *BenchCommand) agents(ctx context.Context, args []string, std IO) error {
	var logLevel string
	fs := newFlagSet("bench agents", "bench agents [--log-level LEVEL] (run by \"bench fleet --agent-procs\")", std.Out)
	fs.StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "bench agents takes only flags")
	}
	level, err := parseLogLevel(logLevel)
	if err != nil {
		return err
	}
	in, ok := std.In.(io.ReadCloser)
	if !ok {
		in = io.NopCloser(std.In)
	}
	log := slog.New(slog.NewTextHandler(std.Err, &slog.HandlerOptions{Level: level})).With("pid", os.Getpid())
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
	f("agent_rss_mb", r.AgentRSSMB, "MiB (one agent process, idle)")
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

func (c *BenchCommand) report(args []string, std IO) error {
	var outPath, command, notes string
	fs := newFlagSet("bench report", "bench report [-o FILE] [--command CMD] [--notes FILE] RESULT.json...", std.Out)
	fs.StringVar(&outPath, "o", "", "write the markdown to FILE (default: stdout)")
	fs.StringVar(&command, "command", "make bench-fleet", "the command named in the report")
	fs.StringVar(&notes, "notes", "", "a markdown file appended to the report (analysis)")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError("no result files given", "give the JSON files of \"everynode bench fleet --json\"")
	}
	var results []bench.Result
	for _, p := range pos {
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
	rep := bench.Report{Machine: bench.ThisMachine(), Date: time.Now().UTC(), Command: command, Results: results}
	if notes != "" {
		b, err := os.ReadFile(notes)
		if err != nil {
			return fmt.Errorf("read notes: %w", err)
		}
		rep.Notes = string(b)
	}
	var sb strings.Builder
	bench.Render(&sb, rep)
	if outPath == "" {
		_, err := io.WriteString(std.Out, sb.String())
		return err
	}
	return os.WriteFile(outPath, []byte(sb.String()), 0o644)
}
