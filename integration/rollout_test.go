package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/rollout"
)

// Rollout settings end to end (docs/rollouts.md): the real API server and
// controllers, simulated nodes on the fake runtime.

// annotateDS merge-patches ds's annotations (nil values remove).
func (c *cluster) annotateDS(name string, ann map[string]*string) {
	c.t.Helper()
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.admin.Patch(c.ctx, resources.DaemonSets, ns, name, types.MergePatchType, data, client.WriteOptions{}, ""); err != nil {
		c.t.Fatalf("annotate daemonset %s: %v", name, err)
	}
}

func strPtr(s string) *string { return &s }

// podsByNode maps each node to "hash" of its one live pod of the DaemonSet
// (or an error when a node has several).
func (c *cluster) podsByNode(name string) (map[string]*corev1.Pod, error) {
	pods, err := c.pods("app=" + name)
	if err != nil {
		return nil, err
	}
	out := map[string]*corev1.Pod{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if q, ok := out[p.Spec.NodeName]; ok {
			return nil, fmt.Errorf("node %s runs two pods: %s and %s", p.Spec.NodeName, q.Name, p.Name)
		}
		out[p.Spec.NodeName] = p
	}
	return out, nil
}

// wantRevisions checks that the nodes named run one ready pod of hash each
// and that only they run pods.
func (c *cluster) wantRevisions(name string, want map[string]string) error {
	got, err := c.podsByNode(name)
	if err != nil {
		return err
	}
	for node, h := range want {
		p, ok := got[node]
		switch {
		case !ok:
			return fmt.Errorf("node %s has no pod", node)
		case p.Labels[hashLabel] != h:
			return fmt.Errorf("node %s runs %s of revision %s, want %s", node, p.Name, p.Labels[hashLabel], h)
		case !runningReady(p):
			return fmt.Errorf("node %s: pod %s not running and ready", node, p.Name)
		}
	}
	if len(got) != len(want) {
		nodes := make([]string, 0, len(got))
		for n := range got {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		return fmt.Errorf("pods on %v, want %d nodes", nodes, len(want))
	}
	return nil
}

func (c *cluster) progressing(name string) *appsv1.DaemonSetCondition {
	return rollout.Condition(c.getDS(name).Status, rollout.ConditionProgressing)
}

func (c *cluster) waitCondition(name, reason, msg string) {
	c.t.Helper()
	eventually(c.t, waitLong, func() error {
		cond := c.progressing(name)
		if cond == nil || cond.Reason != reason || !strings.Contains(cond.Message, msg) {
			return fmt.Errorf("Progressing condition %+v, want reason %s message %q", cond, reason, msg)
		}
		return nil
	})
}

// waitEvents waits until the DaemonSet has n events of reason (the
// recorder writes them asynchronously) and checks no more follow at once.
func (c *cluster) waitEvents(name, reason string, n int) {
	c.t.Helper()
	eventually(c.t, waitLong, func() error {
		if got := c.events(name, reason); got != n {
			return fmt.Errorf("%d %s events about %s, want %d", got, reason, name, n)
		}
		return nil
	})
}

func allOn(hash string, nodes ...string) map[string]string {
	m := map[string]string{}
	for _, n := range nodes {
		m[n] = hash
	}
	return m
}

// TestRolloutPauseHoldsUnderNodeChurn: a paused DaemonSet whose template
// changed replaces no pod for 60 seconds of wall time (docs/rollouts.md and
// issue 15 set the figure) while nodes join and leave; the joining nodes get
// a pod of the old revision. Resume then rolls out to every node.
func TestRolloutPauseHoldsUnderNodeChurn(t *testing.T) {
	const n = 4
	c := newCluster(t, n)
	ds := newDaemonSet("agent")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: maxUnavailable(2)}
	before, oldHash := c.startDS(ds, n)

	c.annotateDS("agent", map[string]*string{rollout.Paused: strPtr("true")})
	c.waitCondition("agent", rollout.ReasonPaused, "DaemonSet is paused")
	c.updateDS("agent", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = imageV2 })
	eventually(t, waitLong, func() error {
		if d := c.getDS("agent"); d.Status.ObservedGeneration < d.Generation {
			return fmt.Errorf("generation %d not observed yet", d.Generation)
		}
		return nil
	})
	newHash := c.currentRevision("agent", "app=agent").Labels[hashLabel]
	if newHash == oldHash {
		t.Fatal("the image change made no new revision")
	}

	// The churn, by time into the window: node-4 joins at 5 s, node-1 leaves
	// (agent stopped, Node deleted) at 20 s, node-5 joins at 35 s.
	start := time.Now()
	churn := []struct {
		at time.Duration
		do func()
	}{
		{5 * time.Second, func() { c.startNode("node-4", nil) }},
		{20 * time.Second, func() {
			c.stopNode("node-1")
			if _, err := c.admin.Delete(c.ctx, resources.Nodes, "", "node-1", metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete node-1: %v", err)
			}
		}},
		{35 * time.Second, func() { c.startNode("node-5", nil) }},
	}
	consistently(t, 60*time.Second, func() error {
		for len(churn) > 0 && time.Since(start) >= churn[0].at {
			churn[0].do()
			churn = churn[1:]
		}
		pods, err := c.pods("app=agent")
		if err != nil {
			return err
		}
		for _, p := range pods {
			if h := p.Labels[hashLabel]; h != oldHash {
				return fmt.Errorf("after %s: pod %s on %s runs revision %s; paused, every pod must stay on %s",
					time.Since(start).Round(time.Second), p.Name, p.Spec.NodeName, h, oldHash)
			}
			if was, ok := before[p.Spec.NodeName]; ok && was.UID != p.UID && p.Spec.NodeName != "node-1" {
				return fmt.Errorf("pod of node %s replaced (%s → %s) while paused", p.Spec.NodeName, was.Name, p.Name)
			}
		}
		if d := c.getDS("agent"); d.Status.UpdatedNumberScheduled != 0 {
			return fmt.Errorf("status.updatedNumberScheduled %d while paused", d.Status.UpdatedNumberScheduled)
		}
		return nil
	})
	if len(churn) != 0 {
		t.Fatalf("%d churn steps never ran", len(churn))
	}
	nodes := []string{"node-0", "node-2", "node-3", "node-4", "node-5"}
	eventually(t, waitLong, func() error { return c.wantRevisions("agent", allOn(oldHash, nodes...)) })
	c.waitEvents("agent", rollout.ReasonPaused, 1)

	c.annotateDS("agent", map[string]*string{rollout.Paused: nil})
	eventually(t, waitLong, func() error { return c.wantRevisions("agent", allOn(newHash, nodes...)) })
	c.waitCondition("agent", rollout.ReasonNewRevisionAvailable, "successfully progressed")
	c.waitEvents("agent", rollout.ReasonResumed, 1)
}

// TestRolloutCanaryPromote: with a canary selector, only the matching nodes
// update; the rest keep the old revision until promote; partition 1 then
// holds the canary to one of them.
func TestRolloutCanaryPromote(t *testing.T) {
	const n = 5
	c := newCluster(t, n)
	ds := newDaemonSet("agent")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: maxUnavailable(1)}
	_, oldHash := c.startDS(ds, n)
	for _, node := range []string{"node-1", "node-3"} {
		c.patchNode(node, map[string]any{"metadata": map[string]any{"labels": map[string]string{"canary": "true"}}})
	}
	c.annotateDS("agent", map[string]*string{rollout.CanarySelector: strPtr("canary=true"), rollout.Partition: strPtr("1")})
	c.updateDS("agent", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = imageV2 })

	c.waitCondition("agent", rollout.ReasonWaitingForPromote, "canary: 1/1 updated and ready; waiting for promote")
	newHash := c.currentRevision("agent", "app=agent").Labels[hashLabel]
	want := allOn(oldHash, nodeNames(n)...)
	want["node-1"] = newHash
	eventually(t, waitLong, func() error { return c.wantRevisions("agent", want) })

	// A wider canary: every matching node.
	c.annotateDS("agent", map[string]*string{rollout.Partition: nil})
	c.waitCondition("agent", rollout.ReasonWaitingForPromote, "canary: 2/2 updated and ready; waiting for promote")
	want["node-3"] = newHash
	eventually(t, waitLong, func() error { return c.wantRevisions("agent", want) })
	consistently(t, 2*time.Second, func() error { return c.wantRevisions("agent", want) })

	c.annotateDS("agent", map[string]*string{rollout.CanarySelector: nil})
	c.waitRolledOut("agent", n, newHash)
	c.waitCondition("agent", rollout.ReasonNewRevisionAvailable, "successfully progressed")
	c.waitEvents("agent", rollout.ReasonPromoted, 1)
}

// TestRolloutVerbsCLI: the everynode binary's rollout pause, resume,
// promote and status against a partition of 40% of 5 nodes (2, rounded up
// as maxUnavailable percentages are).
func TestRolloutVerbsCLI(t *testing.T) {
	bin := buildEverynode(t)
	const n = 5
	c := newCluster(t, n)
	k := &kfTool{t: t, name: "everynode", bin: bin, env: []string{"KUBECONFIG=" + kfKubeconfig(t, c)}}
	ds := newDaemonSet("agent")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: maxUnavailable(1)}
	_, oldHash := c.startDS(ds, n)

	kfWant(t, k.ok("rollout", "pause", "ds/agent"), "daemonset.apps/agent paused\n")
	kfWant(t, k.fails("rollout", "pause", "ds/agent"), `daemonsets.apps "agent" is already paused`)
	k.ok("annotate", "ds/agent", rollout.Partition+"=40%")
	k.ok("set", "image", "ds/agent", "daemon="+imageV2)
	c.waitCondition("agent", rollout.ReasonPaused, "")
	out := k.ok("rollout", "status", "ds/agent", "--watch=false")
	kfWantLastLine(t, out, `Waiting for daemon set "agent" rollout to finish: paused with 0 out of 5 new pods updated; resume it with "everynode rollout resume ds/agent"`)
	r := k.run("rollout", "status", "ds/agent", "--timeout=2s", "--nodes=false")
	if r.code != 1 || !strings.Contains(r.err, "timed out waiting for the condition") {
		t.Fatalf("rollout status of a paused rollout: exit %d, %q; want it to wait until --timeout", r.code, r.err)
	}

	kfWant(t, k.ok("rollout", "resume", "ds/agent"), "daemonset.apps/agent resumed\n")
	out = k.ok("rollout", "status", "ds/agent", "--timeout=60s", "--nodes=false")
	kfWantLastLine(t, out, "canary: 2/2 updated and ready; waiting for promote")
	newHash := c.currentRevision("agent", "app=agent").Labels[hashLabel]
	want := allOn(oldHash, nodeNames(n)...)
	want["node-0"], want["node-1"] = newHash, newHash
	eventually(t, waitLong, func() error { return c.wantRevisions("agent", want) })

	kfWant(t, k.ok("rollout", "promote", "ds/agent"), "daemonset.apps/agent promoted\n")
	out = k.ok("rollout", "status", "ds/agent", "--timeout=60s", "--nodes=false")
	kfWantLastLine(t, out, `daemon set "agent" successfully rolled out`)
	c.waitRolledOut("agent", n, newHash)
	kfWant(t, k.fails("rollout", "promote", "ds/agent"), "has no canary to promote")
}

// TestKubectlRolloutPause: real kubectl annotate pauses a rollout, and
// kubectl describe and get -o yaml show why.
func TestKubectlRolloutPause(t *testing.T) {
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("EVERYNODE_REQUIRE_KUBECTL") == "1" {
			t.Fatalf("kubectl is required (EVERYNODE_REQUIRE_KUBECTL=1) but not on PATH: %v", err)
		}
		t.Skipf("SKIPPING real-kubectl test: kubectl not on PATH (%v); set EVERYNODE_REQUIRE_KUBECTL=1 to fail instead", err)
	}
	const n = 3
	c := newCluster(t, n)
	kc := kfKubeconfig(t, c)
	k := &kfTool{t: t, name: "kubectl", bin: bin, pre: []string{"--kubeconfig", kc, "--cache-dir", filepath.Join(t.TempDir(), "kube-cache")}, env: []string{"KUBECONFIG=" + kc}}
	ds := newDaemonSet("agent")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: maxUnavailable(1)}
	_, oldHash := c.startDS(ds, n)

	kfWant(t, k.ok("annotate", "ds/agent", "rollout.everynode.io/paused=true"), "daemonset.apps/agent annotated")
	kfWant(t, k.fails("annotate", "ds/agent", "--overwrite", "rollout.everynode.io/paused=yes"),
		`metadata.annotations[rollout.everynode.io/paused]: Unsupported value: "yes": supported values: "true", "false"`)
	k.ok("set", "image", "ds/agent", "daemon="+imageV2)
	c.waitCondition("agent", rollout.ReasonPaused, "DaemonSet is paused")
	consistently(t, 3*time.Second, func() error { return c.wantRevisions("agent", allOn(oldHash, nodeNames(n)...)) })

	var desc string
	eventually(t, waitLong, func() error {
		desc = k.ok("describe", "ds", "agent")
		for _, w := range []string{"rollout.everynode.io/paused: true", "DaemonSetPaused", "DaemonSet is paused"} {
			if !strings.Contains(desc, w) {
				return fmt.Errorf("kubectl describe lacks %q:\n%s", w, desc)
			}
		}
		return nil
	})
	yaml := k.ok("get", "ds", "agent", "-o", "yaml")
	for _, w := range []string{"type: Progressing", "reason: DaemonSetPaused", "status: Unknown", "message: DaemonSet is paused"} {
		kfWant(t, yaml, w)
	}

	kfWant(t, k.ok("annotate", "ds/agent", "rollout.everynode.io/paused-"), "daemonset.apps/agent annotated")
	out := k.ok("rollout", "status", "ds/agent", "--timeout=60s")
	kfWantLastLine(t, out, `daemon set "agent" successfully rolled out`)
	c.waitCondition("agent", rollout.ReasonNewRevisionAvailable, "")
	kfWant(t, k.ok("describe", "ds", "agent"), "DaemonSetResumed")
}
