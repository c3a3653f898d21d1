package daemonset

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/rollout"
)

// Tests of the rollout settings (rollout.go, docs/rollouts.md): pause,
// partition N and N%, canary selector, promote, one sync per step.

// rolloutStep clears expectations, syncs once, wants creates and deletes,
// and returns the created pods. Then it refreshes what the informers would
// deliver: the DaemonSet's status and the revisions the fake API holds.
func rolloutStep(t *testing.T, tc *testController, ds *appsv1.DaemonSet, creates, deletes int) []*corev1.Pod {
	t.Helper()
	clearExpectations(t, tc, ds)
	if err := tc.sync(context.Background(), dsKey(ds)); err != nil {
		t.Fatalf("sync: %v", err)
	}
	pc := tc.podControl
	pc.mu.Lock()
	created, deleted := slices.Clone(pc.Templates), slices.Clone(pc.DeletePodName)
	pc.mu.Unlock()
	if len(created) != creates || len(deleted) != deletes {
		t.Fatalf("%d creates and %d deletes (%v), want %d and %d", len(created), len(deleted), deleted, creates, deletes)
	}
	ctx := context.Background()
	o, err := tc.client.Get(ctx, resources.DaemonSets, ds.Namespace, ds.Name)
	if err != nil {
		t.Fatal(err)
	}
	ds.Status = o.(*appsv1.DaemonSet).Status
	ds.ResourceVersion = o.(*appsv1.DaemonSet).ResourceVersion
	tc.dsStore.Update(ds)
	crs, _, err := tc.client.List(ctx, resources.ControllerRevisions, ds.Namespace, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cr := range crs {
		tc.historyStore.Update(cr)
	}
	clearExpectations(t, tc, ds)
	return created
}

// setAnnotations replaces ds's rollout annotations (nil values delete).
func setAnnotations(tc *testController, ds *appsv1.DaemonSet, kv map[string]*string) {
	if ds.Annotations == nil {
		ds.Annotations = map[string]string{}
	}
	for k, v := range kv {
		if v == nil {
			delete(ds.Annotations, k)
		} else {
			ds.Annotations[k] = *v
		}
	}
	tc.dsStore.Update(ds)
}

func str(s string) *string { return &s }

// hashesByNode maps each node to the revision hashes of its live pods.
func hashesByNode(tc *testController) map[string]string {
	out := map[string]string{}
	for _, o := range tc.podStore.List() {
		p := o.(*corev1.Pod)
		if p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] += p.Labels[RevisionHashLabel]
		}
	}
	return out
}

// wantNodesOn checks that exactly the nodes named run hash, and every
// other node runs other.
func wantNodesOn(t *testing.T, tc *testController, hash, other string, nodes ...string) {
	t.Helper()
	for node, h := range hashesByNode(tc) {
		want := other
		if slices.Contains(nodes, node) {
			want = hash
		}
		if h != want {
			t.Errorf("node %s runs revision %q, want %q", node, h, want)
		}
	}
}

func wantCondition(t *testing.T, ds *appsv1.DaemonSet, status corev1.ConditionStatus, reason, msg string) {
	t.Helper()
	c := getCondition(ds.Status, rollout.ConditionProgressing)
	if c == nil {
		t.Fatalf("no Progressing condition; want %s/%s", status, reason)
	}
	if c.Status != status || c.Reason != reason || !strings.Contains(c.Message, msg) {
		t.Fatalf("Progressing %s/%s %q, want %s/%s %q", c.Status, c.Reason, c.Message, status, reason, msg)
	}
}

// wantEvent checks that an event with this "type reason message" start was recorded, then forgets the events.
func wantEvent(t *testing.T, tc *testController, prefix string) {
	t.Helper()
	tc.recorder.mu.Lock()
	defer tc.recorder.mu.Unlock()
	for _, e := range tc.recorder.Events {
		if strings.HasPrefix(e, prefix) {
			tc.recorder.Events = nil
			return
		}
	}
	t.Fatalf("no event %q among %q", prefix, tc.recorder.Events)
}

// startRolled runs ds on n fresh nodes with ready pods and returns its hash.
func startRolled(t *testing.T, tc *testController, ds *appsv1.DaemonSet, n int) string {
	t.Helper()
	addNodes(tc.nodeStore, 0, n, nil)
	tc.dsStore.Add(ds)
	rolloutStep(t, tc, ds, n, 0)
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 0)
	return ComputeHash(&ds.Spec.Template, nil)
}

func changeImage(tc *testController, ds *appsv1.DaemonSet) string {
	ds.Spec.Template.Spec.Containers[0].Image = "foo2/bar2"
	tc.dsStore.Update(ds)
	return ComputeHash(&ds.Spec.Template, nil)
}

// startRollout makes a DaemonSet "foo" with strategy, runs it on n nodes
// with ready pods (startRolled), sets the rollout annotations kv and
// changes its image. It returns the hashes of the old and new revisions.
func startRollout(t *testing.T, strategy appsv1.DaemonSetUpdateStrategy, n int, kv map[string]*string) (tc *testController, ds *appsv1.DaemonSet, oldHash, newHash string) {
	t.Helper()
	ds = newDaemonSet("foo")
	ds.Spec.UpdateStrategy = strategy
	tc = newTestController(t, ds)
	oldHash = startRolled(t, tc, ds, n)
	setAnnotations(tc, ds, kv)
	newHash = changeImage(tc, ds)
	return tc, ds, oldHash, newHash
}

// TestPlainDaemonSetHasNoRolloutCondition: without rollout annotations a
// rolling update reports no condition and records no rollout event.
func TestPlainDaemonSetHasNoRolloutCondition(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = newUpdateUnavailable(intstr.FromInt32(5))
	tc := newTestController(t, ds)
	startRolled(t, tc, ds, 5)
	changeImage(tc, ds)
	rolloutStep(t, tc, ds, 0, 5)
	rolloutStep(t, tc, ds, 5, 0)
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 0)
	if len(ds.Status.Conditions) != 0 || tc.recorder.count() != 0 {
		t.Fatalf("conditions %v, events %v", ds.Status.Conditions, tc.recorder.Events)
	}
}

// TestPauseReplacesNoPod: a paused RollingUpdate DaemonSet deletes and
// creates nothing for its old pods; a new node and a node whose old pod
// failed get a pod of the old revision; resume continues the rollout;
// each transition is a Progressing condition and an event.
func TestPauseReplacesNoPod(t *testing.T) {
	tc, ds, oldHash, newHash := startRollout(t, newUpdateUnavailable(intstr.FromInt32(2)), 5,
		map[string]*string{rollout.Paused: str("true")})
	rolloutStep(t, tc, ds, 0, 0)
	wantCondition(t, ds, corev1.ConditionUnknown, rollout.ReasonPaused, "DaemonSet is paused")
	wantEvent(t, tc, "Normal DaemonSetPaused DaemonSet is paused")
	rolloutStep(t, tc, ds, 0, 0)
	if n := tc.recorder.count(); n != 0 {
		t.Fatalf("a second paused sync recorded %v", tc.recorder.Events)
	}

	tc.nodeStore.Add(newNode("node-5", nil))
	created := rolloutStep(t, tc, ds, 1, 0)
	if h, img := created[0].Labels[RevisionHashLabel], created[0].Spec.Containers[0].Image; h != oldHash || img != "foo/bar" {
		t.Fatalf("paused: new node got revision %s image %s, want the old %s foo/bar", h, img, oldHash)
	}
	if _, ok := created[0].Labels[TemplateGenerationLabel]; ok {
		t.Fatalf("an old-revision pod carries the current %s label", TemplateGenerationLabel)
	}

	for _, o := range tc.podStore.List() {
		if p := o.(*corev1.Pod); p.Spec.NodeName == "node-0" {
			p.Status.Phase = corev1.PodFailed
		}
	}
	rolloutStep(t, tc, ds, 0, 1)
	created = rolloutStep(t, tc, ds, 1, 0)
	if h := created[0].Labels[RevisionHashLabel]; h != oldHash {
		t.Fatalf("paused: failed old pod replaced by revision %s, want the old %s", h, oldHash)
	}
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 0)
	wantNodesOn(t, tc, newHash, oldHash)

	setAnnotations(tc, ds, map[string]*string{rollout.Paused: str("false")})
	rolloutStep(t, tc, ds, 0, 2)
	wantCondition(t, ds, corev1.ConditionUnknown, rollout.ReasonResumed, "DaemonSet is resumed")
	wantEvent(t, tc, "Normal DaemonSetResumed")
	rolloutStep(t, tc, ds, 2, 0)
	for range 2 {
		markPodsReady(tc)
		rolloutStep(t, tc, ds, 0, 2)
		rolloutStep(t, tc, ds, 2, 0)
	}
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 0)
	wantNodesOn(t, tc, newHash, "", "node-0", "node-1", "node-2", "node-3", "node-4", "node-5")
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonNewRevisionAvailable, `daemon set "foo" has successfully progressed`)
	wantEvent(t, tc, "Normal NewRevisionAvailable")
}

// TestPauseLeavesOnDelete: the settings gate RollingUpdate only; an OnDelete
// DaemonSet gives new nodes the current revision, paused or not.
func TestPauseLeavesOnDelete(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Annotations = map[string]string{rollout.Paused: "true"}
	tc := newTestController(t, ds)
	startRolled(t, tc, ds, 2)
	newHash := changeImage(tc, ds)
	tc.nodeStore.Add(newNode("node-2", nil))
	created := rolloutStep(t, tc, ds, 1, 0)
	if h := created[0].Labels[RevisionHashLabel]; h != newHash {
		t.Fatalf("OnDelete: new node got %s, want the current %s", h, newHash)
	}
	if len(ds.Status.Conditions) != 0 {
		t.Fatalf("OnDelete got conditions %v", ds.Status.Conditions)
	}
}

// TestPartitionN: partition 2 updates node-0 and node-1 (by name) within
// maxUnavailable 1 and stops there waiting for promote; a node joining
// with an earlier name gets the old revision (the partition keeps the
// updated nodes); promote updates the rest.
func TestPartitionN(t *testing.T) {
	tc, ds, oldHash, newHash := startRollout(t, newUpdateUnavailable(intstr.FromInt32(1)), 5,
		map[string]*string{rollout.Partition: str("2")})

	rolloutStep(t, tc, ds, 0, 1)
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonCanaryUpdating, "canary: 0/2 updated and ready")
	wantEvent(t, tc, "Normal CanaryUpdating canary: 0/2 updated and ready")
	rolloutStep(t, tc, ds, 1, 0)
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 1)
	rolloutStep(t, tc, ds, 1, 0)
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 0)
	rolloutStep(t, tc, ds, 0, 0)
	wantNodesOn(t, tc, newHash, oldHash, "node-0", "node-1")
	wantCondition(t, ds, corev1.ConditionUnknown, rollout.ReasonWaitingForPromote, "canary: 2/2 updated and ready; waiting for promote")
	wantEvent(t, tc, "Normal WaitingForPromote canary: 2/2 updated and ready; waiting for promote")

	tc.nodeStore.Add(newNode("a-node", nil))
	created := rolloutStep(t, tc, ds, 1, 0)
	if h := created[0].Labels[RevisionHashLabel]; h != oldHash {
		t.Fatalf("node joining a full partition got %s, want the old %s", h, oldHash)
	}
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 0)
	wantNodesOn(t, tc, newHash, oldHash, "node-0", "node-1")

	// Promote: the rest, one at a time.
	setAnnotations(tc, ds, map[string]*string{rollout.Partition: nil})
	rolloutStep(t, tc, ds, 0, 1)
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonPromoted, "canary promoted")
	wantEvent(t, tc, "Normal CanaryPromoted")
	rolloutStep(t, tc, ds, 1, 0)
	for range 3 {
		markPodsReady(tc)
		rolloutStep(t, tc, ds, 0, 1)
		rolloutStep(t, tc, ds, 1, 0)
	}
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 0)
	wantNodesOn(t, tc, newHash, "", "a-node", "node-0", "node-1", "node-2", "node-3", "node-4")
	wantCondition(t, ds, corev1.ConditionTrue, rollout.ReasonNewRevisionAvailable, "successfully progressed")
}

// TestPartitionPercent: 50% of 5 desired nodes is 3 (rounded up, as
// maxUnavailable percentages are).
func TestPartitionPercent(t *testing.T) {
	tc, ds, oldHash, newHash := startRollout(t, newUpdateUnavailable(intstr.FromString("100%")), 5,
		map[string]*string{rollout.Partition: str("50%")})
	rolloutStep(t, tc, ds, 0, 3)
	rolloutStep(t, tc, ds, 3, 0)
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 0)
	wantNodesOn(t, tc, newHash, oldHash, "node-0", "node-1", "node-2")
	wantCondition(t, ds, corev1.ConditionUnknown, rollout.ReasonWaitingForPromote, "canary: 3/3 updated and ready; waiting for promote")
}

// TestCanarySelector: only the nodes matching the selector update; with a
// partition too, only the first N of them.
func TestCanarySelector(t *testing.T) {
	for _, tc := range []struct {
		name      string
		partition *string
		want      []string
	}{
		{"selector", nil, []string{"node-1", "node-3", "node-4"}},
		{"selector and partition", str("2"), []string{"node-1", "node-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := newDaemonSet("foo")
			ds.Spec.UpdateStrategy = newUpdateUnavailable(intstr.FromInt32(5))
			c := newTestController(t, ds)
			oldHash := startRolled(t, c, ds, 5)
			for _, n := range []string{"node-1", "node-3", "node-4"} {
				c.nodeStore.Update(newNode(n, map[string]string{"canary": "true"}))
			}
			setAnnotations(c, ds, map[string]*string{rollout.CanarySelector: str("canary=true"), rollout.Partition: tc.partition})
			newHash := changeImage(c, ds)
			rolloutStep(t, c, ds, 0, len(tc.want))
			rolloutStep(t, c, ds, len(tc.want), 0)
			markPodsReady(c)
			rolloutStep(t, c, ds, 0, 0)
			wantNodesOn(t, c, newHash, oldHash, tc.want...)
			wantCondition(t, ds, corev1.ConditionUnknown, rollout.ReasonWaitingForPromote,
				fmt.Sprintf("canary: %d/%d updated and ready; waiting for promote", len(tc.want), len(tc.want)))
		})
	}
}

// TestPartitionWithSurge: maxSurge still bounds the update inside the
// partition, and surge pods go to partition nodes only.
func TestPartitionWithSurge(t *testing.T) {
	tc, ds, oldHash, newHash := startRollout(t, newUpdateSurge(intstr.FromInt32(1)), 5,
		map[string]*string{rollout.Partition: str("2")})
	created := rolloutStep(t, tc, ds, 1, 0)
	if created[0].Spec.NodeName != "node-0" {
		t.Fatalf("surge pod on %s, want node-0", created[0].Spec.NodeName)
	}
	rolloutStep(t, tc, ds, 0, 0)
	markPodsReady(tc)
	created = rolloutStep(t, tc, ds, 1, 1)
	if created[0].Spec.NodeName != "node-1" {
		t.Fatalf("surge pod on %s, want node-1", created[0].Spec.NodeName)
	}
	rolloutStep(t, tc, ds, 0, 0)
	markPodsReady(tc)
	rolloutStep(t, tc, ds, 0, 1)
	rolloutStep(t, tc, ds, 0, 0)
	wantNodesOn(t, tc, newHash, oldHash, "node-0", "node-1")
}

// TestInvalidRolloutAnnotationHolds: settings the controller cannot read
// (stored before admission checked them) hold the rollout as a pause would,
// with a Warning event naming the problem.
func TestInvalidRolloutAnnotationHolds(t *testing.T) {
	tc, ds, _, _ := startRollout(t, newUpdateUnavailable(intstr.FromInt32(5)), 3,
		map[string]*string{rollout.Partition: str("some")})
	rolloutStep(t, tc, ds, 0, 0)
	wantCondition(t, ds, corev1.ConditionUnknown, rollout.ReasonInvalidAnnotation, `rollout.everynode.io/partition]: Invalid value: "some"`)
	wantEvent(t, tc, "Warning InvalidRolloutAnnotation rollout held: ")
	setAnnotations(tc, ds, map[string]*string{rollout.Partition: nil})
	rolloutStep(t, tc, ds, 0, 3)
	wantCondition(t, ds, corev1.ConditionUnknown, rollout.ReasonResumed, "")
}
