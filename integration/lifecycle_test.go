package integration

import (
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/rollout"
)

// TestNodeUnreachable: a node whose agent stops and which membership
// declares dead becomes Ready=Unknown with the unreachable NoExecute taint;
// its daemon pod stays (automatic toleration) but is marked not ready, so
// status counts it desired and current but not ready; a pod tolerating
// unreachable for 0 s is evicted at once, one tolerating it for 2 s after
// those, and a bare pod, which admission gave 300 s, stays. When the node is back, the taint goes and the same daemon pod is
// ready again.
func TestNodeUnreachable(t *testing.T) {
	const n = 3
	c := newCluster(t, n)
	// Kubernetes' counters: without the annotation a rollout sets the node
	// aside after the grace and the status stops counting it
	// (docs/rollouts.md §7, TestRolloutUnreachableNodes).
	ds := newDaemonSet("agent")
	ds.Annotations = map[string]string{rollout.UnreachableBlocks: "true"}
	before, _ := c.startDS(ds, n)
	// A bare pod gets the DefaultTolerationSeconds admission's 300 s
	// tolerations (docs/security.md, "Gossip is a hint"), so it outlives
	// this test's outage; one that tolerates unreachable for 0 s goes at once.
	plain := c.createBarePod("plain", "node-1")
	c.createTolerantPod("impatient", "node-1", 0)
	c.createTolerantPod("patient", "node-1", 2)

	c.stopNode("node-1")
	c.members.SetAlive("node-1", false)
	var added time.Time
	eventually(t, waitLong, func() error {
		node, err := c.node("node-1")
		if err != nil {
			return err
		}
		for _, tt := range node.Spec.Taints {
			if tt.Key == corev1.TaintNodeUnreachable && tt.TimeAdded != nil {
				added = tt.TimeAdded.Time // second precision: at or before the real time
			}
		}
		if !hasTaint(node, corev1.TaintNodeUnreachable) {
			return fmt.Errorf("node-1 taints %v", node.Spec.Taints)
		}
		if ready := nodeReady(node); ready != corev1.ConditionUnknown {
			return fmt.Errorf("node-1 Ready=%s", ready)
		}
		return nil
	})
	// Evicted = deleted; with the node's agent away the pods stay
	// terminating (as in Kubernetes) until the node returns.
	eventually(t, waitLong, func() error { return c.podDeleting("impatient") })
	// tolerationSeconds 2 counts from the taint's timeAdded.
	if checked := time.Now(); checked.Before(added.Add(1800 * time.Millisecond)) {
		if err := c.podDeleting("patient"); err == nil {
			t.Errorf("pod tolerating unreachable for 2s evicted %s after the taint", checked.Sub(added))
		}
	}
	eventually(t, waitLong, func() error { return c.podDeleting("patient") })
	if err := c.podDeleting(plain.Name); err == nil {
		t.Error("a bare pod (300 s default tolerations) was evicted within seconds of the taint")
	}
	c.waitStatus("agent", counts{desired: n, current: n, ready: n - 1, updated: n, available: n - 1})
	obj, err := c.admin.Get(c.ctx, resources.Pods, ns, before["node-1"].Name)
	if err != nil {
		t.Fatalf("daemon pod on the unreachable node: %v", err)
	}
	if p := obj.(*corev1.Pod); p.UID != before["node-1"].UID || podReady(p) {
		t.Errorf("daemon pod on the unreachable node: uid %s (was %s) ready %v; want kept and not ready", p.UID, before["node-1"].UID, podReady(p))
	}

	c.startNode("node-1", nil)
	eventually(t, waitLong, func() error {
		node, err := c.node("node-1")
		if err != nil {
			return err
		}
		if hasTaint(node, corev1.TaintNodeUnreachable) || nodeReady(node) != corev1.ConditionTrue {
			return errors.New("node-1 not ready again yet")
		}
		return nil
	})
	eventually(t, waitLong, func() error {
		now, err := c.onePodPerNode("app=agent", nodeNames(n), "")
		if err != nil {
			return err
		}
		return sameUIDs(uids(before), uids(now))
	})
	c.waitStatus("agent", counts{desired: n, current: n, ready: n, updated: n, available: n})
	eventually(t, waitLong, func() error {
		if err := c.podGone("impatient", ""); err != nil {
			return err
		}
		return c.podGone("patient", "")
	})
}

// podDeleting reports nil once the pod has a deletionTimestamp (or is gone).
func (c *cluster) podDeleting(name string) error {
	obj, err := c.admin.Get(c.ctx, resources.Pods, ns, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if obj.GetDeletionTimestamp() == nil {
		return fmt.Errorf("pod %s not being deleted", name)
	}
	return nil
}

func (c *cluster) node(name string) (*corev1.Node, error) {
	obj, err := c.admin.Get(c.ctx, resources.Nodes, "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Node), nil
}

func hasTaint(node *corev1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func nodeReady(node *corev1.Node) corev1.ConditionStatus {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status
		}
	}
	return ""
}

// createTolerantPod creates a running pod on node that tolerates the
// unreachable taint for seconds.
func (c *cluster) createTolerantPod(name, node string, seconds int64) {
	c.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: imageV1}},
			Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &seconds}}},
	}
	resources.Pods.SetTypeMeta(p)
	if _, err := c.admin.Create(c.ctx, p, client.WriteOptions{}); err != nil {
		c.t.Fatalf("create pod %s: %v", name, err)
	}
	eventually(c.t, waitLong, func() error {
		obj, err := c.admin.Get(c.ctx, resources.Pods, ns, name)
		if err != nil {
			return err
		}
		if !runningReady(obj.(*corev1.Pod)) {
			return fmt.Errorf("pod %s not running yet", name)
		}
		return nil
	})
}
