package bench

import (
	"strings"
	"testing"
	"time"
)

func TestRenderTargets(t *testing.T) {
	rs := []Result{
		{Nodes: 100, ConvergeS: 0.2, EtcdFloorS: 0.1, Ratio: 2, RolloutS: 0.5, AgentRSSMB: 30, AgentAnonMB: 8, AgentFileMB: 22},
		{Nodes: 100, Gossip: true, DetectS: 3.5},
		{Nodes: 1000, ConvergeS: 4, EtcdFloorS: 0.1, Ratio: 40, RolloutS: 12, ServerRSSMB: 400, ServerAloneRSSMB: 250, ServerAloneHeapMB: 90},
	}
	var sb strings.Builder
	Render(&sb, Report{Machine: Machine{CPUs: 2, CPUModel: "test CPU"}, Date: time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC),
		Command: "make bench-fleet", Results: rs, Notes: "## Analysis\n\nhand-written"})
	out := sb.String()
	for _, want := range []string{
		"| | 100 nodes | 100 nodes, gossip | 1000 nodes | target |",
		"converge_s at 1000 nodes: 4.00 s ≤ 5 s — **met**.",
		"ratio at 100 nodes: 2.00 × ≤ 2 × — **met**.",
		"ratio at 1000 nodes: 40.00 × > 2 × — **missed** by 38.00 × (20.0× the target).",
		"rollout_s at 1000 nodes: 12.00 s > 10 s — **missed** by 2.00 s (1.2× the target).",
		"detect_s at 100 nodes: 3.50 s > 3 s — **missed**",
		"agent_rss_mb at 100 nodes: 30.00 MiB > 20 MiB — **missed**",
		"server_rss_mb at 1000 nodes: 400.00 MiB > 100 MiB — **missed**",
		"The server alone, after they stopped: RSS 250 MiB",
		"2 CPUs (test CPU)",
		"2026-11-22 06:00 UTC",
		"Kubernetes 50 s; Swarm ~15 s; Nomad 20–30 s",
		"k3s agent ~275 MB",
		"k3s server 1.4–1.6 GB",
		"hand-written",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "converge_s at 5000") {
		t.Errorf("report judges a 5,000-node target without a 5,000-node run:\n%s", out)
	}
}
