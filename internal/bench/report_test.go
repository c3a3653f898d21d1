package bench

import (
	"strings"
	"testing"
	"time"
)

func TestRenderTargets(t *testing.T) {
	rs := []Result{
		{Nodes: 100, ConvergeS: 0.2, EtcdFloorS: 0.1, Ratio: 2, RolloutS: 0.5, AgentRSSMB: 30, AgentAnonMB: 8, AgentFileMB: 22, AgentIdleCPUMsPerS: 5.25, AgentIdleWakeupsPerS: 131.4, AgentIdleS: 115},
		{Nodes: 100, Gossip: true, DetectS: 3.5},
		{Nodes: 1000, ConvergeS: 4, EtcdFloorS: 0.1, Ratio: 40, RolloutS: 12, ServerRSSMB: 400, ServerAloneRSSMB: 250, ServerAloneHeapMB: 90},
		{Nodes: 1000, AgentProcs: 2, ServerRSSMB: 150, AgentsRSSMB: 300, AgentsAnonMB: 250, ServerAloneRSSMB: 140, AgentRSSMB: 15, AgentIdleCPUMsPerS: 3.5, AgentIdleWakeupsPerS: 99.6, AgentIdleS: 115},
		{Nodes: 100, Gossip: true, AgentProcs: 100, DetectS: 2.5, SoakS: 600, CPULoad: 2, CPULoadCPUS: 1200, FalseNotReady: 1, WatchedS: 612, LoadAvgMax1: 4.5},
		{Nodes: 1000, UnreachablePct: 5, UnreachableNodes: 50, RolloutReachableS: 12.5, RolloutStatusS: 40.25, UnreachableStatus: "desired 950, updated 950, available 950; Progressing UnreachableNodesPending"},
		{Nodes: 10, Gossip: true, GossipProfile: "wan", AgentProcs: 10, IdleTrafficS: 60, IdleBytesPerSIn: 60.4, IdleBytesPerSOut: 50,
			IdleAPIBytesPerSIn: 20.4, IdleAPIBytesPerSOut: 10, IdleGossipBytesPerSIn: 40, IdleGossipBytesPerSOut: 40},
		{Nodes: 1000, UnreachablePct: 5, UnreachableBlocks: true, UnreachableNodes: 50, RolloutReachableS: 20.5, UnreachableStatusWaitS: 90, UnreachableStatus: "desired 1000, updated 950, available 950"},
		{Nodes: 10, Gossip: true, GossipProfile: "lan", AgentProcs: 10, IdleCPUS: 30, IdleCPUMsPerS: 4.5, IdleWakeupsPerS: 120, IdleLoadAvg: "1.50 1.20 1.00"},
		{Nodes: 10, Gossip: true, GossipProfile: "wan", AgentProcs: 10, IdleCPUS: 30, IdleCPUMsPerS: 2.5, IdleWakeupsPerS: 40, IdleLoadAvg: "1.00 1.00 1.00"},
	}
	var sb strings.Builder
	Render(&sb, Report{Machine: Machine{CPUs: 2, CPUModel: "test CPU"}, Date: time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC),
		Command: "make bench-fleet", Results: rs, Notes: "## Analysis\n\nhand-written"})
	out := sb.String()
	for _, want := range []string{
		"| | 100 nodes | 100 nodes, gossip | 1000 nodes | 1000 nodes | 100 nodes, gossip, 10-minute soak, CPU load 2 | 1000 nodes, 5 % stopped mid-rollout |",
		"| agent processes (simulated agents per process) | none: in the server's process | none: in the server's process | none: in the server's process | 2 (500) | 100 (1) | none: in the server's process |",
		"server_rss_mb at 1000 nodes: 150.00 MiB > 100 MiB — **missed**",
		"the agents ran in 2 other processes, 300 MiB RSS, 250 MiB anonymous: 0.25 MiB per agent",
		"| 400 (agents included) | 150 |",
		"false NotReady in a 10-minute soak at 100 nodes (gossip true, 100 agent processes, CPU load 2, 1-min load average up to 4.50): 1 in 612 s — **missed**.",
		"2 / 1200 s; 4.50",
		"detect_s at 100 nodes, gossip, 10-minute soak, CPU load 2: 2.50 s ≤ 3 s — **met**.",
		"converge_s at 1000 nodes: 4.00 s ≤ 5 s — **met**.",
		"ratio at 100 nodes: 2.00 × ≤ 2 × — **met**.",
		"ratio at 1000 nodes: 40.00 × > 2 × — **missed** by 38.00 × (20.0× the target).",
		"rollout_s at 1000 nodes: 12.00 s > 10 s — **missed** by 2.00 s (1.2× the target).",
		"detect_s at 100 nodes, gossip: 3.50 s > 3 s — **missed**",
		"agent_rss_mb at 100 nodes: 30.00 MiB > 20 MiB — **missed**",
		"| **agent_idle_cpu_ms_per_s** (that process idle, gossip lan, its own runtime settings) / wake-ups (context switches a second) | 5.25 / 131 | – | – | 3.50 / 100 | – |",
		"agent_idle_cpu_ms_per_s at 100 nodes: 5.25 ms/s > 5 ms/s — **missed** by 0.25 ms/s (1.1× the target).",
		"agent_idle_cpu_ms_per_s at 1000 nodes: 3.50 ms/s ≤ 5 ms/s — **met**.",
		"The server alone, after they stopped: RSS 250 MiB",
		"2 CPUs (test CPU)",
		"2026-11-22 06:00 UTC",
		"Kubernetes 50 s; Swarm ~15 s; Nomad 20–30 s",
		"k3s agent ~275 MB",
		"k3s server 1.4–1.6 GB",
		"hand-written",
		"| 10 nodes, gossip, idle CPU over 30 s | 10 nodes, gossip wan, idle CPU over 30 s |",
		"| 4.50 / 120 / 1.50 1.20 1.00 | 2.50 / 40 / 1.00 1.00 1.00 |",
		"idle_cpu_ms_per_s at 10 nodes, gossip, idle CPU over 30 s: 4.50 ms/s ≤ 5 ms/s — **met**.",
		"idle_cpu_ms_per_s at 10 nodes, gossip wan, idle CPU over 30 s: 2.50 ms/s > 2 ms/s — **missed**",
		"| 1000 nodes, 5 % stopped mid-rollout | 10 nodes, gossip wan, idle traffic over 60 s | 1000 nodes, 5 % stopped mid-rollout (unreachable-blocks: Kubernetes' rule) | 10 nodes, gossip, idle CPU over 30 s |",
		"| – | – | – | – | – | 12.50 (50 stopped, 5 %) | – | 20.50 (50 stopped, 5 %) |",
		"| – | – | – | – | – | – | 60 / 50 (API 20 / 10, gossip 40 / 40) | – | – | – | ≤ 125 B/s (1 kbit/s) with wan |",
		"| 40.25: desired 950, updated 950, available 950; Progressing UnreachableNodesPending | – | never (watched 90 s more): desired 1000, updated 950, available 950 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "server_rss_mb at 1000 nodes: 400.00") {
		t.Errorf("report judges the server's RSS on a run with the agents in its process although one without exists:\n%s", out)
	}
	if strings.Contains(out, "converge_s at 5000") {
		t.Errorf("report judges a 5,000-node target without a 5,000-node run:\n%s", out)
	}
}

// A window too short for CPU time in 10 ms ticks shows the wake-ups alone
// and is not judged.
func TestRenderAgentIdleShortWindow(t *testing.T) {
	var sb strings.Builder
	Render(&sb, Report{Results: []Result{{Nodes: 20, AgentRSSMB: 15, AgentIdleWakeupsPerS: 80, AgentIdleS: 0.5}}})
	out := sb.String()
	if want := "own runtime settings) / wake-ups (context switches a second) | – / 80 |"; !strings.Contains(out, want) {
		t.Errorf("report lacks %q:\n%s", want, out)
	}
	if strings.Contains(out, "agent_idle_cpu_ms_per_s at") {
		t.Errorf("report judges an idle CPU it did not measure:\n%s", out)
	}
}
