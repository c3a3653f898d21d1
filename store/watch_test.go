package store

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/resources"
)

// want is an expected watch event: type, object name and resourceVersion
// (rv 0: any).
type want struct {
	typ  watch.EventType
	name string
	rv   int64
}

func expectEvents(t *testing.T, w watch.Interface, wants ...want) {
	t.Helper()
	for i, wnt := range wants {
		e := next(t, w)
		obj := e.Object.(resources.Object)
		rv := rvOf(t, obj)
		if e.Type != wnt.typ || obj.GetName() != wnt.name || (wnt.rv != 0 && rv != wnt.rv) {
			t.Fatalf("event %d = %s %s rv=%d, want %s %s rv=%d", i, e.Type, obj.GetName(), rv, wnt.typ, wnt.name, wnt.rv)
		}
	}
}

func TestWatchResumeFromResourceVersion(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	p1 := mustCreate(t, s, resources.Pods, newPod("default", "p1", "", nil))
	p2 := mustCreate(t, s, resources.Pods, newPod("default", "p2", "", nil))
	u := p1.(*corev1.Pod).DeepCopy()
	u.Labels = map[string]string{"v": "2"}
	p1v2, err := s.Update(ctx, resources.Pods, u)
	if err != nil {
		t.Fatal(err)
	}
	del, err := s.Delete(ctx, resources.Pods, "default", "p2", nil)
	if err != nil {
		t.Fatal(err)
	}

	w, err := s.Watch(ctx, resources.Pods, "", rvOf(t, p2), Selector{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	expectEvents(t, w,
		want{watch.Modified, "p1", rvOf(t, p1v2)},
		want{watch.Deleted, "p2", rvOf(t, del)},
	)
	expectNone(t, s, resources.Pods, w)

	// Live events follow the replayed ones.
	p3 := mustCreate(t, s, resources.Pods, newPod("default", "p3", "", nil))
	expectEvents(t, w, want{watch.Added, "p3", rvOf(t, p3)})

	// rv 0: the current state as synthetic ADDED events, sorted, then live.
	w0, err := s.Watch(ctx, resources.Pods, "default", 0, Selector{})
	if err != nil {
		t.Fatal(err)
	}
	defer w0.Stop()
	expectEvents(t, w0, want{watch.Added, "p1", rvOf(t, p1v2)}, want{watch.Added, "p3", rvOf(t, p3)})
	expectNone(t, s, resources.Pods, w0)
	if _, err := s.Delete(ctx, resources.Pods, "default", "p1", nil); err != nil {
		t.Fatal(err)
	}
	e := next(t, w0)
	if e.Type != watch.Deleted || e.Object.(resources.Object).GetLabels()["v"] != "2" {
		t.Errorf("DELETED should carry the last state: %s %v", e.Type, e.Object.(resources.Object).GetLabels())
	}
}

func TestWatchGoneAfterCompaction(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	old := mustCreate(t, s, resources.Pods, newPod("default", "a", "", nil))
	for i := range 5 {
		mustCreate(t, s, resources.Pods, newPod("default", fmt.Sprintf("b%d", i), "", nil))
	}
	rev, err := s.currentRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(ctx, rev-1); err != nil {
		t.Errorf("compacting to an already compacted revision: %v", err)
	}
	_, err = s.Watch(ctx, resources.Pods, "", rvOf(t, old), Selector{})
	if !IsGone(err) {
		t.Fatalf("Watch from compacted rv: got %v, want Gone", err)
	}
	// The newest revision still works, and so does rv 0.
	for _, rv := range []int64{rev, 0} {
		w, err := s.Watch(ctx, resources.Pods, "", rv, Selector{})
		if err != nil {
			t.Fatalf("Watch from %d after compaction: %v", rv, err)
		}
		w.Stop()
	}
}

func TestWatchGoneWhenEvictedFromRing(t *testing.T) {
	s := openTest(t, func(c *Config) { c.ringSize = 4 })
	ctx := testCtx(t)
	var rvs []int64
	for i := range 8 {
		rvs = append(rvs, rvOf(t, mustCreate(t, s, resources.Pods, newPod("default", fmt.Sprintf("p%d", i), "", nil))))
	}
	if _, _, err := s.List(ctx, resources.Pods, "", Selector{}); err != nil { // cache caught up
		t.Fatal(err)
	}
	if _, err := s.Watch(ctx, resources.Pods, "", rvs[2], Selector{}); !IsGone(err) {
		t.Fatalf("Watch from an evicted rv: got %v, want Gone", err)
	}
	// The ring holds p4..p7: resuming from p3's rv replays exactly those.
	w, err := s.Watch(ctx, resources.Pods, "", rvs[3], Selector{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	expectEvents(t, w, want{watch.Added, "p4", rvs[4]}, want{watch.Added, "p5", rvs[5]},
		want{watch.Added, "p6", rvs[6]}, want{watch.Added, "p7", rvs[7]})
}

func TestWatchFutureResourceVersionIsGone(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	rev, _ := s.currentRevision(ctx)
	if _, err := s.Watch(ctx, resources.Pods, "", rev+1000, Selector{}); !IsGone(err) {
		t.Fatalf("Watch from the future: got %v, want Gone", err)
	}
}

// A write to another resource advances etcd's revision without any event on
// the pods prefix; a Watch from that revision must still be accepted (the
// cache learns of it through a progress notification).
func TestWatchFromRevisionOfOtherResource(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	node := &corev1.Node{}
	node.Name = "n1"
	rv := rvOf(t, mustCreate(t, s, resources.Nodes, node))
	w, err := s.Watch(ctx, resources.Pods, "", rv, Selector{})
	if err != nil {
		t.Fatalf("Watch pods from a nodes revision: %v", err)
	}
	defer w.Stop()
	p := mustCreate(t, s, resources.Pods, newPod("default", "p", "", nil))
	expectEvents(t, w, want{watch.Added, "p", rvOf(t, p)})
}

func TestRelistClosesWatchersAndForgetsHistory(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	first := mustCreate(t, s, resources.Pods, newPod("default", "a", "", nil))
	mustCreate(t, s, resources.Pods, newPod("default", "b", "", nil))
	w, err := s.Watch(ctx, resources.Pods, "", 0, Selector{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, want{watch.Added, "a", 0}, want{watch.Added, "b", 0})

	c, _ := s.cacheFor(resources.Pods)
	if err := c.relist(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-w.ResultChan():
		if ok {
			t.Fatal("event after relist; want the watch closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch not closed by relist")
	}
	if _, err := s.Watch(ctx, resources.Pods, "", rvOf(t, first), Selector{}); !IsGone(err) {
		t.Fatalf("Watch from before the relist: got %v, want Gone", err)
	}
	// The cache keeps following etcd after the relist.
	p := mustCreate(t, s, resources.Pods, newPod("default", "c", "", nil))
	items, rv, err := s.List(ctx, resources.Pods, "", Selector{})
	if err != nil || len(items) != 3 || rv < rvOf(t, p) {
		t.Fatalf("List after relist: %d items rv=%d err=%v", len(items), rv, err)
	}
}

func TestWatchFieldSelectorNodeName(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	watchNode := func(sel string) watch.Interface {
		w, err := s.Watch(ctx, resources.Pods, "", 0, Selector{Field: mustField(t, sel)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return w
	}
	wa := watchNode("spec.nodeName=node-a")
	wb := watchNode("spec.nodeName=node-b")
	wRunning := watchNode("spec.nodeName=node-a,status.phase=Running")
	wOther, err := s.Watch(ctx, resources.Pods, "other", 0, Selector{Field: mustField(t, "spec.nodeName=node-a")})
	if err != nil {
		t.Fatal(err)
	}
	defer wOther.Stop()

	c, _ := s.cacheFor(resources.Pods)
	c.mu.RLock()
	indexed, unindexed := len(c.nodeWatchers["node-a"]), len(c.watchers)
	c.mu.RUnlock()
	if indexed != 3 || unindexed != 0 {
		t.Errorf("node index: %d watchers under node-a, %d unindexed; want 3 and 0", indexed, unindexed)
	}

	pa := mustCreate(t, s, resources.Pods, newPod("default", "pa", "node-a", nil))
	expectEvents(t, wa, want{watch.Added, "pa", rvOf(t, pa)})
	pb := mustCreate(t, s, resources.Pods, newPod("default", "pb", "node-b", nil))
	expectEvents(t, wb, want{watch.Added, "pb", rvOf(t, pb)})
	mustCreate(t, s, resources.Pods, newPod("default", "pending", "", nil))

	// Binding a pending pod to node-a: it starts matching.
	bound, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "pending", func(cur resources.Object) (resources.Object, error) {
		cur.(*corev1.Pod).Spec.NodeName = "node-a"
		return cur, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, wa, want{watch.Added, "pending", rvOf(t, bound)})

	// Status change to Running reaches the combined selector as ADDED.
	running, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "pa", func(cur resources.Object) (resources.Object, error) {
		cur.(*corev1.Pod).Status.Phase = corev1.PodRunning
		return cur, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, wa, want{watch.Modified, "pa", rvOf(t, running)})
	expectEvents(t, wRunning, want{watch.Added, "pa", rvOf(t, running)})

	// Moving pa to node-b: DELETED (its node-a state) for node-a, ADDED for node-b.
	moved, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "pa", func(cur resources.Object) (resources.Object, error) {
		cur.(*corev1.Pod).Spec.NodeName = "node-b"
		return cur, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e := next(t, wa)
	if e.Type != watch.Deleted || e.Object.(*corev1.Pod).Spec.NodeName != "node-a" || rvOf(t, e.Object.(resources.Object)) != rvOf(t, moved) {
		t.Errorf("node-a watcher on move: %s node=%s rv=%s", e.Type, e.Object.(*corev1.Pod).Spec.NodeName, e.Object.(resources.Object).GetResourceVersion())
	}
	expectEvents(t, wRunning, want{watch.Deleted, "pa", rvOf(t, moved)})
	expectEvents(t, wb, want{watch.Added, "pa", rvOf(t, moved)})

	del, err := s.Delete(ctx, resources.Pods, "default", "pending", nil)
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, wa, want{watch.Deleted, "pending", rvOf(t, del)})

	for _, w := range []watch.Interface{wa, wb, wRunning, wOther} {
		expectNone(t, s, resources.Pods, w)
	}

	items, _, err := s.List(ctx, resources.Pods, "", Selector{Field: mustField(t, "spec.nodeName=node-b")})
	if err != nil || len(items) != 2 || items[0].GetName() != "pa" || items[1].GetName() != "pb" {
		t.Errorf("List node-b = %v, %v", names(items), err)
	}
}

func TestWatchLabelSelectorTransitions(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	start, _ := s.currentRevision(ctx)
	live, err := s.Watch(ctx, resources.Pods, "default", 0, Selector{Label: mustLabel(t, "app=web")})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Stop()

	setApp := func(app, extra string) int64 {
		out, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", func(cur resources.Object) (resources.Object, error) {
			cur.SetLabels(map[string]string{"app": app, "extra": extra})
			return cur, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return rvOf(t, out)
	}
	mustCreate(t, s, resources.Pods, newPod("default", "p", "", map[string]string{"app": "db"}))
	toWeb := setApp("web", "1")
	stillWeb := setApp("web", "2")
	toDB := setApp("db", "3")
	if _, err := s.Delete(ctx, resources.Pods, "default", "p", nil); err != nil {
		t.Fatal(err)
	}
	wants := []want{{watch.Added, "p", toWeb}, {watch.Modified, "p", stillWeb}, {watch.Deleted, "p", toDB}}

	// The same transitions, live and replayed from the ring.
	replay, err := s.Watch(ctx, resources.Pods, "default", start, Selector{Label: mustLabel(t, "app=web")})
	if err != nil {
		t.Fatal(err)
	}
	defer replay.Stop()
	for name, w := range map[string]watch.Interface{"live": live, "replay": replay} {
		t.Run(name, func(t *testing.T) {
			expectEvents(t, w, wants...)
			expectNone(t, s, resources.Pods, w)
		})
	}
}

func TestSlowWatcherIsClosedWithoutBlockingOthers(t *testing.T) {
	s := openTest(t, func(c *Config) { c.watchBuffer = 4 })
	ctx := testCtx(t)
	slow, err := s.Watch(ctx, resources.Pods, "", 0, Selector{})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Stop()
	// The fast consumer gets a buffer no burst in this test can fill, so the
	// test does not depend on scheduling.
	c, _ := s.cacheFor(resources.Pods)
	fast, err := c.addWatcher(ctx, newMatcher(resources.Pods, "", Selector{}), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Stop()

	const n = 20
	fastDone := make(chan []string)
	go func() {
		var got []string
		for e := range fast.ResultChan() {
			got = append(got, e.Object.(resources.Object).GetName())
			if len(got) == n {
				break
			}
		}
		fastDone <- got
	}()
	for i := range n {
		mustCreate(t, s, resources.Pods, newPod("default", fmt.Sprintf("p%02d", i), "", nil))
	}
	select {
	case got := <-fastDone:
		for i, name := range got {
			if want := fmt.Sprintf("p%02d", i); name != want {
				t.Fatalf("fast watcher event %d = %s, want %s", i, name, want)
			}
		}
		if len(got) != n {
			t.Fatalf("fast watcher got %d events, want %d", len(got), n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fast watcher blocked")
	}

	// The slow watcher gets what it buffered, in order, then its channel closes.
	got := 0
	for e := range slow.ResultChan() {
		if name, want := e.Object.(resources.Object).GetName(), fmt.Sprintf("p%02d", got); name != want {
			t.Fatalf("slow watcher event %d = %s, want %s", got, name, want)
		}
		got++
	}
	if got >= n {
		t.Fatalf("slow watcher received all %d events; want it closed on overflow", got)
	}
}

func TestWatchStopAndContext(t *testing.T) {
	s := openTest(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	w1, err := s.Watch(ctx, resources.Pods, "", 0, Selector{})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := s.Watch(testCtx(t), resources.Pods, "", 0, Selector{})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	w2.Stop()
	w2.Stop()
	for name, w := range map[string]watch.Interface{"cancelled": w1, "stopped": w2} {
		select {
		case _, ok := <-w.ResultChan():
			if ok {
				t.Errorf("%s watcher: unexpected event", name)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s watcher: channel not closed", name)
		}
	}
	w1.Stop()
	c, _ := s.cacheFor(resources.Pods)
	c.mu.RLock()
	left := len(c.watchers)
	c.mu.RUnlock()
	if left != 0 {
		t.Errorf("%d watchers still registered", left)
	}
}

// TestWatchersHaveNoGoroutines: a watcher costs its queue, not a
// goroutine, so a thousand agents' watches do not cost a thousand stacks;
// the dispatcher still delivers to all of them.
func TestWatchersHaveNoGoroutines(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	mustCreate(t, s, resources.Pods, newPod("default", "p0", "n0", nil))
	before := storeGoroutines()
	const n = 200
	ws := make([]watch.Interface, n)
	for i := range ws {
		w, err := s.Watch(ctx, resources.Pods, "", 0, Selector{Field: mustField(t, "spec.nodeName=n0")})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		ws[i] = w
	}
	// Counted by stack, so that etcd's and the runtime's own goroutines,
	// which come and go with load, do not count.
	if grown := storeGoroutines() - before; grown > n/10 {
		t.Errorf("%d watchers started %d goroutines running store code", n, grown)
	}
	p1 := mustCreate(t, s, resources.Pods, newPod("default", "p1", "n0", nil))
	for _, w := range ws {
		expectEvents(t, w, want{watch.Added, "p0", 0}, want{watch.Added, "p1", rvOf(t, p1)})
	}
}

// storeGoroutines counts the goroutines with a frame of this package's
// (non-test) code on their stack.
func storeGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, line := range strings.Split(g, "\n") {
			if strings.HasPrefix(line, "github.com/everynode/everynode/store.") && !strings.Contains(line, "_test.") && !strings.Contains(line, ".Test") {
				count++
				break
			}
		}
	}
	return count
}

func names(items []resources.Object) []string {
	out := make([]string, len(items))
	for i, o := range items {
		out[i] = o.GetNamespace() + "/" + o.GetName()
	}
	return out
}
