package garbagecollector

import (
	"context"
	"fmt"
	"testing"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

func TestDecide(t *testing.T) {
	refs := func(n int) []metav1.OwnerReference {
		out := make([]metav1.OwnerReference, n)
		for i := range out {
			out[i].UID = types.UID(fmt.Sprint("u", i))
		}
		return out
	}
	cases := []struct {
		name    string
		states  []ownerState
		deleteT bool
		remove  []types.UID
	}{
		{"live owner", []ownerState{ownerLive}, false, nil},
		{"owner gone", []ownerState{ownerAbsent}, true, nil},
		{"foreground deleting owner", []ownerState{ownerForeground}, true, nil},
		{"orphaning owner", []ownerState{ownerOrphaning}, false, []types.UID{"u0"}},
		{"one of two owners gone", []ownerState{ownerAbsent, ownerLive}, false, []types.UID{"u0"}},
		{"gone and foreground", []ownerState{ownerAbsent, ownerForeground}, true, nil},
		{"gone and orphaning", []ownerState{ownerAbsent, ownerOrphaning}, false, []types.UID{"u0", "u1"}},
		{"unknown kind keeps", []ownerState{ownerUnknownKind, ownerAbsent}, false, []types.UID{"u1"}},
	}
	for _, c := range cases {
		d := decide(refs(len(c.states)), c.states)
		if d.deleteIt != c.deleteT || fmt.Sprint(d.removeRefs) != fmt.Sprint(c.remove) {
			t.Errorf("%s: got %+v, want delete=%t remove=%v", c.name, d, c.deleteT, c.remove)
		}
	}
}

type harness struct {
	c  *Collector
	fc *fake.Client
}

func newHarness(t *testing.T, objs ...resources.Object) *harness {
	t.Helper()
	return newHarnessAt(t, nil, objs...)
}

// newHarnessAt is newHarness with the collector on clk (nil: the real clock).
func newHarnessAt(t *testing.T, clk clock.WithTicker, objs ...resources.Object) *harness {
	t.Helper()
	fc := fake.New(objs...)
	c, err := New(Config{Client: fc, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	h := &harness{c: c, fc: fc}
	h.refresh(t)
	return h
}

// refresh makes the caches equal the fake API.
func (h *harness) refresh(t *testing.T) {
	t.Helper()
	for r, store := range h.c.stores {
		items, _, err := h.fc.List(context.Background(), r, "", client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		objs := make([]any, len(items))
		for i := range items {
			objs[i] = items[i]
		}
		store.Replace(objs, "")
	}
}

// drain runs every queued item, refreshing caches between rounds, until the
// queue is empty (bounded).
func (h *harness) drain(t *testing.T) {
	t.Helper()
	for round := 0; round < 20; round++ {
		h.c.enqueueAll()
		if h.c.queue.Len() == 0 {
			return
		}
		for h.c.queue.Len() > 0 {
			it, _ := h.c.queue.Get()
			if err := h.c.sync(context.Background(), it); err != nil {
				t.Fatalf("sync %+v: %v", it, err)
			}
			h.c.queue.Done(it)
			h.c.queue.Forget(it)
		}
		h.refresh(t)
	}
}

func (h *harness) exists(r *resources.Resource, ns, name string) bool {
	_, err := h.fc.Get(context.Background(), r, ns, name)
	return !apierrors.IsNotFound(err)
}

// live reports whether an object exists and is not being deleted: a deleted
// pod bound to a node stays, marked, until its node agent removes it.
func (h *harness) live(r *resources.Resource, ns, name string) bool {
	o, err := h.fc.Get(context.Background(), r, ns, name)
	return !apierrors.IsNotFound(err) && (o == nil || o.GetDeletionTimestamp() == nil)
}

func (h *harness) get(t *testing.T, r *resources.Resource, ns, name string) metav1.Object {
	t.Helper()
	o, err := h.fc.Get(context.Background(), r, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// containers is a valid pod's one container.
var containers = []corev1.Container{{Name: "c", Image: "img"}}

func ds(name, uid string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: containers}},
		},
	}
}

var dsKind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

func ownedPod(name, node string, owners ...*appsv1.DaemonSet) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{NodeName: node, Containers: containers}}
	for _, o := range owners {
		p.OwnerReferences = append(p.OwnerReferences, *metav1.NewControllerRef(o, dsKind))
	}
	if len(owners) > 1 { // only one controller
		for i := 1; i < len(p.OwnerReferences); i++ {
			p.OwnerReferences[i].Controller = nil
		}
	}
	return p
}

func ownedRevision(name string, owner *appsv1.DaemonSet) *appsv1.ControllerRevision {
	return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, dsKind)}},
		Data: k8sruntime.RawExtension{Raw: []byte(`{}`)}, Revision: 1}
}

func node(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

func TestBackgroundCascade(t *testing.T) {
	gone := ds("gone", "uid-gone")
	live := ds("live", "uid-live")
	h := newHarness(t, live, node("n1"),
		ownedPod("orphaned-by-delete", "n1", gone), ownedRevision("gone-rev", gone),
		ownedPod("kept", "n1", live), ownedPod("two-owners", "n1", live, gone),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "no-owner"}, Spec: corev1.PodSpec{NodeName: "n1", Containers: containers}})
	h.drain(t)
	if h.live(resources.Pods, "default", "orphaned-by-delete") || h.exists(resources.ControllerRevisions, "default", "gone-rev") {
		t.Error("dependents of a deleted owner survived")
	}
	if !h.exists(resources.Pods, "default", "kept") || !h.exists(resources.Pods, "default", "no-owner") {
		t.Error("a pod with a live owner, or without owner, was deleted")
	}
	refs := h.get(t, resources.Pods, "default", "two-owners").GetOwnerReferences()
	if len(refs) != 1 || refs[0].UID != "uid-live" {
		t.Errorf("two-owners refs %v, want only the live owner", refs)
	}
}

func TestRecreatedOwnerIsNotTheOwner(t *testing.T) {
	// Same name, new UID: pods of the old incarnation are dangling.
	old := ds("foo", "uid-old")
	h := newHarness(t, ds("foo", "uid-new"), ownedPod("p", "", old))
	h.drain(t)
	if h.exists(resources.Pods, "default", "p") {
		t.Error("pod of a previous incarnation kept")
	}
}

func TestStaleCacheNeverDeletes(t *testing.T) {
	owner := ds("foo", "uid-1")
	h := newHarness(t, owner, ownedPod("p", "", owner))
	h.c.stores[resources.DaemonSets].Delete(owner) // the cache has not seen the owner
	if err := h.c.syncDependent(context.Background(), resources.Pods, "default", "p"); err != nil {
		t.Fatal(err)
	}
	if !h.exists(resources.Pods, "default", "p") {
		t.Error("pod deleted because of a stale cache")
	}
}

func TestOrphanCascade(t *testing.T) {
	owner := ds("foo", "uid-1")
	h := newHarness(t, owner, ownedPod("p1", "", owner), ownedPod("p2", "", owner), ownedRevision("foo-rev", owner))
	orphan := metav1.DeletePropagationOrphan
	if _, err := h.fc.Delete(context.Background(), resources.DaemonSets, "default", "foo", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	h.refresh(t)
	h.drain(t)
	if h.exists(resources.DaemonSets, "default", "foo") {
		t.Error("owner still present after orphaning")
	}
	for _, p := range []struct {
		r    *resources.Resource
		name string
	}{{resources.Pods, "p1"}, {resources.Pods, "p2"}, {resources.ControllerRevisions, "foo-rev"}} {
		o := h.get(t, p.r, "default", p.name)
		if len(o.GetOwnerReferences()) != 0 {
			t.Errorf("%s still owned: %v", p.name, o.GetOwnerReferences())
		}
	}
}

func TestForegroundCascade(t *testing.T) {
	owner := ds("foo", "uid-1")
	h := newHarness(t, owner, ownedPod("p1", "", owner), ownedRevision("foo-rev", owner))
	fg := metav1.DeletePropagationForeground
	if _, err := h.fc.Delete(context.Background(), resources.DaemonSets, "default", "foo", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	h.refresh(t)
	// While a blocking dependent exists, the owner waits.
	if err := h.c.syncOwner(context.Background(), resources.DaemonSets, "default", "foo"); err != nil {
		t.Fatal(err)
	}
	if !h.exists(resources.DaemonSets, "default", "foo") {
		t.Fatal("owner released before its dependents were deleted")
	}
	h.drain(t)
	if h.exists(resources.Pods, "default", "p1") || h.exists(resources.ControllerRevisions, "default", "foo-rev") {
		t.Error("dependents survived foreground deletion")
	}
	if h.exists(resources.DaemonSets, "default", "foo") {
		t.Error("owner not removed after its dependents")
	}
}

// TestPodsOfDeletedNode: pod GC as Kubernetes': a pod whose Node is gone
// (by a live read, not only the cache) is kept for the quarantine, then
// marked Failed with the DisruptionTarget condition and force-deleted; a
// Node that comes back within the quarantine keeps its pods.
func TestPodsOfDeletedNode(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	running := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	h := newHarnessAt(t, clk, node("n1"), node("n2"), node("n3"),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "on-n1", UID: "uid-n1"}, Spec: podSpec("n1"), Status: running},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "on-n2"}, Spec: podSpec("n2")},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "on-n3"}, Spec: podSpec("n3")},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "unbound"}, Spec: podSpec("")})
	fc := h.fc
	for _, n := range []string{"n1", "n3"} {
		if _, err := fc.Delete(t.Context(), resources.Nodes, "", n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// n2 is missing from the cache only: the live GET protects its pod.
	h.refresh(t)
	h.c.stores[resources.Nodes].Delete(node("n2"))
	syncAll := func() {
		t.Helper()
		for _, name := range []string{"on-n1", "on-n2", "on-n3", "unbound"} {
			if err := h.c.syncBoundPod(t.Context(), "default", name); err != nil {
				t.Fatal(err)
			}
		}
	}
	syncAll()
	clk.Step(DefaultOrphanQuarantine - time.Second)
	syncAll()
	for _, name := range []string{"on-n1", "on-n2", "on-n3", "unbound"} {
		if !h.exists(resources.Pods, "default", name) {
			t.Fatalf("pod %s deleted within the quarantine", name)
		}
	}
	if n := h.c.queue.Len(); n != 0 {
		t.Errorf("%d items ready before the quarantine ends", n)
	}
	// n3 is registered again: its pod stays, whatever the clock.
	if _, err := fc.Create(t.Context(), node("n3"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh(t)
	fc.ClearActions()
	clk.Step(2 * time.Second)
	syncAll()
	if h.exists(resources.Pods, "default", "on-n1") {
		t.Error("pod of deleted node kept after the quarantine")
	}
	for _, name := range []string{"on-n2", "on-n3", "unbound"} {
		if !h.exists(resources.Pods, "default", name) {
			t.Errorf("pod %s of an existing node, a node back, or unbound, deleted", name)
		}
	}
	var verbs []string
	for _, a := range fc.Actions() {
		if a.Verb != fake.VerbGet {
			verbs = append(verbs, a.Verb+" "+a.Resource+"/"+a.Subresource+" "+a.Name)
		}
	}
	if want := []string{"patch pods/status on-n1", "delete pods/ on-n1"}; fmt.Sprint(verbs) != fmt.Sprint(want) {
		t.Errorf("writes %q, want %q", verbs, want)
	}

	// n3 goes again, 41 s after it first went: its quarantine starts over.
	if _, err := fc.Delete(t.Context(), resources.Nodes, "", "n3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh(t)
	syncAll()
	clk.Step(DefaultOrphanQuarantine - time.Second)
	syncAll()
	if !h.exists(resources.Pods, "default", "on-n3") {
		t.Error("pod of a Node deleted a second time went before its own quarantine")
	}
	clk.Step(time.Second)
	syncAll()
	if h.exists(resources.Pods, "default", "on-n3") {
		t.Error("pod of a Node deleted a second time kept after its quarantine")
	}
	// A resync forgets Nodes no pod is bound to any more.
	h.refresh(t)
	h.c.enqueueAll()
	h.c.mu.Lock()
	left := len(h.c.nodesGone)
	h.c.mu.Unlock()
	if left != 0 {
		t.Errorf("%d missing Nodes remembered without pods", left)
	}
}

// TestOrphanRecreatedUnderItsName: when the pod's name holds another pod
// by the time pod GC marks it, the refused patch (422, the uid) is not an
// error to retry, and the new pod is neither marked nor deleted.
func TestOrphanRecreatedUnderItsName(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}, Spec: podSpec("gone")}
	h := newHarnessAt(t, clk, old)
	c, fc := h.c, h.fc
	if err := c.syncBoundPod(t.Context(), "default", "p"); err != nil {
		t.Fatal(err)
	}
	clk.Step(DefaultOrphanQuarantine)
	// The name is taken by another pod; the cache still has the first.
	zero := int64(0)
	if _, err := fc.Delete(t.Context(), resources.Pods, "default", "p", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, err := fc.Create(t.Context(), old.DeepCopy(), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.syncBoundPod(t.Context(), "default", "p"); err != nil {
		t.Errorf("sync with the name re-used: %v", err)
	}
	got, err := fc.Get(t.Context(), resources.Pods, "default", "p")
	if err != nil {
		t.Fatalf("the new pod: %v", err)
	}
	if st := got.(*corev1.Pod).Status; st.Phase == corev1.PodFailed || len(st.Conditions) != 0 {
		t.Errorf("the new pod marked: %+v", st)
	}
}

// TestMarkOrphanFailed: the status patch pod GC sends before deleting sets
// phase Failed and the DisruptionTarget condition, keeps the other
// conditions, and carries the pod's UID: a pod re-created under the same
// name is not marked.
func TestMarkOrphanFailed(t *testing.T) {
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}, Spec: podSpec("gone"),
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	h := newHarnessAt(t, clocktesting.NewFakeClock(now), pod)
	c, fc := h.c, h.fc
	stored, err := fc.Get(t.Context(), resources.Pods, "default", "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.markOrphanFailed(t.Context(), stored.(*corev1.Pod)); err != nil {
		t.Fatal(err)
	}
	got, err := fc.Get(t.Context(), resources.Pods, "default", "p")
	if err != nil {
		t.Fatal(err)
	}
	st := got.(*corev1.Pod).Status
	if st.Phase != corev1.PodFailed || len(st.Conditions) != 2 || st.Conditions[0].Type != corev1.PodReady {
		t.Fatalf("status %+v", st)
	}
	if d := st.Conditions[1]; d.Type != corev1.DisruptionTarget || d.Status != corev1.ConditionTrue || d.Reason != ReasonDeletionByPodGC ||
		d.Message != "PodGC: node no longer exists" || !d.LastTransitionTime.Time.Equal(now) {
		t.Errorf("condition %+v", d)
	}

	// The same name, another pod: the UID precondition refuses the patch.
	stale := stored.(*corev1.Pod).DeepCopy()
	if _, err := fc.Delete(t.Context(), resources.Pods, "default", "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := pod.DeepCopy()
	if _, err := fc.Create(t.Context(), again, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.markOrphanFailed(t.Context(), stale); !apierrors.IsInvalid(err) {
		t.Errorf("patch of a re-created pod: %v, want 422 (uid is immutable)", err)
	}
	cur, err := fc.Get(t.Context(), resources.Pods, "default", "p")
	if err != nil {
		t.Fatal(err)
	}
	if st := cur.(*corev1.Pod).Status; st.Phase == corev1.PodFailed || len(st.Conditions) != 0 {
		t.Errorf("re-created pod marked: %+v", st)
	}
}

func podSpec(node string) corev1.PodSpec {
	return corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "i"}}}
}

func TestRunCollects(t *testing.T) {
	checkLeaks := testkit.LeakCheck(t)
	owner := ds("foo", "uid-1")
	fc := fake.New(owner, node("n1"), ownedPod("p1", "n1", owner), ownedPod("p2", "n1", owner))
	c, err := New(Config{Client: fc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx, 2) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testkit.EventuallyTrue(t, 10*time.Second, what, cond)
	}
	// podCount counts the pods not being deleted (bound pods wait, marked,
	// for their node agent).
	podCount := func() int {
		pods, _, _ := fc.List(context.Background(), resources.Pods, "", client.ListOptions{})
		n := 0
		for _, p := range pods {
			if p.GetDeletionTimestamp() == nil {
				n++
			}
		}
		return n
	}
	if _, err := fc.Delete(context.Background(), resources.DaemonSets, "default", "foo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("background cascade", func() bool { return podCount() == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if n := fc.Watchers(); n != 0 {
		t.Errorf("%d watches open", n)
	}
	checkLeaks()
}
