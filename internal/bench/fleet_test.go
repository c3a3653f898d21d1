package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// agentEnv carries an AgentTarget (JSON) to the test binary re-run as the
// separate agent process.
const agentEnv = "EVERYNODE_BENCH_AGENT_PROCESS"

// childEnv makes the test binary a child of the control protocol: "agents"
// serves real agents (ServeAgents, as "everynode bench agents" does),
// "fake" fake fleets.
const childEnv = "EVERYNODE_BENCH_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
	case "agents":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		err := ServeAgents(ctx, os.Stdin, os.Stdout, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		stop()
		if err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	case "fake":
		err := serveControl(context.Background(), os.Stdin, os.Stdout, func(_ context.Context, spec childSpec) (agentFleet, error) { return fakeStart(spec) })
		if err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(agentEnv); spec != "" {
		var t AgentTarget
		if err := json.Unmarshal([]byte(spec), &t); err != nil {
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		if err := RunAgentProcess(ctx, t); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestRunSmallFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server, 5 agents with gossip and a child process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const nodes = 5
	var fanoutProfile []bool // the calls of FanoutProfile
	res, err := Run(ctx, Config{
		Nodes: nodes, Gossip: true, Rollout: true, Detect: true,
		FanoutProfile: func(on bool) { fanoutProfile = append(fanoutProfile, on) },
		AgentProcess: func(ctx context.Context, at AgentTarget) *exec.Cmd {
			b, _ := json.Marshal(at)
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), agentEnv+"="+string(b))
			return cmd
		},
		AgentIdle: time.Second,
		Dir:       t.TempDir(),
		Timeout:   time.Minute,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("%+v", *res)
	checks := []struct {
		name string
		ok   bool
	}{
		{"every pod Running and Ready", res.PodsRunning == nodes},
		{"converge_s > 0", res.ConvergeS > 0},
		{"etcd_floor_s > 0", res.EtcdFloorS > 0},
		{"ratio > 0", res.Ratio > 0},
		{"one pod create per node", res.Writes.PodCreates == nodes},
		{"pod status updates seen", res.Writes.PodUpdates >= nodes},
		{"the controller's events counted by reason", res.Writes.EventReasons["SuccessfulCreate"] > 0},
		// Each pod's create and status update compare their key at least.
		{"etcd ranges of convergence counted", res.Writes.Ranges >= 2*int64(nodes) && res.Writes.RangesPerPod >= 2},
		{"etcd ranges of the rollout counted", res.RolloutWrites != nil && res.RolloutWrites.Ranges >= 2*int64(nodes)},
		{"rollout_s > 0", res.RolloutS > 0},
		{"detect_s > 0", res.DetectS > 0},
		{"detect_member_s > 0", res.DetectMemberS > 0},
		{"gossip on", res.Gossip},
		{"status latency sampled", res.StatusSamples > 0 && res.StatusP50Ms > 0 && res.StatusP99Ms >= res.StatusP50Ms},
		{"fan-out: every write seen by every agent's watch", res.FanoutWatches == nodes && res.FanoutWrites == fanoutWrites && res.FanoutMissing == 0},
		{"fan-out latency measured", res.FanoutP50Ms > 0 && res.FanoutP99Ms >= res.FanoutP50Ms && res.FanoutMaxMs >= res.FanoutP99Ms && res.FanoutWriteMs > 0},
		{"fan-out profile window opened and closed once", slices.Equal(fanoutProfile, []bool{true, false})},
		{"server RSS read", res.ServerRSSMB > 0},
		{"heap read", res.HeapMB > 0},
		{"agent process RSS read", res.AgentRSSMB > 0 && res.AgentAnonMB > 0 && res.AgentAnonMB <= res.AgentRSSMB},
		// Half a second is too short for its CPU time in 10 ms ticks; its
		// threads wake.
		{"agent process idle wake-ups read", res.AgentIdleWakeupsPerS > 0 && res.AgentIdleS > 0},
		{"agent process idle CPU left out of a short window", res.AgentIdleCPUMsPerS == 0},
		{"load average read", res.LoadAvgStart != "" && res.LoadAvgEnd != ""},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: not so in %+v", c.name, *res)
		}
	}
}

// agentsChildCommand re-runs the test binary as a child serving real
// simulated agents (see TestMain).
func agentsChildCommand(ctx context.Context) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=agents")
	cmd.Stderr = os.Stderr
	return cmd
}

func TestRunSmallFleetAgentProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server, agents with gossip in 2 child processes and a CPU load child")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const nodes = 4
	res, err := Run(ctx, Config{
		Nodes: nodes, Gossip: true, Rollout: true, Detect: true,
		AgentProcs: 2, AgentsCommand: agentsChildCommand, CPULoad: 1,
		Dir: t.TempDir(), Timeout: time.Minute,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("%+v", *res)
	victim := nodeName(nodes / 2)
	checks := []struct {
		name string
		ok   bool
	}{
		{"every pod Running and Ready", res.PodsRunning == nodes},
		{"two agent processes", res.AgentProcs == 2},
		{"each child dialed the server", res.Connections >= 2},
		{"rollout_s > 0", res.RolloutS > 0},
		{"detect_s > 0", res.DetectS > 0},
		{"detect_member_s > 0", res.DetectMemberS > 0},
		{"status latency sampled in the children", res.StatusSamples >= nodes && res.StatusP50Ms > 0},
		{"fan-out: every write seen by every agent's watch in the children", res.FanoutWatches == nodes && res.FanoutMissing == 0 && res.FanoutP50Ms > 0 && res.FanoutP99Ms >= res.FanoutP50Ms},
		{"server RSS read", res.ServerRSSMB > 0 && res.ServerFileMB > 0 && res.ServerFileMB < res.ServerRSSMB && res.ServerGoMB > 0},
		{"the runtime's memory split", res.ServerGo != nil && res.ServerGo.ObjectsMB > 0 && res.ServerGo.StacksMB > 0 &&
			res.ServerGo.GoalMB > 0 && res.ServerGo.GCCycles > 0 && res.ServerGo.LimitMB == 0},
		{"agents' RSS read", res.AgentsRSSMB > 0 && res.AgentsAnonMB > 0 && res.AgentsAnonMB <= res.AgentsRSSMB},
		// A tiny fleet converges in tens of milliseconds, less than a
		// clock tick of CPU in the agent processes: read over both phases.
		{"agents' CPU read", res.AgentsConvergeCPUS >= 0 && res.AgentsConvergeCPUS+res.AgentsRolloutCPUS > 0},
		{"CPU load ran", res.CPULoad == 1 && res.CPULoadCPUS > 0},
		{"load sampled", res.LoadAvgMax1 > 0 || res.LoadAvgStart == "0.00 0.00 0.00"},
		{"the victim's death in the gossip log", slices.ContainsFunc(res.GossipLog, func(l string) bool { return strings.Contains(l, victim) })},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: not so in %+v", c.name, *res)
		}
	}
}

func TestRunSmallFleetAgentProcsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and 3 agent child processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const nodes = 3
	// More processes than nodes: one agent each. The server's memory
	// limit (generous: this process also runs the test) is set while it
	// runs and put back when it closes.
	// The first agent process profiles the measured phases.
	was := debug.SetMemoryLimit(-1)
	profile := filepath.Join(t.TempDir(), "agents.pprof")
	res, err := Run(ctx, Config{Nodes: nodes, AgentProcs: 5, AgentsCommand: agentsChildCommand, Dir: t.TempDir(), Timeout: time.Minute,
		MemoryLimit: 1 << 30, AgentsCPUProfile: profile})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if b, err := os.ReadFile(profile); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("agents' CPU profile: %v, %d bytes; want a gzipped pprof profile", err, len(b))
	}
	if res.PodsRunning != nodes || res.AgentProcs != nodes || res.Gossip || res.FalseNotReady != 0 || res.Connections < nodes {
		t.Errorf("result %+v: want %d pods Running, %d processes, no gossip, no false NotReady, a connection per process", *res, nodes, nodes)
	}
	if res.ServerGo == nil || res.ServerGo.LimitMB != 1024 {
		t.Errorf("server_go %+v: want the 1024 MiB memory limit in force", res.ServerGo)
	}
	if got := debug.SetMemoryLimit(-1); got != was {
		t.Errorf("memory limit after the run: %d, want the earlier %d", got, was)
	}
}

// With OwnConnections every simulated agent dials its own connection, as
// real nodes do; without it, the agents of a process share a pool (one
// connection each for this many streams).
func TestRunOwnConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and 2 agent child processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const nodes = 6
	for _, own := range []bool{false, true} {
		res, err := Run(ctx, Config{Nodes: nodes, AgentProcs: 2, AgentsCommand: agentsChildCommand, Dir: t.TempDir(),
			Timeout: time.Minute, OwnConnections: own})
		if err != nil {
			t.Fatalf("Run (own connections %v): %v", own, err)
		}
		if res.PodsRunning != nodes || res.OwnConnections != own {
			t.Errorf("own connections %v: result %+v: want %d pods Running and own_connections %v", own, *res, nodes, own)
		}
		if shared := res.Connections < nodes; shared == own {
			t.Errorf("own connections %v: %d connections for %d agents", own, res.Connections, nodes)
		}
		noted := slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "--own-connections") })
		if noted == own {
			t.Errorf("own connections %v: notes %q: want the shared connections noted only when shared", own, res.Notes)
		}
	}
}

// TestRunUnreachableRollout: 20 nodes, 5 % (one node) stopped mid-rollout
// with maxUnavailable 10 % (two), a 1-second grace. everynode's rule: every
// reachable node is updated and the status reads complete, the condition
// naming the pending node. Kubernetes' rule (unreachable-blocks): the
// reachable nodes are updated within the budget left, and the status never
// reads complete.
func TestRunUnreachableRollout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and 20 agents, twice")
	}
	for _, blocks := range []bool{false, true} {
		t.Run(fmt.Sprintf("blocks=%v", blocks), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			const nodes = 20
			res, err := Run(ctx, Config{Nodes: nodes, RolloutUnreachable: 5, UnreachableBlocks: blocks,
				UnreachableGrace: time.Second, UnreachableStatusWait: 5 * time.Second, Dir: t.TempDir(), Timeout: time.Minute})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			t.Logf("%+v", *res)
			ok := res.UnreachableNodes == 1 && res.UnreachablePct == 5 && res.UnreachableBlocks == blocks &&
				res.RolloutReachableS > 0 && res.UnreachableUpdated == nodes-1 && res.UnreachableStoppedAtS > 0
			if blocks {
				ok = ok && res.RolloutStatusS == 0 && res.UnreachableStatusWaitS == 5 &&
					strings.HasPrefix(res.UnreachableStatus, fmt.Sprintf("desired %d, updated %d,", nodes, nodes-1))
			} else {
				ok = ok && res.RolloutStatusS >= res.RolloutReachableS &&
					res.UnreachableStatus == fmt.Sprintf("desired %d, updated %d, available %d; Progressing UnreachableNodesPending", nodes-1, nodes-1, nodes-1)
			}
			if !ok {
				t.Errorf("result %+v", *res)
			}
		})
	}
}
