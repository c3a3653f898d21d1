package integration

import (
	"errors"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// startDS creates ds and waits until it runs one ready pod on each of n
// nodes; it returns the pods by node and the revision hash.
func (c *cluster) startDS(ds *appsv1.DaemonSet, n int) (map[string]*corev1.Pod, string) {
	c.t.Helper()
	c.createDS(ds)
	sel := "app=" + ds.Name
	var pods map[string]*corev1.Pod
	eventually(c.t, waitLong, func() (err error) {
		pods, err = c.onePodPerNode(sel, nodeNames(n), "")
		return err
	})
	c.waitStatus(ds.Name, counts{desired: int32(n), current: int32(n), ready: int32(n), updated: int32(n), available: int32(n)})
	return pods, c.currentRevision(ds.Name, sel).Labels[hashLabel]
}

// waitRolledOut waits until every node runs one ready pod of hash and the
// status says the rollout is complete (kubectl rollout status's test).
func (c *cluster) waitRolledOut(name string, n int, hash string) map[string]*corev1.Pod {
	c.t.Helper()
	var pods map[string]*corev1.Pod
	eventually(c.t, waitLong, func() (err error) {
		pods, err = c.onePodPerNode("app="+name, nodeNames(n), hash)
		return err
	})
	c.waitStatus(name, counts{desired: int32(n), current: int32(n), ready: int32(n), updated: int32(n), available: int32(n)})
	return pods
}

// TestRollingUpdateMaxUnavailable: an image change with maxUnavailable=1 on
// 6 nodes; polled continuously, never more than one node is without a
// running ready pod and no node ever has two pods (delete, then create);
// the rollout ends with every pod on the new controller-revision-hash.
func TestRollingUpdateMaxUnavailable(t *testing.T) {
	const n = 6
	c := newCluster(t, n)
	ds := newDaemonSet("agent")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: maxUnavailable(1)}
	before, oldHash := c.startDS(ds, n)

	w := c.watchRolloutStatus("app=agent", nodeNames(n), "agent")
	c.updateDS("agent", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = imageV2 })
	// As kubectl rollout status: once it says done, every node already runs
	// one ready pod of the new revision (checked at once, no waiting).
	c.waitRolloutStatus("agent")
	cur := c.currentRevision("agent", "app=agent")
	if cur.Labels[hashLabel] == oldHash || cur.Revision != 2 {
		t.Fatalf("current revision %s (#%d), want a new hash at revision 2", cur.Name, cur.Revision)
	}
	if _, err := c.onePodPerNode("app=agent", nodeNames(n), cur.Labels[hashLabel]); err != nil {
		t.Fatalf("rollout status said done, but: %v", err)
	}
	after := c.waitRolledOut("agent", n, cur.Labels[hashLabel])
	maxWithout, maxPods, _ := w.finish(t)
	if maxWithout > 1 {
		t.Errorf("up to %d nodes were without a ready pod at once, maxUnavailable is 1", maxWithout)
	}
	if maxPods > 1 {
		t.Errorf("up to %d pods on one node; without surge a node never has two", maxPods)
	}
	if low := w.lowestAvailable(); low < n-1 {
		t.Errorf("status.numberAvailable went down to %d; maxUnavailable=1 allows %d", low, n-1)
	}
	for node, p := range after {
		if p.UID == before[node].UID || p.Spec.Containers[0].Image != imageV2 {
			t.Errorf("node %s: pod %s not replaced with %s", node, p.Name, imageV2)
		}
	}
	// The machines run exactly the new container: the agents stopped the old ones.
	eventually(t, waitLong, func() error {
		for _, node := range nodeNames(n) {
			imgs, err := c.runningImages(node)
			if err != nil {
				return err
			}
			if len(imgs) != 1 || imgs[0] != imageV2 {
				return fmt.Errorf("node %s runs %v, want [%s]", node, imgs, imageV2)
			}
		}
		return nil
	})
}

// TestRollingUpdateMaxSurge: `kubectl rollout restart` (a template
// annotation change) with maxSurge=1, maxUnavailable=0 on 5 nodes: never a
// node without a ready pod, never more than two pods on one node.
func TestRollingUpdateMaxSurge(t *testing.T) {
	const n = 5
	c := newCluster(t, n)
	ds := newDaemonSet("agent")
	surge, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxSurge: &surge, MaxUnavailable: &zero}}
	before, oldHash := c.startDS(ds, n)

	w := c.watchRolloutStatus("app=agent", nodeNames(n), "agent")
	c.updateDS("agent", func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": time.Now().Format(time.RFC3339)}
	})
	c.waitRolloutStatus("agent")
	cur := c.currentRevision("agent", "app=agent")
	if cur.Labels[hashLabel] == oldHash {
		t.Fatalf("restart did not make a new revision")
	}
	// Surge: the old pods may still be terminating when the status says
	// done; the new ones all run.
	pods, err := c.pods("app=agent")
	if err != nil {
		t.Fatal(err)
	}
	ready := map[string]bool{}
	for _, p := range pods {
		if p.Labels[hashLabel] == cur.Labels[hashLabel] && runningReady(p) {
			ready[p.Spec.NodeName] = true
		}
	}
	if len(ready) != n {
		t.Fatalf("rollout status said done with new ready pods on %d of %d nodes", len(ready), n)
	}
	after := c.waitRolledOut("agent", n, cur.Labels[hashLabel])
	maxWithout, maxPods, _ := w.finish(t)
	if maxWithout > 0 {
		t.Errorf("%d node(s) were without a ready pod at some moment; maxSurge=1 maxUnavailable=0 allows none", maxWithout)
	}
	if maxPods > 2 {
		t.Errorf("up to %d pods on one node, want at most 2", maxPods)
	}
	// status.numberAvailable looks at the oldest pod of each node, which is
	// the old pod until it is gone: once its agent has stopped it (Ready
	// false) and before the object is removed, the node counts as
	// unavailable although its new pod is ready — as in Kubernetes. So the
	// status may dip by one node at a time, the pods never do.
	if low := w.lowestAvailable(); low < n-1 {
		t.Errorf("status.numberAvailable went down to %d", low)
	}
	if maxPods < 2 {
		t.Logf("the poller never saw the surge pod next to the old one (rollout too quick to observe)")
	}
	for node, p := range after {
		if p.UID == before[node].UID {
			t.Errorf("node %s: pod not restarted", node)
		}
	}
}

// TestOnDelete: with OnDelete a template change replaces nothing; a pod
// deleted by hand comes back with the new template; the others stay.
func TestOnDelete(t *testing.T) {
	const n = 4
	c := newCluster(t, n)
	ds := newDaemonSet("agent")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	before, oldHash := c.startDS(ds, n)

	c.updateDS("agent", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = imageV2 })
	cur := c.currentRevision("agent", "app=agent")
	newHash := cur.Labels[hashLabel]
	if newHash == oldHash {
		t.Fatalf("no new revision")
	}
	c.waitStatus("agent", counts{desired: n, current: n, ready: n, updated: 0, available: n})
	consistently(t, time.Second, func() error {
		now, err := c.onePodPerNode("app=agent", nodeNames(n), oldHash)
		if err != nil {
			return err
		}
		return sameUIDs(uids(before), uids(now))
	})

	victim := before["node-2"]
	c.deletePod(victim.Name)
	var after map[string]*corev1.Pod
	eventually(t, waitLong, func() (err error) {
		after, err = c.onePodPerNode("app=agent", nodeNames(n), "")
		if err == nil && after["node-2"].UID == victim.UID {
			err = errors.New("node-2's pod not replaced yet")
		}
		return err
	})
	if p := after["node-2"]; p.Labels[hashLabel] != newHash || p.Spec.Containers[0].Image != imageV2 {
		t.Errorf("replacement %s: hash %s image %s, want %s %s", p.Name, p.Labels[hashLabel], p.Spec.Containers[0].Image, newHash, imageV2)
	}
	for _, node := range []string{"node-0", "node-1", "node-3"} {
		if after[node].UID != before[node].UID || after[node].Labels[hashLabel] != oldHash {
			t.Errorf("pod on %s touched", node)
		}
	}
	c.waitStatus("agent", counts{desired: n, current: n, ready: n, updated: 1, available: n})
}

// TestRollback: as `kubectl rollout undo` during a broken rollout (the new
// image cannot be pulled, so the rollout stalls at one node): patching the
// DaemonSet with revision 1's data makes revision 1's ControllerRevision
// current again — same name and hash, number bumped to 3, no new revision —
// the pods still on it keep their uids, and the broken pod is replaced.
func TestRollback(t *testing.T) {
	const n = 4
	c := newCluster(t, n)
	ds := newDaemonSet("agent")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: maxUnavailable(1)}
	before, hash1 := c.startDS(ds, n)
	rev1 := c.revisions("app=agent")[0]

	c.updateDS("agent", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = brokenImage })
	rev2 := c.currentRevision("agent", "app=agent")
	hash2 := rev2.Labels[hashLabel]
	// The rollout stalls: one node runs a pod of revision 2 that never gets
	// ready (image pull fails); the others keep their revision 1 pods.
	var brokenNode string
	eventually(t, waitLong, func() error {
		pods, err := c.pods("app=agent")
		if err != nil {
			return err
		}
		var broken []*corev1.Pod
		for _, p := range pods {
			if p.Labels[hashLabel] == hash2 {
				broken = append(broken, p)
			}
		}
		if len(broken) != 1 || len(pods) != n {
			return fmt.Errorf("%d pods, %d of revision 2; want %d and 1", len(pods), len(broken), n)
		}
		if podReady(broken[0]) {
			return fmt.Errorf("pod %s of the broken image is ready", broken[0].Name)
		}
		if w := broken[0].Status.ContainerStatuses; len(w) != 1 || w[0].State.Waiting == nil {
			return fmt.Errorf("pod %s: not waiting on the image yet: %+v", broken[0].Name, w)
		}
		brokenNode = broken[0].Spec.NodeName
		return nil
	})
	c.waitStatus("agent", counts{desired: n, current: n, ready: n - 1, updated: 1, available: n - 1})

	// kubectl rollout undo: strategic-merge patch with the revision's data.
	if _, err := c.admin.Patch(c.ctx, resources.DaemonSets, ns, "agent", types.StrategicMergePatchType, rev1.Data.Raw, client.WriteOptions{}, ""); err != nil {
		t.Fatalf("rollback patch: %v", err)
	}
	after := c.waitRolledOut("agent", n, hash1)
	revs := c.revisions("app=agent")
	if len(revs) != 2 {
		t.Fatalf("%d controllerrevisions after rollback, want 2 (no new one)", len(revs))
	}
	if revs[1].Name != rev1.Name || revs[1].UID != rev1.UID || revs[1].Revision != 3 || revs[1].Labels[hashLabel] != hash1 {
		t.Errorf("current revision %s (uid %s, #%d, hash %s), want %s (uid %s) bumped to #3 with hash %s",
			revs[1].Name, revs[1].UID, revs[1].Revision, revs[1].Labels[hashLabel], rev1.Name, rev1.UID, hash1)
	}
	if revs[0].Name != rev2.Name || revs[0].Revision != 2 {
		t.Errorf("old revision %s #%d, want %s #2", revs[0].Name, revs[0].Revision, rev2.Name)
	}
	for node, p := range after {
		switch {
		case node == brokenNode && p.UID == before[node].UID:
			t.Errorf("node %s: the pod of revision 1 deleted for the rollout came back with its old uid", node)
		case node != brokenNode && p.UID != before[node].UID:
			t.Errorf("node %s: pod of revision 1 restarted by the rollback (uid %s → %s)", node, before[node].UID, p.UID)
		}
	}
}

// sameUIDs reports nil when both maps are equal.
func sameUIDs(want, got map[string]types.UID) error {
	if len(want) != len(got) {
		return fmt.Errorf("%d pods, want %d", len(got), len(want))
	}
	for n, u := range want {
		if got[n] != u {
			return fmt.Errorf("pod on %s has uid %s, want %s", n, got[n], u)
		}
	}
	return nil
}

// TestMinReadySeconds: a ready pod counts as available only
// minReadySeconds after it became ready, in the status and in the rolling
// update budget. The status part runs with 5 s, a window wide enough to be
// seen on a loaded machine (the controller may write its first status
// after the pods became ready, never before); the rollout part with 1 s: a
// maxUnavailable=1 rollout over 3 nodes cannot finish before two new pods
// have each been ready for a second.
func TestMinReadySeconds(t *testing.T) {
	const n = 3
	c := newCluster(t, n)
	ds := newDaemonSet("agent")
	ds.Spec.MinReadySeconds = 5
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: maxUnavailable(1)}
	c.createDS(ds)
	sawReadyNotAvailable := false
	eventually(t, waitLong, func() error {
		st := c.getDS("agent").Status
		if st.NumberReady > st.NumberAvailable {
			sawReadyNotAvailable = true
		}
		if st.NumberAvailable != n || st.NumberReady != n {
			return fmt.Errorf("ready %d available %d", st.NumberReady, st.NumberAvailable)
		}
		return nil
	})
	if !sawReadyNotAvailable {
		t.Errorf("status never showed ready pods that were not yet available")
	}
	c.waitStatus("agent", counts{desired: n, current: n, ready: n, updated: n, available: n})

	start := time.Now()
	c.updateDS("agent", func(ds *appsv1.DaemonSet) {
		ds.Spec.MinReadySeconds = 1
		ds.Spec.Template.Spec.Containers[0].Image = imageV2
	})
	cur := c.currentRevision("agent", "app=agent")
	c.waitRolledOut("agent", n, cur.Labels[hashLabel])
	took := time.Since(start)
	t.Logf("rollout of %d nodes with minReadySeconds 1 took %s", n, took)
	if took < 2*time.Second {
		t.Errorf("rollout took %s; with minReadySeconds 1 it needs at least 2s", took)
	}
}

// TestHistoryLimit: with revisionHistoryLimit 1 and OnDelete, three
// template changes leave the current revision and revision 1, which the
// running pods still use (never deleted), while unused old revisions go.
func TestHistoryLimit(t *testing.T) {
	const n = 3
	c := newCluster(t, n)
	ds := newDaemonSet("agent")
	limit := int32(1)
	ds.Spec.RevisionHistoryLimit = &limit
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	_, hash1 := c.startDS(ds, n)
	for _, image := range []string{imageV2, imageV2 + "-b", imageV2 + "-c"} {
		c.updateDS("agent", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = image })
		c.currentRevision("agent", "app=agent")
	}
	eventually(t, waitLong, func() error {
		revs := c.revisions("app=agent")
		var got []string
		for _, r := range revs {
			got = append(got, fmt.Sprintf("%s#%d", r.Labels[hashLabel], r.Revision))
		}
		if len(revs) != 2 || revs[0].Labels[hashLabel] != hash1 || revs[0].Revision != 1 || revs[1].Revision != 4 {
			return fmt.Errorf("revisions %v, want %s#1 (used by pods) and the current #4", got, hash1)
		}
		return nil
	})
	if _, err := c.onePodPerNode("app=agent", nodeNames(n), hash1); err != nil {
		t.Fatal(err)
	}
}

// waitRolloutStatus waits as `kubectl rollout status ds/name` does (its
// DaemonSetStatusViewer, docs/controller-rules.md §4.5) and returns the
// DaemonSet as the moment it said "successfully rolled out".
func (c *cluster) waitRolloutStatus(name string) *appsv1.DaemonSet {
	c.t.Helper()
	var ds *appsv1.DaemonSet
	eventually(c.t, waitLong, func() error {
		ds = c.getDS(name)
		st := ds.Status
		switch {
		case ds.Generation > st.ObservedGeneration:
			return errors.New("waiting for daemon set spec update to be observed")
		case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
			return fmt.Errorf("%d out of %d new pods have been updated", st.UpdatedNumberScheduled, st.DesiredNumberScheduled)
		case st.NumberAvailable < st.DesiredNumberScheduled:
			return fmt.Errorf("%d of %d updated pods are available", st.NumberAvailable, st.DesiredNumberScheduled)
		}
		return nil
	})
	return ds
}
