package integration

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// TestNodeLabels: a nodeSelector DaemonSet, and one with the same rule as
// required node affinity, follow label changes on Nodes (as `kubectl label
// node`): a newly matching node gets a pod, a node that stops matching loses
// it, other pods are untouched.
func TestNodeLabels(t *testing.T) {
	c := newCluster(t, 4)
	c.patchNode("node-0", map[string]any{"metadata": map[string]any{"labels": map[string]string{"role": "edge"}}})
	c.patchNode("node-1", map[string]any{"metadata": map[string]any{"labels": map[string]string{"role": "edge"}}})
	ds := newDaemonSet("edge")
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"role": "edge"}
	c.createDS(ds)
	affine := newDaemonSet("affine")
	affine.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "role", Operator: corev1.NodeSelectorOpIn, Values: []string{"edge"}}},
		}}},
	}}
	c.createDS(affine)
	// both checks the two DaemonSets' pods are on exactly nodes.
	both := func(nodes ...string) error {
		if _, err := c.onePodPerNode("app=affine", nodes, ""); err != nil {
			return err
		}
		_, err := c.onePodPerNode("app=edge", nodes, "")
		return err
	}

	var first map[string]*corev1.Pod
	eventually(t, waitLong, func() (err error) {
		if err := both("node-0", "node-1"); err != nil {
			return err
		}
		first, err = c.onePodPerNode("app=edge", []string{"node-0", "node-1"}, "")
		return err
	})
	c.waitStatus("edge", counts{desired: 2, current: 2, ready: 2, updated: 2, available: 2})
	c.waitStatus("affine", counts{desired: 2, current: 2, ready: 2, updated: 2, available: 2})

	t.Run("label added", func(t *testing.T) {
		c := c.sub(t)
		c.patchNode("node-2", map[string]any{"metadata": map[string]any{"labels": map[string]string{"role": "edge"}}})
		eventually(t, waitLong, func() error { return both("node-0", "node-1", "node-2") })
		c.waitStatus("edge", counts{desired: 3, current: 3, ready: 3, updated: 3, available: 3})
		c.waitStatus("affine", counts{desired: 3, current: 3, ready: 3, updated: 3, available: 3})
	})
	t.Run("label removed", func(t *testing.T) {
		c := c.sub(t)
		c.patchNode("node-0", map[string]any{"metadata": map[string]any{"labels": map[string]any{"role": nil}}})
		eventually(t, waitLong, func() error { return c.podGone(first["node-0"].Name, first["node-0"].UID) })
		var now map[string]*corev1.Pod
		eventually(t, waitLong, func() (err error) {
			if err := both("node-1", "node-2"); err != nil {
				return err
			}
			now, err = c.onePodPerNode("app=edge", []string{"node-1", "node-2"}, "")
			return err
		})
		if now["node-1"].UID != first["node-1"].UID {
			t.Errorf("pod on node-1 was replaced")
		}
		c.waitStatus("edge", counts{desired: 2, current: 2, ready: 2, updated: 2, available: 2})
		c.waitStatus("affine", counts{desired: 2, current: 2, ready: 2, updated: 2, available: 2})
	})
}

// TestTaints: docs/controller-rules.md §1.4. An untolerated NoSchedule taint
// keeps the running pod (same uid) but status counts the node as misscheduled
// and not desired; a pod deleted there is not re-created until the taint goes.
// An untolerated NoExecute taint removes the DaemonSet's pod and evicts a plain
// pod (node lifecycle), while a DaemonSet that tolerates it keeps its pod.
func TestTaints(t *testing.T) {
	c := newCluster(t, 4)
	c.createDS(newDaemonSet("plain"))
	tolerant := newDaemonSet("tolerant")
	tolerant.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "example.com/evict", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	c.createDS(tolerant)
	all := nodeNames(4)
	var plain, tol map[string]*corev1.Pod
	eventually(t, waitLong, func() (err error) {
		if plain, err = c.onePodPerNode("app=plain", all, ""); err != nil {
			return err
		}
		tol, err = c.onePodPerNode("app=tolerant", all, "")
		return err
	})
	c.waitStatus("plain", counts{desired: 4, current: 4, ready: 4, updated: 4, available: 4})

	noSchedule := corev1.Taint{Key: "example.com/maintenance", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	t.Run("NoSchedule keeps running pod, counted misscheduled", func(t *testing.T) {
		c := c.sub(t)
		c.setTaints("node-1", noSchedule)
		// Kubernetes: shouldRun=false, shouldContinueRunning=true: the pod
		// stays; status counts the node in numberMisscheduled and not in
		// desiredNumberScheduled (nor current/ready/available/updated).
		c.waitStatus("plain", counts{desired: 3, current: 3, ready: 3, updated: 3, available: 3, misscheduled: 1})
		now, err := c.onePodPerNode("app=plain", all, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range all {
			if now[n].UID != plain[n].UID {
				t.Errorf("pod on %s replaced after a NoSchedule taint on node-1", n)
			}
		}
	})
	t.Run("NoSchedule: no new pod on the tainted node", func(t *testing.T) {
		c := c.sub(t)
		p := plain["node-1"]
		c.deletePod(p.Name)
		eventually(t, waitLong, func() error { return c.podGone(p.Name, p.UID) })
		c.waitStatus("plain", counts{desired: 3, current: 3, ready: 3, updated: 3, available: 3})
		untainted := []string{"node-0", "node-2", "node-3"}
		consistently(t, time.Second, func() error {
			_, err := c.onePodPerNode("app=plain", untainted, "")
			return err
		})
		// A DaemonSet created now skips the node too.
		c.createDS(newDaemonSet("late"))
		eventually(t, waitLong, func() error {
			_, err := c.onePodPerNode("app=late", untainted, "")
			return err
		})
		c.waitStatus("late", counts{desired: 3, current: 3, ready: 3, updated: 3, available: 3})
		if _, err := c.onePodPerNode("app=late", untainted, ""); err != nil {
			t.Fatal(err)
		}
		c.setTaints("node-1")
		eventually(t, waitLong, func() error {
			if _, err := c.onePodPerNode("app=late", all, ""); err != nil {
				return err
			}
			_, err := c.onePodPerNode("app=plain", all, "")
			return err
		})
		c.waitStatus("plain", counts{desired: 4, current: 4, ready: 4, updated: 4, available: 4})
	})
	t.Run("NoExecute evicts non-tolerating pods", func(t *testing.T) {
		c := c.sub(t)
		now, err := c.onePodPerNode("app=plain", all, "")
		if err != nil {
			t.Fatal(err)
		}
		bare := c.createBarePod("bare", "node-2")
		c.setTaints("node-2", corev1.Taint{Key: "example.com/evict", Effect: corev1.TaintEffectNoExecute})
		eventually(t, waitLong, func() error {
			if err := c.podGone(now["node-2"].Name, now["node-2"].UID); err != nil {
				return err
			}
			return c.podGone(bare.Name, bare.UID)
		})
		rest := []string{"node-0", "node-1", "node-3"}
		eventually(t, waitLong, func() error {
			_, err := c.onePodPerNode("app=plain", rest, "")
			return err
		})
		c.waitStatus("plain", counts{desired: 3, current: 3, ready: 3, updated: 3, available: 3})
		c.waitStatus("tolerant", counts{desired: 4, current: 4, ready: 4, updated: 4, available: 4})
		tolNow, err := c.onePodPerNode("app=tolerant", all, "")
		if err != nil {
			t.Fatal(err)
		}
		if tolNow["node-2"].UID != tol["node-2"].UID {
			t.Errorf("tolerating DaemonSet's pod on node-2 was replaced")
		}
		eventually(t, waitLong, func() error {
			if n := c.eventsFor("Pod", bare.Name, "TaintManagerEviction"); n == 0 {
				return fmt.Errorf("no TaintManagerEviction event for %s", bare.Name)
			}
			return nil
		})
	})
}

// TestAutomaticTolerations: docs/controller-rules.md §1.3. A cordoned node
// carrying the unschedulable NoSchedule taint still gets daemon pods; the
// network-unavailable NoSchedule taint is tolerated only by hostNetwork
// DaemonSets.
func TestAutomaticTolerations(t *testing.T) {
	c := newCluster(t, 3)
	all := nodeNames(3)
	c.patchNode("node-1", map[string]any{"spec": map[string]any{"unschedulable": true}})
	c.setTaints("node-1", corev1.Taint{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule})
	c.setTaints("node-2", corev1.Taint{Key: "node.kubernetes.io/network-unavailable", Effect: corev1.TaintEffectNoSchedule})

	c.createDS(newDaemonSet("plain"))
	host := newDaemonSet("host")
	host.Spec.Template.Spec.HostNetwork = true
	c.createDS(host)
	eventually(t, waitLong, func() error {
		if _, err := c.onePodPerNode("app=host", all, ""); err != nil {
			return err
		}
		_, err := c.onePodPerNode("app=plain", []string{"node-0", "node-1"}, "")
		return err
	})
	c.waitStatus("plain", counts{desired: 2, current: 2, ready: 2, updated: 2, available: 2})
	c.waitStatus("host", counts{desired: 3, current: 3, ready: 3, updated: 3, available: 3})
	pods, err := c.pods("app=host")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if !tolerates(p, "node.kubernetes.io/network-unavailable", corev1.TaintEffectNoSchedule) {
			t.Errorf("hostNetwork pod %s lacks the network-unavailable toleration", p.Name)
		}
	}
}

// TestFailedPod: a daemon pod whose phase is set to Failed through the API
// is deleted (FailedDaemonPod event) and replaced by a new pod (new uid) on
// the same node; the other pods are untouched.
func TestFailedPod(t *testing.T) {
	c := newCluster(t, 3)
	c.createDS(newDaemonSet("agent"))
	all := nodeNames(3)
	var before map[string]*corev1.Pod
	eventually(t, waitLong, func() (err error) {
		before, err = c.onePodPerNode("app=agent", all, "")
		return err
	})
	victim := before["node-1"]
	obj, err := c.admin.Get(c.ctx, resources.Pods, ns, victim.Name)
	if err != nil {
		t.Fatal(err)
	}
	pod := obj.(*corev1.Pod)
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Reason = "Evicted"
	pod.Status.Message = "set by the test"
	if _, err := c.admin.UpdateStatus(c.ctx, pod, client.WriteOptions{}); err != nil {
		t.Fatalf("update status to Failed: %v", err)
	}
	eventually(t, waitLong, func() error { return c.podGone(victim.Name, victim.UID) })
	var after map[string]*corev1.Pod
	eventually(t, waitLong, func() (err error) {
		after, err = c.onePodPerNode("app=agent", all, "")
		return err
	})
	if after["node-1"].UID == victim.UID {
		t.Fatalf("failed pod not replaced")
	}
	for _, n := range []string{"node-0", "node-2"} {
		if after[n].UID != before[n].UID {
			t.Errorf("pod on %s replaced", n)
		}
	}
	c.waitStatus("agent", counts{desired: 3, current: 3, ready: 3, updated: 3, available: 3})
	eventually(t, waitLong, func() error {
		if c.events("agent", "FailedDaemonPod") != 1 {
			return fmt.Errorf("want 1 FailedDaemonPod event, have %d", c.events("agent", "FailedDaemonPod"))
		}
		return nil
	})
}

// createBarePod creates a pod bound to node, owned by nobody.
func (c *cluster) createBarePod(name, node string) *corev1.Pod {
	c.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"bare": "true"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: imageV1}}},
	}
	resources.Pods.SetTypeMeta(p)
	out, err := c.admin.Create(c.ctx, p, client.WriteOptions{})
	if err != nil {
		c.t.Fatalf("create pod %s: %v", name, err)
	}
	created := out.(*corev1.Pod)
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
	return created
}

// eventsFor counts events of a reason about an object of kind in ns.
func (c *cluster) eventsFor(kind, name, reason string) int {
	c.t.Helper()
	objs, _, err := c.admin.List(c.ctx, resources.Events, ns, client.ListOptions{
		FieldSelector: fmt.Sprintf("involvedObject.kind=%s,involvedObject.name=%s,reason=%s", kind, name, reason)})
	if err != nil {
		c.t.Fatalf("list events: %v", err)
	}
	return len(objs)
}
