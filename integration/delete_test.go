package integration

import (
	"errors"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// deleteDS deletes a DaemonSet with a propagation policy (nil: the
// default) and returns what the API answered: the deleted object, or the
// object still present when its deletion waits on finalizers.
func (c *cluster) deleteDS(name string, policy *metav1.DeletionPropagation) *appsv1.DaemonSet {
	c.t.Helper()
	out, err := c.admin.Delete(c.ctx, resources.DaemonSets, ns, name, metav1.DeleteOptions{PropagationPolicy: policy})
	if err != nil {
		c.t.Fatalf("delete daemonset %s: %v", name, err)
	}
	return out.(*appsv1.DaemonSet)
}

// orphaned checks that the pods and revisions of the selector exist with no
// ownerReference, the pods with the given uids.
func (c *cluster) orphaned(selector string, want map[string]types.UID) error {
	pods, err := c.pods(selector)
	if err != nil {
		return err
	}
	got := map[string]types.UID{}
	for _, p := range pods {
		if len(p.OwnerReferences) != 0 {
			return fmt.Errorf("pod %s still has ownerReferences %v", p.Name, p.OwnerReferences)
		}
		if p.DeletionTimestamp != nil {
			return fmt.Errorf("pod %s is being deleted", p.Name)
		}
		got[p.Spec.NodeName] = p.UID
	}
	if err := sameUIDs(want, got); err != nil {
		return err
	}
	for _, r := range c.revisions(selector) {
		if len(r.OwnerReferences) != 0 {
			return fmt.Errorf("revision %s still has ownerReferences", r.Name)
		}
	}
	return nil
}

// ownedBy checks that every pod and revision of the selector is controlled by uid.
func (c *cluster) ownedBy(selector string, uid types.UID) error {
	pods, err := c.pods(selector)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != uid {
			return fmt.Errorf("pod %s not controlled by %s: %v", p.Name, uid, p.OwnerReferences)
		}
	}
	for _, r := range c.revisions(selector) {
		if ref := metav1.GetControllerOf(r); ref == nil || ref.UID != uid {
			return fmt.Errorf("revision %s not controlled by %s: %v", r.Name, uid, r.OwnerReferences)
		}
	}
	return nil
}

// TestOrphanAndAdopt: deleting with propagationPolicy=Orphan keeps the pods
// running (same uids) with their ownerReference removed, and the revisions
// too. Re-creating the same DaemonSet adopts pods and revision without
// creating or deleting a pod. Re-created with another template, the adopted
// pods are replaced by its RollingUpdate strategy (at most one node without
// a ready pod) — provided they are old by Kubernetes' IsPodUpdated, whose
// pod-template-generation test makes pods of templateGeneration 1 look
// updated to any freshly created DaemonSet (also templateGeneration 1).
func TestOrphanAndAdopt(t *testing.T) {
	const n = 3
	c := newCluster(t, n)
	orphan := metav1.DeletePropagationOrphan
	ds := newDaemonSet("agent")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: maxUnavailable(1)}
	before, hash1 := c.startDS(ds.DeepCopy(), n)
	rev1 := c.revisions("app=agent")[0]
	want := uids(before)

	c.deleteDS("agent", &orphan)
	eventually(t, waitLong, func() error { return c.dsGone("agent") })
	eventually(t, waitLong, func() error { return c.orphaned("app=agent", want) })
	consistently(t, 500*time.Millisecond, func() error { return c.orphaned("app=agent", want) })

	t.Run("re-create adopts", func(t *testing.T) {
		c := c.sub(t)
		created := c.createDS(ds.DeepCopy())
		eventually(t, waitLong, func() error { return c.ownedBy("app=agent", created.UID) })
		c.waitStatus("agent", counts{desired: n, current: n, ready: n, updated: n, available: n})
		consistently(t, 500*time.Millisecond, func() error {
			now, err := c.onePodPerNode("app=agent", nodeNames(n), hash1)
			if err != nil {
				return err
			}
			return sameUIDs(want, uids(now))
		})
		revs := c.revisions("app=agent")
		if len(revs) != 1 || revs[0].UID != rev1.UID {
			t.Errorf("revisions after adoption: %d, want the adopted %s only", len(revs), rev1.Name)
		}
		if got := c.eventsForUID(created.UID, "SuccessfulCreate"); got != 0 {
			t.Errorf("the re-created DaemonSet created %d pods, want 0", got)
		}
	})

	t.Run("re-create with another template, same templateGeneration", func(t *testing.T) {
		c := c.sub(t)
		c.deleteDS("agent", &orphan)
		eventually(t, waitLong, func() error { return c.dsGone("agent") })
		eventually(t, waitLong, func() error { return c.orphaned("app=agent", want) })
		v2 := ds.DeepCopy()
		v2.Spec.Template.Spec.Containers[0].Image = imageV2
		created := c.createDS(v2)
		eventually(t, waitLong, func() error { return c.ownedBy("app=agent", created.UID) })
		// As Kubernetes: pod-template-generation "1" equals the new
		// DaemonSet's templateGeneration, so IsPodUpdated is true although
		// the hash differs; nothing is replaced.
		c.waitStatus("agent", counts{desired: n, current: n, ready: n, updated: n, available: n})
		consistently(t, 500*time.Millisecond, func() error {
			now, err := c.onePodPerNode("app=agent", nodeNames(n), hash1)
			if err != nil {
				return err
			}
			for _, p := range now {
				if g := p.Labels["pod-template-generation"]; g != "1" {
					return fmt.Errorf("pod %s: pod-template-generation %q", p.Name, g)
				}
			}
			return sameUIDs(want, uids(now))
		})
		// A template change (generation 2) rolls the adopted pods.
		c.updateDS("agent", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = imageV2 + "-b" })
		// imageV2+"-b" is pulled on demand by the fake runtime.
		cur := c.currentRevision("agent", "app=agent")
		after := c.waitRolledOut("agent", n, cur.Labels[hashLabel])
		for node, p := range after {
			if p.UID == want[node] {
				t.Errorf("node %s: adopted pod not replaced after the template change", node)
			}
		}
		want = uids(after)
	})

	t.Run("re-create with another template and generation rolls", func(t *testing.T) {
		c := c.sub(t)
		c.deleteDS("agent", &orphan)
		eventually(t, waitLong, func() error { return c.dsGone("agent") })
		eventually(t, waitLong, func() error { return c.orphaned("app=agent", want) })

		// Pods are of templateGeneration 2; the re-created DaemonSet (the
		// original template, templateGeneration 1) sees them as old.
		w := c.watchRollout("app=agent", nodeNames(n))
		created := c.createDS(ds.DeepCopy())
		after := c.waitRolledOut("agent", n, hash1)
		maxWithout, _, _ := w.finish(t)
		if maxWithout > 1 {
			t.Errorf("%d nodes without a ready pod at once, maxUnavailable is 1", maxWithout)
		}
		for node, p := range after {
			if p.UID == want[node] {
				t.Errorf("node %s: adopted old pod not replaced", node)
			}
		}
		if err := c.ownedBy("app=agent", created.UID); err != nil {
			t.Error(err)
		}
		// The orphaned revision of the original template was adopted and
		// is current again: same object, revision number moved forward.
		revs := c.revisions("app=agent")
		if cur := revs[len(revs)-1]; cur.UID != rev1.UID || cur.Revision <= rev1.Revision {
			t.Errorf("current revision %s #%d, want the adopted %s with a bumped number", cur.Name, cur.Revision, rev1.Name)
		}
	})
}

// TestCascadingDelete: background deletion (the default) removes the
// DaemonSet at once and then its pods and revisions; foreground deletion
// keeps the DaemonSet (deletionTimestamp, foregroundDeletion finalizer)
// until its pods and revisions are gone.
func TestCascadingDelete(t *testing.T) {
	const n = 3
	c := newCluster(t, n)

	t.Run("background", func(t *testing.T) {
		c := c.sub(t)
		c.startDS(newDaemonSet("bg"), n)
		c.deleteDS("bg", nil)
		if err := c.dsGone("bg"); err != nil {
			t.Fatalf("right after a background delete: %v", err)
		}
		eventually(t, waitLong, func() error {
			pods, err := c.pods("app=bg")
			if err != nil {
				return err
			}
			if len(pods) > 0 {
				return fmt.Errorf("%d pods left (%s)", len(pods), podNames(pods))
			}
			if r := c.revisions("app=bg"); len(r) > 0 {
				return fmt.Errorf("%d revisions left", len(r))
			}
			return nil
		})
	})

	t.Run("foreground", func(t *testing.T) {
		c := c.sub(t)
		c.startDS(newDaemonSet("fg"), n)
		fg := metav1.DeletePropagationForeground
		ds := c.deleteDS("fg", &fg)
		if ds.DeletionTimestamp == nil || !hasString(ds.Finalizers, metav1.FinalizerDeleteDependents) {
			t.Fatalf("after a foreground delete: deletionTimestamp %v finalizers %v", ds.DeletionTimestamp, ds.Finalizers)
		}
		// Poll until the DaemonSet is gone; whenever it is gone, its
		// dependents must already be gone.
		sawPodsWhileOwnerExists := false
		eventually(t, waitLong, func() error {
			gone := c.dsGone("fg") == nil
			pods, err := c.pods("app=fg")
			if err != nil {
				return err
			}
			revs := c.revisions("app=fg")
			if !gone {
				if len(pods) > 0 {
					sawPodsWhileOwnerExists = true
				}
				return errors.New("daemonset still exists")
			}
			if len(pods) > 0 || len(revs) > 0 {
				t.Fatalf("daemonset gone while %d pods (%s) and %d revisions remain", len(pods), podNames(pods), len(revs))
			}
			return nil
		})
		if !sawPodsWhileOwnerExists {
			t.Logf("pods were already gone at the first poll")
		}
	})
}

// eventsForUID counts the events of a reason about the object with uid.
func (c *cluster) eventsForUID(uid types.UID, reason string) int {
	c.t.Helper()
	objs, _, err := c.admin.List(c.ctx, resources.Events, ns, client.ListOptions{
		FieldSelector: fmt.Sprintf("involvedObject.uid=%s,reason=%s", uid, reason)})
	if err != nil {
		c.t.Fatalf("list events: %v", err)
	}
	return len(objs)
}

func hasString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
