package integration

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// TestCreate: a DaemonSet on 10 nodes gets exactly one bound, Running and
// Ready pod per node, shaped as docs/controller-rules.md §2.7 says, and a
// status with every counter right; one ControllerRevision (revision 1) is its
// history.
func TestCreate(t *testing.T) {
	const n = 10
	c := newCluster(t, n)
	ds := c.createDS(newDaemonSet("agent"))

	var pods map[string]*corev1.Pod
	eventually(t, waitLong, func() (err error) {
		pods, err = c.onePodPerNode("app=agent", nodeNames(n), "")
		return err
	})
	got := c.waitStatus("agent", counts{desired: n, current: n, ready: n, updated: n, available: n})
	if got.Status.ObservedGeneration != 1 {
		t.Errorf("observedGeneration %d, want 1", got.Status.ObservedGeneration)
	}

	revs := c.revisions("app=agent")
	if len(revs) != 1 || revs[0].Revision != 1 {
		t.Fatalf("controllerrevisions %d (first revision %v), want exactly revision 1", len(revs), revs)
	}
	hash := revs[0].Labels[hashLabel]
	if revs[0].Name != "agent-"+hash {
		t.Errorf("revision name %s, want agent-%s", revs[0].Name, hash)
	}
	for node, p := range pods {
		if p.Spec.NodeName != node || p.Labels[hashLabel] != hash || p.Labels["app"] != "agent" {
			t.Errorf("pod %s: nodeName %q labels %v", p.Name, p.Spec.NodeName, p.Labels)
		}
		ref := metav1.GetControllerOf(p)
		if ref == nil || ref.UID != ds.UID || ref.Kind != "DaemonSet" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			t.Errorf("pod %s: controller ref %+v, want the DaemonSet with blockOwnerDeletion", p.Name, ref)
		}
		terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) != 1 || len(terms[0].MatchFields) != 1 || terms[0].MatchFields[0].Values[0] != node {
			t.Errorf("pod %s: node affinity %+v, want matchFields metadata.name=%s", p.Name, terms, node)
		}
		if !tolerates(p, "node.kubernetes.io/unreachable", corev1.TaintEffectNoExecute) ||
			!tolerates(p, "node.kubernetes.io/unschedulable", corev1.TaintEffectNoSchedule) ||
			tolerates(p, "node.kubernetes.io/network-unavailable", corev1.TaintEffectNoSchedule) {
			t.Errorf("pod %s: automatic tolerations wrong: %+v", p.Name, p.Spec.Tolerations)
		}
		if p.Status.HostIP == "" || len(p.Status.ContainerStatuses) != 1 || !p.Status.ContainerStatuses[0].Ready {
			t.Errorf("pod %s: status not reported by its agent: %+v", p.Name, p.Status)
		}
	}
	eventually(t, waitLong, func() error {
		if ev := c.events("agent", "SuccessfulCreate"); ev != n {
			return fmt.Errorf("%d SuccessfulCreate events, want %d", ev, n)
		}
		return nil
	})
}

// TestNodeAddedAndDeleted: a node that joins gets a pod; a node whose
// machine goes away and whose Node is deleted loses its pod (pod garbage
// collection), and the status follows both.
func TestNodeAddedAndDeleted(t *testing.T) {
	c := newCluster(t, 3)
	c.createDS(newDaemonSet("agent"))
	eventually(t, waitLong, func() error {
		_, err := c.onePodPerNode("app=agent", nodeNames(3), "")
		return err
	})
	c.waitStatus("agent", counts{desired: 3, current: 3, ready: 3, updated: 3, available: 3})

	t.Run("added", func(t *testing.T) {
		c := c.sub(t)
		c.startNode("node-3", nil)
		c.waitNode("node-3")
		eventually(t, waitLong, func() error {
			_, err := c.onePodPerNode("app=agent", nodeNames(4), "")
			return err
		})
		c.waitStatus("agent", counts{desired: 4, current: 4, ready: 4, updated: 4, available: 4})
	})

	t.Run("deleted", func(t *testing.T) {
		c := c.sub(t)
		before, err := c.onePodPerNode("app=agent", nodeNames(4), "")
		if err != nil {
			t.Fatal(err)
		}
		c.stopNode("node-1")
		c.members.Remove("node-1")
		if _, err := c.admin.Delete(c.ctx, resources.Nodes, "", "node-1", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete node: %v", err)
		}
		gone := before["node-1"]
		eventually(t, waitLong, func() error { return c.podGone(gone.Name, gone.UID) })
		rest := []string{"node-0", "node-2", "node-3"}
		after, err := c.onePodPerNode("app=agent", rest, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range rest {
			if after[n].UID != before[n].UID {
				t.Errorf("pod on %s replaced", n)
			}
		}
		c.waitStatus("agent", counts{desired: 3, current: 3, ready: 3, updated: 3, available: 3})
	})
}

func tolerates(p *corev1.Pod, key string, effect corev1.TaintEffect) bool {
	for _, tol := range p.Spec.Tolerations {
		if tol.Key == key && tol.Effect == effect && tol.Operator == corev1.TolerationOpExists {
			return true
		}
	}
	return false
}

// events counts the events of a reason about the DaemonSet.
func (c *cluster) events(dsName, reason string) int {
	c.t.Helper()
	objs, _, err := c.admin.List(c.ctx, resources.Events, ns, client.ListOptions{
		FieldSelector: fmt.Sprintf("involvedObject.kind=DaemonSet,involvedObject.name=%s,reason=%s", dsName, reason)})
	if err != nil {
		c.t.Fatalf("list events: %v", err)
	}
	var sum int
	for _, o := range objs {
		ev := o.(*corev1.Event)
		if ev.Count > 1 {
			sum += int(ev.Count)
		} else {
			sum++
		}
	}
	return sum
}

// dsGone reports nil once the DaemonSet no longer exists.
func (c *cluster) dsGone(name string) error {
	_, err := c.admin.Get(c.ctx, resources.DaemonSets, ns, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("daemonset %s still exists", name)
}
