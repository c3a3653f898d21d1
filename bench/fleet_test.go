package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// agentEnv carries an AgentTarget (JSON) to the test binary re-run as the
// separate agent process.
const agentEnv = "EVERYNODE_BENCH_AGENT_PROCESS"

func TestMain(m *testing.M) {
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
	res, err := Run(ctx, Config{
		Nodes: nodes, Gossip: true, Rollout: true, Detect: true,
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
		{"rollout_s > 0", res.RolloutS > 0},
		{"detect_s > 0", res.DetectS > 0},
		{"gossip on", res.Gossip},
		{"status latency sampled", res.StatusSamples > 0 && res.StatusP50Ms > 0 && res.StatusP99Ms >= res.StatusP50Ms},
		{"server RSS read", res.ServerRSSMB > 0},
		{"heap read", res.HeapMB > 0},
		{"agent process RSS read", res.AgentRSSMB > 0 && res.AgentAnonMB > 0 && res.AgentAnonMB <= res.AgentRSSMB},
		{"load average read", res.LoadAvgStart != "" && res.LoadAvgEnd != ""},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: not so in %+v", c.name, *res)
		}
	}
}
