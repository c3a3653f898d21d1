package store

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// write is one committed write as its writer saw it.
type write struct {
	typ  watch.EventType
	name string
	rev  int64
}

// TestWatchCacheConcurrentWrites runs several writers against several
// watchers started at different resourceVersions while the writes happen.
// Every watcher must see every write after its start exactly once, in
// revision order, and the state it builds must equal List.
func TestWatchCacheConcurrentWrites(t *testing.T) {
	// Buffers larger than the whole test's history: overflow is tested
	// elsewhere, here a consumer descheduled for a while must not fail it.
	s := openTest(t, func(c *Config) { c.watchBuffer = 1000 })
	ctx := testCtx(t)
	for i := range 3 {
		mustCreate(t, s, resources.Pods, newPod("default", fmt.Sprintf("seed-%d", i), "", nil))
	}

	type started struct {
		from int64
		w    *collector
	}
	var (
		mu       sync.Mutex
		writes   []write
		watchers []started
	)
	startWatcher := func(from int64) {
		w, err := s.Watch(ctx, resources.Pods, "", from, Selector{})
		if err != nil {
			t.Errorf("Watch from %d: %v", from, err)
			return
		}
		c := collect(w)
		t.Cleanup(c.stop)
		mu.Lock()
		watchers = append(watchers, started{from, c})
		mu.Unlock()
	}
	startWatcher(0)
	base, _ := s.currentRevision(ctx)
	startWatcher(base)

	const writers, ops = 4, 40
	var wg sync.WaitGroup
	for wi := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(wi), 1))
			live := map[string]bool{}
			for op := range ops {
				name := fmt.Sprintf("w%d-p%d", wi, rng.IntN(4))
				var out resources.Object
				var typ watch.EventType
				var err error
				switch {
				case !live[name]:
					typ = watch.Added
					out, err = s.Create(ctx, resources.Pods, newPod("default", name, "", nil))
					live[name] = true
				case rng.IntN(4) == 0:
					typ = watch.Deleted
					out, err = s.Delete(ctx, resources.Pods, "default", name, nil)
					delete(live, name)
				default:
					typ = watch.Modified
					out, err = s.GuaranteedUpdate(ctx, resources.Pods, "default", name, func(cur resources.Object) (resources.Object, error) {
						cur.SetLabels(map[string]string{"op": fmt.Sprint(op)})
						return cur, nil
					})
				}
				if err != nil {
					t.Errorf("writer %d op %d: %v", wi, op, err)
					return
				}
				rev := rvOf(t, out)
				mu.Lock()
				writes = append(writes, write{typ, name, rev})
				// Start watchers mid-flight, resuming from a write seen so far.
				if op == ops/4 || op == ops/2 {
					from := writes[rng.IntN(len(writes))].rev
					mu.Unlock()
					startWatcher(from)
					continue
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	slices.SortFunc(writes, func(a, b write) int { return int(a.rev - b.rev) })
	last := writes[len(writes)-1].rev

	listed, listRV, err := s.List(ctx, resources.Pods, "", Selector{})
	if err != nil {
		t.Fatal(err)
	}
	wantState := map[string]string{}
	for _, o := range listed {
		wantState[o.GetName()] = o.GetResourceVersion()
	}
	if listRV < last {
		t.Fatalf("list rv %d before last write %d", listRV, last)
	}

	for _, st := range watchers {
		t.Run(fmt.Sprintf("from-%d", st.from), func(t *testing.T) {
			evs := st.w.until(t, last)
			next := func(t *testing.T, _ *collector) watch.Event {
				t.Helper()
				if len(evs) == 0 {
					t.Fatal("ran out of events")
				}
				e := evs[0]
				evs = evs[1:]
				return e
			}
			state := map[string]string{}
			var got []write
			prev := int64(0)
			if st.from == 0 {
				// Synthetic ADDED events first: the state at some revision.
				for {
					e := next(t, st.w)
					o := e.Object.(resources.Object)
					if e.Type != watch.Added || len(o.GetName()) < 4 || o.GetName()[:4] != "seed" {
						got = append(got, write{e.Type, o.GetName(), rvOf(t, o)})
						prev = rvOf(t, o)
						applyEvent(state, e)
						break
					}
					applyEvent(state, e)
				}
			} else {
				for _, o := range listAt(t, s, writes, st.from) {
					state[o] = ""
				}
				// Seeds exist in every state this test resumes from.
				for i := range 3 {
					state[fmt.Sprintf("seed-%d", i)] = ""
				}
			}
			for prev < last {
				e := next(t, st.w)
				o := e.Object.(resources.Object)
				rev := rvOf(t, o)
				if rev <= prev {
					t.Fatalf("event %s %s rv=%d not after %d", e.Type, o.GetName(), rev, prev)
				}
				prev = rev
				got = append(got, write{e.Type, o.GetName(), rev})
				applyEvent(state, e)
			}
			var wantWrites []write
			for _, w := range writes {
				if w.rev > st.from && (st.from != 0 || w.rev >= got[0].rev) {
					wantWrites = append(wantWrites, w)
				}
			}
			if !slices.Equal(got, wantWrites) {
				t.Fatalf("watcher from %d saw %d events, want %d:\n got %v\nwant %v", st.from, len(got), len(wantWrites), got, wantWrites)
			}
			for name, rv := range state {
				if rv == "" {
					state[name] = wantState[name] // untouched since the start
				}
			}
			if !maps.Equal(state, wantState) {
				t.Fatalf("watcher state != List:\n got %v\nwant %v", state, wantState)
			}
		})
	}
}

// listAt returns the writers' pods alive right after revision rev.
func listAt(t *testing.T, _ *Store, writes []write, rev int64) []string {
	t.Helper()
	alive := map[string]bool{}
	for _, w := range writes {
		if w.rev > rev {
			break
		}
		alive[w.name] = w.typ != watch.Deleted
	}
	var out []string
	for n, ok := range alive {
		if ok {
			out = append(out, n)
		}
	}
	return out
}

func applyEvent(state map[string]string, e watch.Event) {
	o := e.Object.(resources.Object)
	if e.Type == watch.Deleted {
		delete(state, o.GetName())
		return
	}
	state[o.GetName()] = o.GetResourceVersion()
}

func TestListConsistency(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	for i := range 30 {
		p := mustCreate(t, s, resources.Pods, newPod("default", fmt.Sprintf("p%02d", i), "", nil))
		items, rv, err := s.List(ctx, resources.Pods, "default", Selector{})
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != i+1 || rv < rvOf(t, p) {
			t.Fatalf("List right after create %d: %d items, rv %d < %s", i, len(items), rv, p.GetResourceVersion())
		}
	}
	// A write elsewhere advances etcd without a pods event; List still returns
	// a resourceVersion at or after it (progress notification).
	n := &corev1.Node{}
	n.Name = "n1"
	nrv := rvOf(t, mustCreate(t, s, resources.Nodes, n))
	if _, rv, err := s.List(ctx, resources.Pods, "", Selector{}); err != nil || rv < nrv {
		t.Fatalf("List pods after a node write: rv %d < %d (%v)", rv, nrv, err)
	}
}

func TestListSelectorsAndOrder(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	for _, p := range []*corev1.Pod{
		newPod("b", "x", "n1", map[string]string{"app": "web"}),
		newPod("a", "z", "n2", map[string]string{"app": "web"}),
		newPod("a-b", "y", "n1", map[string]string{"app": "db"}),
		newPod("a", "y", "n1", nil),
	} {
		mustCreate(t, s, resources.Pods, p)
	}
	tests := []struct {
		ns   string
		sel  Selector
		want []string
	}{
		{"", Selector{}, []string{"a/y", "a/z", "a-b/y", "b/x"}},
		{"a", Selector{}, []string{"a/y", "a/z"}},
		{"", Selector{Label: mustLabel(t, "app=web")}, []string{"a/z", "b/x"}},
		{"", Selector{Label: mustLabel(t, "app")}, []string{"a/z", "a-b/y", "b/x"}},
		{"", Selector{Field: mustField(t, "spec.nodeName=n1")}, []string{"a/y", "a-b/y", "b/x"}},
		{"a", Selector{Field: mustField(t, "spec.nodeName=n1")}, []string{"a/y"}},
		{"", Selector{Field: mustField(t, "metadata.name=y")}, []string{"a/y", "a-b/y"}},
		{"", Selector{Field: mustField(t, "spec.nodeName!=n1"), Label: mustLabel(t, "app=web")}, []string{"a/z"}},
		{"", Selector{Field: mustField(t, "spec.nodeName=nope")}, []string{}},
	}
	for _, tc := range tests {
		items, _, err := s.List(ctx, resources.Pods, tc.ns, tc.sel)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(items); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q, %v, %v) = %v, want %v", tc.ns, tc.sel.Label, tc.sel.Field, got, tc.want)
		}
	}
}

// collector reads a watch from its own goroutine, as a real consumer does,
// so the watcher never overflows while the test is busy writing.
type collector struct {
	w    watch.Interface
	mu   sync.Mutex
	evs  []watch.Event
	done chan struct{}
}

func collect(w watch.Interface) *collector {
	c := &collector{w: w, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for e := range w.ResultChan() {
			c.mu.Lock()
			c.evs = append(c.evs, e)
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *collector) stop() {
	c.w.Stop()
	<-c.done
}

// until waits (with a deadline) for an event at revision rev or later and
// returns everything received so far.
func (c *collector) until(t *testing.T, rev int64) []watch.Event {
	t.Helper()
	var evs []watch.Event
	testkit.Eventually(t, 10*time.Second, func() error {
		c.mu.Lock()
		evs = slices.Clone(c.evs)
		c.mu.Unlock()
		if n := len(evs); n > 0 && rvOf(t, evs[n-1].Object.(resources.Object)) >= rev {
			return nil
		}
		select {
		case <-c.done:
			t.Fatalf("watch closed after %d events, before revision %d", len(evs), rev)
		default:
		}
		return fmt.Errorf("revision %d not seen (%d events)", rev, len(evs))
	})
	return evs
}

// TestRingKeepsNoReplacedObjects: once a version is replaced (updated or
// deleted), the ring keeps its selector data but not its decoded object; a
// watch resuming from before the changes still receives every version, read
// back from etcd, with its own content and resourceVersion.
func TestRingKeepsNoReplacedObjects(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	start, err := s.currentRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, resources.Pods, newPod("default", "p", "n1", map[string]string{"v": "1"}))
	var revs []int64
	for _, v := range []string{"2", "3"} {
		out, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", func(cur resources.Object) (resources.Object, error) {
			cur.SetLabels(map[string]string{"v": v})
			return cur, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, rvOf(t, out))
	}
	del, err := s.Delete(ctx, resources.Pods, "default", "p", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.List(ctx, resources.Pods, "", Selector{}); err != nil { // the cache has applied the delete
		t.Fatal(err)
	}

	c := s.caches[resources.Pods.Name]
	c.mu.RLock()
	for i := range c.ring.n {
		ev := c.ring.at(i)
		for _, e := range []*entry{ev.cur, ev.prev} {
			if e != nil && e.obj != nil {
				t.Errorf("ring event %d (%s at %d) holds the decoded object of replaced version %d", i, ev.typ, ev.rev, e.rev)
			}
		}
	}
	c.mu.RUnlock()

	w, err := s.Watch(ctx, resources.Pods, "", start, Selector{Field: fields.OneTermEqualSelector("spec.nodeName", "n1")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for i, wnt := range []struct {
		typ   watch.EventType
		label string
		rv    int64
	}{{watch.Added, "1", 0}, {watch.Modified, "2", revs[0]}, {watch.Modified, "3", revs[1]}, {watch.Deleted, "3", rvOf(t, del)}} {
		e := next(t, w)
		obj := e.Object.(resources.Object)
		if e.Type != wnt.typ || obj.GetLabels()["v"] != wnt.label || (wnt.rv != 0 && rvOf(t, obj) != wnt.rv) {
			t.Errorf("event %d = %s v=%s rv=%s, want %s v=%s rv=%d", i, e.Type, obj.GetLabels()["v"], obj.GetResourceVersion(), wnt.typ, wnt.label, wnt.rv)
		}
	}
}

// TestResumeGoneWhenReplacedVersionCompacted: a resuming watch that needs a
// replaced version etcd has compacted away (here compacted behind the
// store's back, as an external etcd's own compaction would) is Gone.
func TestResumeGoneWhenReplacedVersionCompacted(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	first := mustCreate(t, s, resources.Pods, newPod("default", "p", "", nil))
	var last int64
	for _, v := range []string{"2", "3"} {
		out, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", func(cur resources.Object) (resources.Object, error) {
			cur.SetLabels(map[string]string{"v": v})
			return cur, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		last = rvOf(t, out)
	}
	// The cache must have replaced the versions before etcd loses them: a
	// List waits until it has caught up with etcd. Otherwise, on a slow
	// machine, the watch below would start before the cache saw the updates
	// and need nothing read back.
	if _, _, err := s.List(ctx, resources.Pods, "", Selector{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Compact(ctx, last); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Watch(ctx, resources.Pods, "", rvOf(t, first), Selector{}); !IsGone(err) {
		t.Fatalf("Watch needing a compacted version: %v, want Gone", err)
	}
	// From the newest version nothing needs to be read back.
	w, err := s.Watch(ctx, resources.Pods, "", last, Selector{})
	if err != nil {
		t.Fatalf("Watch from the newest revision: %v", err)
	}
	w.Stop()
}

// TestRingGrowsThenEvicts: the ring's buffer grows with its content, keeps
// revision order across growth and wrap-around, and evicts the oldest
// event once size events are held.
func TestRingGrowsThenEvicts(t *testing.T) {
	const size = 100
	r := newRing(size)
	if len(r.buf) != 0 {
		t.Fatalf("new ring allocated %d slots", len(r.buf))
	}
	var rev int64
	push := func(n int) {
		for range n {
			rev++
			if dropped := r.push(&event{rev: rev}); (dropped != nil) != (rev > size) || (dropped != nil && dropped.rev != rev-size) {
				t.Fatalf("push %d evicted %v", rev, dropped)
			}
		}
	}
	check := func() {
		t.Helper()
		first := max(rev-size, 0) + 1
		if r.n != int(rev-first+1) || len(r.buf) > size {
			t.Fatalf("after %d pushes: n=%d buffer=%d", rev, r.n, len(r.buf))
		}
		for i := range r.n {
			if got := r.at(i).rev; got != first+int64(i) {
				t.Fatalf("after %d pushes: event %d has rev %d, want %d", rev, i, got, first+int64(i))
			}
		}
	}
	push(10)
	check()
	r.dropThrough(5) // the head moves: growth must keep the order
	if r.n != 5 || r.at(0).rev != 6 {
		t.Fatalf("dropThrough(5): n=%d first=%d", r.n, r.at(0).rev)
	}
	rev2 := rev
	for range 70 {
		rev2++
		r.push(&event{rev: rev2})
	}
	for i := range r.n {
		if got := r.at(i).rev; got != int64(6+i) {
			t.Fatalf("after growing past a moved head: event %d has rev %d", i, got)
		}
	}
	r.reset()
	rev = 0
	push(3 * size)
	check()
}

// TestVerifyCacheFindsModifiedObject: VerifyCache passes on a consistent
// cache and names an object a reader modified in place.
func TestVerifyCacheFindsModifiedObject(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	mustCreate(t, s, resources.Pods, newPod("default", "p", "n1", map[string]string{"app": "a"}))
	mustCreate(t, s, resources.Events, newEvent("default", "e.1", "p", "Started"))
	if err := s.VerifyCache(ctx); err != nil {
		t.Fatalf("VerifyCache on a consistent cache: %v", err)
	}
	items, _, err := s.List(ctx, resources.Pods, "", Selector{})
	if err != nil {
		t.Fatal(err)
	}
	items[0].(*corev1.Pod).Spec.NodeName = "elsewhere" // what no reader may do
	err = s.VerifyCache(ctx)
	if err == nil || !strings.Contains(err.Error(), "/registry/pods/default/p") {
		t.Fatalf("VerifyCache after an in-place change: %v, want the pod named", err)
	}
}
