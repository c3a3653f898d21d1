package daemonset

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/rollout"
)

// Tests of the progress deadline and automatic rollback (rollout.go,
// rollback.go, docs/rollouts.md §5, §6), on the fake API and a fake clock.

// storedController is newTestController whose DaemonSet is the one the
// fake API stores (defaulted), so that writes through the API and the
// cache agree; ds is replaced by it.
func storedController(t *testing.T, ds *appsv1.DaemonSet) *testController {
	t.Helper()
	tc := newTestController(t, ds)
	refreshDS(t, tc, ds)
	return tc
}

// refreshDS replaces ds (and the cached copy) with the stored one.
func refreshDS(t *testing.T, tc *testController, ds *appsv1.DaemonSet) {
	t.Helper()
	o, err := tc.client.Get(context.Background(), resources.DaemonSets, ds.Namespace, ds.Name)
	if err != nil {
		t.Fatal(err)
	}
	*ds = *o.(*appsv1.DaemonSet)
	tc.dsStore.Update(ds)
}

// setImage changes the stored template's image, as `kubectl set image`
// would, and returns the new template's hash.
func setImage(t *testing.T, tc *testController, ds *appsv1.DaemonSet, image string) string {
	t.Helper()
	refreshDS(t, tc, ds)
	upd := ds.DeepCopy()
	upd.Spec.Template.Spec.Containers[0].Image = image
	if _, err := tc.client.Update(context.Background(), upd, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	refreshDS(t, tc, ds)
	return ComputeHash(&ds.Spec.Template, ds.Status.CollisionCount)
}

// podOn is the live pod on node.
func podOn(t *testing.T, tc *testController, node string) *corev1.Pod {
	t.Helper()
	for _, o := range tc.podStore.List() {
		if p := o.(*corev1.Pod); p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			return p
		}
	}
	t.Fatalf("no pod on %s", node)
	return nil
}

// failPod makes the pod on node wait with reason, as the node agent
// reports a failed image pull or a crash loop.
func failPod(t *testing.T, tc *testController, node, reason string) {
	t.Helper()
	p := podOn(t, tc, node)
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}
}

// uidsByNode maps each node to the UID of its live pod.
func uidsByNode(tc *testController) map[string]types.UID {
	out := map[string]types.UID{}
	for _, o := range tc.podStore.List() {
		if p := o.(*corev1.Pod); p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] = p.UID
		}
	}
	return out
}

// daemonSetPatches counts the writes to the DaemonSet's spec or metadata.
func daemonSetPatches(tc *testController) int {
	n := 0
	for _, a := range tc.client.Actions() {
		if a.Resource == "daemonsets" && a.Subresource == "" && (a.Verb == fake.VerbPatch || a.Verb == fake.VerbUpdate) {
			n++
		}
	}
	return n
}

func forgetEvents(tc *testController) {
	tc.recorder.mu.Lock()
	tc.recorder.Events = nil
	tc.recorder.mu.Unlock()
}

// TestProgressDeadlineFiresExactly: the deadline counts from the start of
// the rollout, then from the last updated pod that became available; the
// condition turns ProgressDeadlineExceeded at exactly that time plus the
// deadline and not a second before, with a Warning event; the controller
// requeues the DaemonSet for that moment; progress after it ends it.
func TestProgressDeadlineFiresExactly(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateUnavailable(intstr.FromInt32(1))
	ds.Annotations = map[string]string{rollout.ProgressDeadlineSeconds: "60"}
	tc := storedController(t, ds)
	startRolled(t, tc, ds, 3)
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonNewRevisionAvailable, "successfully progressed")
	forgetEvents(tc)
	// The creation's own deadline requeue fires and is drained.
	tc.clock.Step(time.Hour)
	testkit.Eventually(t, 5*time.Second, func() error {
		if tc.queue.Len() == 0 {
			return fmt.Errorf("the creation's deadline requeue never came")
		}
		return nil
	})
	queuedKeys(tc)

	newHash := setImage(t, tc, ds, "foo/bar:v2")
	rev := fmt.Sprintf("rolling out ControllerRevision %q", "foo-"+newHash)
	rolloutStep(t, tc, ds, 0, 1) // t0: the rollout starts
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonUpdating, rev)
	wantEvent(t, tc, "Normal NewRevisionUpdating "+rev)
	rolloutStep(t, tc, ds, 1, 0)

	// The requeue: nothing before t0+60s, the key at t0+60s.
	queuedKeys(tc)
	tc.clock.Step(59 * time.Second)
	testkit.Consistently(t, 200*time.Millisecond, func() error {
		if n := tc.queue.Len(); n != 0 {
			return fmt.Errorf("%d keys queued before the deadline", n)
		}
		return nil
	})
	rolloutStep(t, tc, ds, 0, 0) // t0+59s
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonUpdating, rev)
	queuedKeys(tc)
	tc.clock.Step(time.Second)
	testkit.Eventually(t, 5*time.Second, func() error {
		if n := tc.queue.Len(); n != 1 {
			return fmt.Errorf("%d keys queued at the deadline, want 1", n)
		}
		return nil
	})
	rolloutStep(t, tc, ds, 0, 0) // t0+60s
	exceeded := rev + ": no updated pod became available for 60s"
	wantCondition(t, ds, corev1.ConditionFalse, rollout.ReasonProgressDeadlineExceeded, exceeded)
	wantEvent(t, tc, "Warning ProgressDeadlineExceeded "+exceeded)
	tc.clock.Step(time.Hour)
	rolloutStep(t, tc, ds, 0, 0)
	wantCondition(t, ds, corev1.ConditionFalse, rollout.ReasonProgressDeadlineExceeded, exceeded)
	if n := tc.recorder.count(); n != 0 {
		t.Fatalf("a second exceeded sync recorded %v", tc.recorder.Events)
	}

	// node-0's pod becomes available at t1: progress; the next deadline is t1+60s.
	markPodReady(podOn(t, tc, "node-0"), tc.clock.Now())
	t1 := tc.clock.Now()
	rolloutStep(t, tc, ds, 0, 1)
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonUpdating, rev)
	wantEvent(t, tc, "Normal NewRevisionUpdating")
	rolloutStep(t, tc, ds, 1, 0)
	tc.clock.Step(30 * time.Second)
	markPodReady(podOn(t, tc, "node-1"), tc.clock.Now()) // t1+30s
	rolloutStep(t, tc, ds, 0, 1)
	rolloutStep(t, tc, ds, 1, 0)
	tc.clock.Step(59 * time.Second) // t1+89s
	rolloutStep(t, tc, ds, 0, 0)
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonUpdating, rev)
	tc.clock.Step(time.Second) // t1+90s
	rolloutStep(t, tc, ds, 0, 0)
	wantCondition(t, ds, corev1.ConditionFalse, rollout.ReasonProgressDeadlineExceeded, exceeded)
	if !tc.clock.Now().Equal(t1.Add(90 * time.Second)) {
		t.Fatal("clock arithmetic")
	}
	if got := ds.Spec.Template.Spec.Containers[0].Image; got != "foo/bar:v2" || daemonSetPatches(tc) != 1 {
		t.Fatalf("without auto-rollback the template changed: %s, %d writes", got, daemonSetPatches(tc))
	}

	// The last pod becomes available: complete.
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 0)
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonNewRevisionAvailable, "successfully progressed")
}

// TestAutoRollbackFailedCanary: partition 1 and auto-rollback on 5 nodes;
// the one canary pod of the new revision cannot pull its image (K = 1):
// the controller rewrites the template to the last fully available
// revision, marks the failed hash bad, records why (condition and Warning
// event), restores the canary node, and never touches the other four.
// Applying the bad template again replaces no pod (a new node gets the good
// revision); a changed template rolls out again.
func TestAutoRollbackFailedCanary(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateUnavailable(intstr.FromInt32(1))
	ds.Annotations = map[string]string{rollout.AutoRollback: "true", rollout.Partition: "1"}
	tc := storedController(t, ds)
	goodHash := startRolled(t, tc, ds, 5)
	refreshDS(t, tc, ds)
	goodRev := tc.revisionByHash(ds, goodHash)
	if !fullyAvailable(goodRev) {
		t.Fatalf("revision %s not marked fully available: %v", goodRev.Name, goodRev.Annotations)
	}
	before := uidsByNode(tc)

	badHash := setImage(t, tc, ds, "example/broken:v1")
	rolloutStep(t, tc, ds, 0, 1)
	rolloutStep(t, tc, ds, 1, 0)
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonCanaryUpdating, "canary: 0/1 updated and ready")
	forgetEvents(tc)
	failPod(t, tc, "node-0", "ErrImagePull")

	rolloutStep(t, tc, ds, 0, 0) // the rollback
	refreshDS(t, tc, ds)
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != "foo/bar" || ComputeHash(&ds.Spec.Template, nil) != goodHash {
		t.Fatalf("template after rollback: image %s", img)
	}
	if got := ds.Annotations[rollout.BadRevision]; got != badHash {
		t.Fatalf("bad-revision %q, want %q", got, badHash)
	}
	why := fmt.Sprintf("rolled back to revision 1 (foo-%s): revision 2 (foo-%s) failed: 1 updated pods failing (threshold 1): pod %s on node node-0: container foo: ErrImagePull",
		goodHash, badHash, podOn(t, tc, "node-0").Name)
	wantCondition(t, ds, corev1.ConditionFalse, rollout.ReasonRolledBack, why)
	wantEvent(t, tc, "Warning RolledBack "+why)

	// The restore: the canary node gets the good revision again, unheld by the partition.
	rolloutStep(t, tc, ds, 0, 1)
	created := rolloutStep(t, tc, ds, 1, 0)
	if created[0].Spec.NodeName != "node-0" || created[0].Labels[RevisionHashLabel] != goodHash {
		t.Fatalf("restored %s with %s", created[0].Spec.NodeName, created[0].Labels[RevisionHashLabel])
	}
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 0)
	wantNodesOn(t, tc, goodHash, "", "node-0", "node-1", "node-2", "node-3", "node-4")
	after := uidsByNode(tc)
	for _, n := range []string{"node-1", "node-2", "node-3", "node-4"} {
		if after[n] != before[n] {
			t.Errorf("pod on %s replaced", n)
		}
	}
	wantCondition(t, ds, corev1.ConditionFalse, rollout.ReasonRolledBack, why) // until the template changes
	if n := daemonSetPatches(tc); n != 2 {
		t.Fatalf("%d writes to the DaemonSet, want the set image and one rollback", n)
	}

	// The bad template again: held, nothing replaced; a new node gets the good revision.
	if h := setImage(t, tc, ds, "example/broken:v1"); h != badHash {
		t.Fatalf("hash %s, want %s", h, badHash)
	}
	rolloutStep(t, tc, ds, 0, 0)
	wantCondition(t, ds, corev1.ConditionFalse, rollout.ReasonBadRevision, "was rolled back as failed and is not rolled out again")
	wantEvent(t, tc, "Warning BadRevision")
	tc.nodeStore.Add(newNode("node-5", nil))
	created = rolloutStep(t, tc, ds, 1, 0)
	if h := created[0].Labels[RevisionHashLabel]; h != goodHash {
		t.Fatalf("new node got revision %s, want the good %s", h, goodHash)
	}
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 0)
	rolloutStep(t, tc, ds, 0, 0)
	wantNodesOn(t, tc, goodHash, "", "node-0", "node-1", "node-2", "node-3", "node-4", "node-5")

	// A changed template rolls out (to the canary first).
	fixed := setImage(t, tc, ds, "foo/bar:v3")
	rolloutStep(t, tc, ds, 0, 1)
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonCanaryUpdating, "canary: 0/1")
	created = rolloutStep(t, tc, ds, 1, 0)
	if h := created[0].Labels[RevisionHashLabel]; h != fixed {
		t.Fatalf("changed template: created %s, want %s", h, fixed)
	}
}

// TestAutoRollbackNoFlapping: the deadline rolls a revision that never
// became available back to the good one; when the good one then fails too
// (its pod cannot pull either, past any deadline), the controller does not
// roll back again — not to the bad revision, not further — and the
// template stays the good one.
func TestAutoRollbackNoFlapping(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateUnavailable(intstr.FromInt32(1))
	ds.Annotations = map[string]string{rollout.AutoRollback: "true", rollout.ProgressDeadlineSeconds: "30"}
	tc := storedController(t, ds)
	startRolled(t, tc, ds, 3)
	// An older fully available revision exists too: revision 1, then the good 2.
	goodHash := setImage(t, tc, ds, "foo/bar:good")
	for range 3 {
		rolloutStep(t, tc, ds, 0, 1)
		rolloutStep(t, tc, ds, 1, 0)
		markPodsReady(tc)
	}
	rolloutStep(t, tc, ds, 0, 0)
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonNewRevisionAvailable, "")
	writes := daemonSetPatches(tc)

	badHash := setImage(t, tc, ds, "foo/bar:slow")
	rolloutStep(t, tc, ds, 0, 1)
	rolloutStep(t, tc, ds, 1, 0)
	tc.clock.Step(29 * time.Second)
	rolloutStep(t, tc, ds, 0, 0)
	if daemonSetPatches(tc) != writes+1 {
		t.Fatal("rolled back before the deadline")
	}
	tc.clock.Step(time.Second)
	rolloutStep(t, tc, ds, 0, 0) // exceeded
	wantCondition(t, ds, corev1.ConditionFalse, rollout.ReasonProgressDeadlineExceeded, "no updated pod became available for 30s")
	rolloutStep(t, tc, ds, 0, 0) // rolled back
	refreshDS(t, tc, ds)
	if h := ComputeHash(&ds.Spec.Template, nil); h != goodHash || ds.Annotations[rollout.BadRevision] != badHash {
		t.Fatalf("after rollback: template %s, bad-revision %q", h, ds.Annotations[rollout.BadRevision])
	}
	wantCondition(t, ds, corev1.ConditionFalse, rollout.ReasonRolledBack,
		fmt.Sprintf("rolled back to revision 2 (foo-%s): revision 3 (foo-%s) failed: rolling out ControllerRevision %q: no updated pod became available for 30s", goodHash, badHash, "foo-"+badHash))

	// The good revision's restored pod fails too.
	rolloutStep(t, tc, ds, 0, 1)
	rolloutStep(t, tc, ds, 1, 0)
	failPod(t, tc, "node-0", "ImagePullBackOff")
	for range 5 {
		tc.clock.Step(time.Minute)
		rolloutStep(t, tc, ds, 0, 0)
	}
	refreshDS(t, tc, ds)
	if h := ComputeHash(&ds.Spec.Template, nil); h != goodHash {
		t.Fatalf("template bounced to %s", h)
	}
	if n := daemonSetPatches(tc); n != writes+2 {
		t.Fatalf("%d writes to the DaemonSet, want %d: the set image and one rollback", n, writes+2)
	}
	wantCondition(t, ds, corev1.ConditionFalse, rollout.ReasonRolledBack, "revision 3")
}

// TestNoRollbackWithoutAvailableRevision: a DaemonSet whose first revision
// never became fully available has nothing to roll back to: the failing
// pods are reported by the deadline and the template stays.
func TestNoRollbackWithoutAvailableRevision(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateUnavailable(intstr.FromInt32(1))
	ds.Annotations = map[string]string{rollout.AutoRollback: "true", rollout.ProgressDeadlineSeconds: "10"}
	tc := storedController(t, ds)
	addNodes(tc.nodeStore, 0, 2, nil)
	rolloutStep(t, tc, ds, 2, 0)
	failPod(t, tc, "node-0", "CrashLoopBackOff")
	tc.clock.Step(10 * time.Second)
	rolloutStep(t, tc, ds, 0, 0)
	rolloutStep(t, tc, ds, 0, 0)
	wantCondition(t, ds, corev1.ConditionFalse, rollout.ReasonProgressDeadlineExceeded, "no updated pod became available for 10s")
	if n := daemonSetPatches(tc); n != 0 {
		t.Fatalf("%d writes to the DaemonSet", n)
	}
}

// TestFailureThreshold: K is max(maxUnavailable, maxSurge) scaled, at
// least 1, at most the partition.
func TestFailureThreshold(t *testing.T) {
	nodes := make([]*corev1.Node, 20)
	for i := range nodes {
		nodes[i] = newNode(fmt.Sprintf("node-%02d", i), nil)
	}
	for _, tt := range []struct {
		strategy  appsv1.DaemonSetUpdateStrategy
		partition string
		want      int
	}{
		{newUpdateUnavailable(intstr.FromInt32(1)), "", 1},
		{newUpdateUnavailable(intstr.FromString("20%")), "", 4},
		{newUpdateSurge(intstr.FromInt32(3)), "", 3},
		{newUpdateUnavailable(intstr.FromInt32(5)), "2", 2},
		{newUpdateUnavailable(intstr.FromInt32(0)), "", 1},
	} {
		ds := newDaemonSet("foo")
		ds.Spec.UpdateStrategy = tt.strategy
		if tt.partition != "" {
			ds.Annotations = map[string]string{rollout.Partition: tt.partition}
		}
		nodeToPods := map[string][]*corev1.Pod{}
		g := newRolloutGate(ds, nodes, nodeToPods, "h", false, reachability{now: time.Now(), grace: DefaultUnreachableGrace})
		if got := failureThreshold(ds, g, nodes, nodeToPods); got != tt.want {
			t.Errorf("%+v partition %q: K %d, want %d", tt.strategy.RollingUpdate, tt.partition, got, tt.want)
		}
		if len(nodeToPods) != 0 {
			t.Fatal("failureThreshold changed its argument")
		}
	}
}

// TestBadRevisionAdmissionForm: the controller writes the hash it computes,
// which admission accepts.
func TestBadRevisionAdmissionForm(t *testing.T) {
	ds := newDaemonSet("foo")
	for i := range 50 {
		ds.Spec.Template.Spec.Containers[0].Image = fmt.Sprintf("img:%d", i)
		h := ComputeHash(&ds.Spec.Template, nil)
		if errs := rollout.Validate(map[string]string{rollout.BadRevision: h}); len(errs) != 0 {
			t.Fatalf("hash %s refused: %v", h, errs)
		}
		if strings.ContainsAny(h, "aeiou") {
			t.Fatalf("hash %s has a vowel", h)
		}
	}
}

// TestStatusWriteKeepsANewerCondition: a sync that decided its condition on
// a stale cached DaemonSet (CanaryUpdating) while a rollback had already
// stored RolledBack writes its counters after the conflict but leaves the
// newer condition alone.
func TestStatusWriteKeepsANewerCondition(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := storedController(t, ds)
	stale := ds.DeepCopy()
	setCondition(&stale.Status, newCondition(corev1.ConditionTrue, rollout.ReasonCanaryUpdating, rollout.CanaryMessage(0, 1)), testStart)
	fresh := ds.DeepCopy()
	setCondition(&fresh.Status, newCondition(corev1.ConditionFalse, rollout.ReasonRolledBack, "rolled back"), testStart)
	if _, err := tc.client.UpdateStatus(context.Background(), fresh, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	promoted := newCondition(corev1.ConditionTrue, rollout.ReasonPromoted, "canary promoted: updating every node")
	transitioned, err := storeStatus(context.Background(), tc.client, stale, statusCounts{desired: 3, current: 3}, promoted, testStart, true)
	if err != nil || transitioned {
		t.Fatalf("transitioned %v, err %v", transitioned, err)
	}
	refreshDS(t, tc, ds)
	wantCondition(t, ds, corev1.ConditionFalse, rollout.ReasonRolledBack, "rolled back")
	if ds.Status.DesiredNumberScheduled != 3 {
		t.Fatalf("counters not written: %+v", ds.Status)
	}
}
