package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/rollout"
	"github.com/everynode/everynode/server"
)

// TestRolloutUnreachableNodes is issue 15's "a rollout on 20 nodes with 3
// stopped agents finishes for 17 and updates the 3 within one sync of
// their return" (docs/rollouts.md §7), with real kubectl and a 1-second
// grace: once the three nodes have been Unknown for the grace, the status
// counts the 17 reachable ones; `kubectl set image` rolls out to them
// while the pods of the three stay untouched; `kubectl rollout status` and
// `everynode rollout status` report the rollout complete; the Progressing
// condition (get -o yaml, describe) and an event name the three. When
// their agents return, they are updated and the condition says the
// revision is available everywhere.
func TestRolloutUnreachableNodes(t *testing.T) {
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("EVERYNODE_REQUIRE_KUBECTL") == "1" {
			t.Fatalf("kubectl is required (EVERYNODE_REQUIRE_KUBECTL=1) but not on PATH: %v", err)
		}
		t.Skipf("SKIPPING real-kubectl test: kubectl not on PATH (%v); set EVERYNODE_REQUIRE_KUBECTL=1 to fail instead", err)
	}
	everynode := buildEverynode(t)
	const n = 20
	c := newClusterWith(t, n, func(cfg *server.Config) { cfg.UnreachableGrace = time.Second })
	kc := kfKubeconfig(t, c)
	k := &kfTool{t: t, name: "kubectl", bin: bin, pre: []string{"--kubeconfig", kc, "--cache-dir", filepath.Join(t.TempDir(), "kube-cache")}, env: []string{"KUBECONFIG=" + kc}}
	e := &kfTool{t: t, name: "everynode", bin: everynode, env: []string{"KUBECONFIG=" + kc}}
	ds := newDaemonSet("agent")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: maxUnavailable(2)}
	before, oldHash := c.startDS(ds, n)

	away := []string{"node-11", "node-17", "node-4"}
	var reachable []string
	for _, name := range nodeNames(n) {
		if !slices.Contains(away, name) {
			reachable = append(reachable, name)
		}
	}
	for _, name := range away {
		c.stopNode(name)
		c.members.SetAlive(name, false)
	}
	c.waitStatus("agent", counts{desired: n - 3, current: n - 3, ready: n - 3, updated: n - 3, available: n - 3})

	k.ok("set", "image", "ds/agent", "daemon="+imageV2)
	out := k.ok("rollout", "status", "ds/agent", "--timeout=90s")
	kfWantLastLine(t, out, `daemon set "agent" successfully rolled out`)
	newHash := c.currentRevision("agent", "app=agent").Labels[hashLabel]
	if newHash == oldHash {
		t.Fatal("the image change made no new revision")
	}
	const pending = "rolled out to every reachable node; 3 unreachable nodes pending, updated when back: node-11 (down since "
	c.waitCondition("agent", rollout.ReasonUnreachablePending, pending)
	eventually(t, waitLong, func() error { return c.awayUntouched("agent", reachable, newHash, away, before) })
	c.waitEvents("agent", rollout.ReasonUnreachablePending, 1)
	kfWant(t, k.ok("get", "ds", "agent", "-o", "yaml"), "reason: "+rollout.ReasonUnreachablePending)
	desc := k.ok("describe", "ds", "agent")
	for _, w := range []string{rollout.ReasonUnreachablePending, "node-17 (down since", "node-4 (down since"} {
		kfWant(t, desc, w)
	}
	out = e.ok("rollout", "status", "ds/agent", "--timeout=60s", "--nodes=false")
	kfWant(t, out, `daemon set "agent" successfully `+pending)

	// The three come back: each is updated at once; the rollout completes
	// everywhere.
	for _, name := range away {
		c.startNode(name, nil)
	}
	after := c.waitRolledOut("agent", n, newHash)
	for _, name := range reachable {
		if after[name].Labels[hashLabel] != newHash {
			t.Fatalf("node %s: revision %s", name, after[name].Labels[hashLabel])
		}
	}
	c.waitCondition("agent", rollout.ReasonNewRevisionAvailable, "successfully progressed")
	c.waitStatus("agent", counts{desired: n, current: n, ready: n, updated: n, available: n})
	out = k.ok("rollout", "status", "ds/agent", "--timeout=60s")
	kfWantLastLine(t, out, `daemon set "agent" successfully rolled out`)
}

// awayUntouched checks that the reachable nodes run one ready pod of hash
// each and that the nodes away still hold the very pods they had before.
func (c *cluster) awayUntouched(name string, reachable []string, hash string, away []string, before map[string]*corev1.Pod) error {
	got, err := c.podsByNode(name)
	if err != nil {
		return err
	}
	for _, node := range reachable {
		p, ok := got[node]
		if !ok || p.Labels[hashLabel] != hash || !runningReady(p) {
			return fmt.Errorf("reachable node %s: pod %v not running revision %s and ready", node, p, hash)
		}
	}
	for _, node := range away {
		p, ok := got[node]
		if !ok || p.UID != before[node].UID {
			return fmt.Errorf("node %s away: its pod was replaced or removed (%v)", node, ok)
		}
	}
	return nil
}
