package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/resources"
)

// futureWait bounds how long Watch waits for the cache to reach a
// resourceVersion newer than it has seen (the Kubernetes API server waits 3 s
// before answering "too large resource version").
const futureWait = 3 * time.Second

// Watch streams the changes of r's objects in namespace ("" = all; ignored
// for cluster-scoped resources) that match sel, from the watch cache.
//
// With rv 0 it first sends a synthetic ADDED event for every matching object
// in the cache after the cache has caught up with etcd, then live events.
// With rv N it sends every event with a revision greater than N in revision
// order, then live events; if N is older than the cache's history (evicted
// from its ring, compacted, or from before the cache started), or newer than
// etcd's current revision, Watch returns a Gone error and the caller must
// re-list. Replayed versions that are no longer current are read back from
// etcd; one compacted there meanwhile is Gone too.
//
// An object that stops matching sel arrives as DELETED (its previous state,
// with the revision of the change), one that starts matching as ADDED.
// DELETED events of real deletions carry the last state with the deletion's
// revision. Event objects are shared: READ-ONLY.
//
// Each watcher queues its events with no goroutine of its own, and holds
// memory only for events waiting to be received. A consumer that lets more
// than a bound (the initial events plus a buffer) wait in the queue is
// dropped: it receives what is queued, then the end, and should resume
// from the last resourceVersion it saw. The watch also ends when ctx ends,
// Stop is called, or the store closes. Stop is idempotent and safe to call
// concurrently.
//
// Ready and Take receive the events without a goroutine; ResultChan starts
// one (see there).
func (s *Store) Watch(ctx context.Context, r *resources.Resource, namespace string, rv int64, sel Selector) (*Watcher, error) {
	c, err := s.cacheFor(r)
	if err != nil {
		return nil, err
	}
	if err := checkSelector(r, sel); err != nil {
		return nil, err
	}
	if rv < 0 {
		return nil, newError(Invalid, r, "", "", fmt.Errorf("resourceVersion %d is negative", rv))
	}
	if !r.Namespaced {
		namespace = ""
	}
	if rv == 0 {
		if err := s.waitFresh(ctx, c); err != nil {
			return nil, err
		}
	} else if err := s.waitFuture(ctx, c, rv); err != nil {
		return nil, err
	}
	return c.addWatcher(ctx, newMatcher(r, namespace, sel), rv, c.watchBuffer)
}

// waitFuture makes sure the cache has reached rv: a client may hold the
// revision of a write the cache has not applied yet.
func (s *Store) waitFuture(ctx context.Context, c *cache, rv int64) error {
	c.mu.RLock()
	have := c.rev
	c.mu.RUnlock()
	if rv <= have {
		return nil
	}
	cur, err := s.currentRevision(ctx)
	if err != nil {
		return newError(Internal, c.r, "", "", err)
	}
	if rv > cur {
		return newError(Gone, c.r, "", "", fmt.Errorf("too large resource version: %d, current: %d", rv, cur))
	}
	wctx, cancel := context.WithTimeout(ctx, futureWait)
	defer cancel()
	if err := c.waitRev(wctx, rv); err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return newError(Gone, c.r, "", "", fmt.Errorf("too large resource version: %d: %w", rv, err))
		}
		return newError(Internal, c.r, "", "", fmt.Errorf("store: %w", err))
	}
	return nil
}

// Watcher is one Watch: a watch.Interface. It starts with the initial
// events queued, and the dispatcher (holding cache.mu) queues each live
// event without blocking; it has no goroutine unless ResultChan is called.
// An empty queue keeps at most a small array for reuse (see Take), so
// thousands of idle watchers cost little, and a burst costs only while it
// waits. Removing the watcher (Stop, ctx's end, a queue over its bound,
// the cache stopping) ends it after what is queued.
type Watcher struct {
	c       *cache
	m       matcher
	limit   int  // most events queued at once; more and it is removed
	removed bool // guarded by c.mu
	// stopAfter unregisters the ctx callback that removes the watcher.
	stopAfter func() bool
	done      <-chan struct{} // ctx's

	mu    sync.Mutex
	queue []watch.Event // waiting, oldest first; guarded by mu
	ended bool          // nothing more will be queued; guarded by mu
	ready chan struct{} // one token: events are waiting or it ended

	stopped  chan struct{} // closed by Stop
	stopOnce sync.Once
	chOnce   sync.Once
	ch       chan watch.Event // see ResultChan
}

var _ watch.Interface = (*Watcher)(nil)

// Ready receives a value when events are waiting or the watch has ended;
// then Take returns them.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Take returns the waiting events, oldest first, and whether the watch
// still runs: false means these are its last events. It does not block,
// and may return none. A caller passes back the slice it got once it is
// done with the events: cleared, it becomes the queue for the next ones,
// unless it is larger than maxKeptEvents (a burst's), which is left to the
// collector.
func (w *Watcher) Take(buf []watch.Event) ([]watch.Event, bool) {
	clear(buf)
	if cap(buf) > maxKeptEvents {
		buf = nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	evs := w.queue
	w.queue = buf[:0]
	return evs, !w.ended
}

// maxKeptEvents is the largest array Take keeps as an idle watcher's queue.
const maxKeptEvents = 16

// ResultChan returns a channel of the events; it closes when the watch
// ends, after every event queued. Its first call starts a goroutine that
// moves the events to it; that goroutine also ends, without handing over
// what is still queued, when Stop is called or the watch's context ends.
// A caller that stops reading must call Stop or end the context, as with
// any watch.Interface: otherwise the goroutine waits for it.
func (w *Watcher) ResultChan() <-chan watch.Event {
	w.chOnce.Do(func() {
		w.ch = make(chan watch.Event)
		go w.pump()
	})
	return w.ch
}

// pump moves the events to ch; see ResultChan.
func (w *Watcher) pump() {
	defer close(w.ch)
	var buf []watch.Event
	for {
		select {
		case <-w.ready:
		case <-w.stopped:
			return
		case <-w.done:
			return
		}
		evs, open := w.Take(buf)
		for _, ev := range evs {
			select {
			case w.ch <- ev:
			case <-w.stopped:
				return
			case <-w.done:
				return
			}
		}
		if !open {
			return
		}
		buf = evs
	}
}

// Stop ends the watch.
func (w *Watcher) Stop() {
	w.stopOnce.Do(func() { close(w.stopped) })
	w.c.remove(w)
}

// push queues ev unless the watcher ended; false if its queue is at its
// bound (the caller removes it).
func (w *Watcher) push(ev watch.Event) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return true
	}
	if len(w.queue) >= w.limit {
		return false
	}
	w.queue = append(w.queue, ev)
	w.signal()
	return true
}

// end marks the watcher ended: Take reports it once the queue is taken.
func (w *Watcher) end() {
	w.mu.Lock()
	w.ended = true
	w.signal()
	w.mu.Unlock()
}

// signal leaves a token in ready unless one is there. Called with w.mu,
// or before the watcher is registered.
func (w *Watcher) signal() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// addWatcher registers a watcher starting after rv (0: synthetic ADDED
// events for the current state) with room for buffer pending events beyond
// the initial ones. The initial events are sorted, and objects the cache
// does not hold decoded read from etcd, without the lock; the events that
// happen meanwhile are added before the watcher is registered, so it
// misses none.
func (c *cache) addWatcher(ctx context.Context, m matcher, rv int64, buffer int) (*Watcher, error) {
	w := &Watcher{c: c, m: m, done: ctx.Done(), ready: make(chan struct{}, 1), stopped: make(chan struct{})}
	c.mu.Lock()
	if err := c.checkStartLocked(rv); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	var (
		objs   []resources.Object // rv 0: the current state
		keys   []string           // rv 0 without kept objects: the keys to read at rev
		replay []replayed         // rv N: the events after N
	)
	rev := c.rev // the initial events cover everything up to rev
	if rv == 0 {
		src := c.objects
		if m.hasNode {
			src = c.byNode[m.node]
		}
		for _, e := range src {
			switch {
			case !m.matches(e):
			case c.keepObjects:
				objs = append(objs, e.obj)
			default:
				keys = append(keys, e.key)
			}
		}
	} else {
		replay = w.replayAfter(rv)
	}
	var initial []watch.Event
	for first := true; first || needsRead(replay); first = false {
		c.mu.Unlock()
		if len(keys) > 0 {
			var err error
			if objs, err = c.fetchAt(ctx, c.prefixIn(m.namespace), keys, rev); err != nil {
				return nil, err
			}
			keys = nil
		}
		if objs != nil {
			sortObjects(objs)
			initial, objs = addedEvents(objs), nil
		}
		more, err := c.complete(ctx, replay)
		if err != nil {
			return nil, err
		}
		initial = append(initial, more...)
		c.mu.Lock()
		if err := c.checkStartLocked(rev); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		replay, rev = w.replayAfter(rev), c.rev
	}
	more, _ := c.complete(ctx, replay) // reads nothing: cannot fail
	initial = append(initial, more...)
	w.limit = len(initial) + buffer
	if len(initial) > 0 {
		w.queue = initial
		w.signal()
	}
	c.registerLocked(w)
	w.stopAfter = context.AfterFunc(ctx, func() { c.remove(w) })
	c.mu.Unlock()
	return w, nil
}

// checkStartLocked fails unless a watch can start after rev (0: now): the
// cache runs and still holds every event after rev.
func (c *cache) checkStartLocked(rev int64) error {
	if c.stopped {
		return newError(Internal, c.r, "", "", errClosed)
	}
	if rev != 0 && rev < c.window {
		return newError(Gone, c.r, "", "", fmt.Errorf("too old resource version: %d (%d)", rev, c.window))
	}
	return nil
}

// addedEvents returns a synthetic ADDED event for each object.
func addedEvents(objs []resources.Object) []watch.Event {
	out := make([]watch.Event, len(objs))
	for i, o := range objs {
		out[i] = watch.Event{Type: watch.Added, Object: o}
	}
	return out
}

// replayAfter returns what this watcher sees of the ring's events after
// rev. Called with c.mu held.
func (w *Watcher) replayAfter(rev int64) []replayed {
	var out []replayed
	for i := w.c.ring.after(rev); i < w.c.ring.n; i++ {
		if r, ok := w.replay(w.c.ring.at(i)); ok {
			out = append(out, r)
		}
	}
	return out
}

// replayed is one past event as a resuming watcher sees it, taken from the
// ring under the lock: obj is nil when the version it needs is no longer
// held decoded, and last marks a DELETED event, which carries the state key
// had just before rev, with rev as its resourceVersion.
type replayed struct {
	typ  watch.EventType
	key  string
	rev  int64
	obj  resources.Object
	last bool
}

// needsRead reports whether completing replay reads etcd.
func needsRead(replay []replayed) bool {
	for _, r := range replay {
		if r.obj == nil {
			return true
		}
	}
	return false
}

// complete turns replayed events into watch events, reading from etcd the
// versions the cache no longer holds.
func (c *cache) complete(ctx context.Context, replay []replayed) ([]watch.Event, error) {
	out := make([]watch.Event, len(replay))
	for i, r := range replay {
		obj, own := r.obj, false
		if obj == nil {
			asOf := r.rev
			if r.last {
				asOf--
			}
			var err error
			if obj, err = c.fetch(ctx, r.key, asOf); err != nil {
				return nil, err
			}
			own = true
		}
		if r.last {
			if !own {
				obj = obj.DeepCopyObject().(resources.Object)
			}
			obj.SetResourceVersion(formatRV(r.rev))
		}
		out[i] = watch.Event{Type: r.typ, Object: obj}
	}
	return out, nil
}

// sees reports how this watcher sees a cache event, applying the
// Kubernetes selector transitions: as typ, with the new version's object
// (last false) or with the replaced version's state at the event's
// revision (last true, for real deletions and for objects that stopped
// matching). ok is false if the watcher sees nothing.
func (w *Watcher) sees(ev *event) (typ watch.EventType, last, ok bool) {
	switch ev.typ {
	case watch.Added:
		if w.m.matches(ev.cur) {
			return watch.Added, false, true
		}
	case watch.Deleted:
		if w.m.matches(ev.prev) {
			return watch.Deleted, true, true
		}
	case watch.Modified:
		curOK, prevOK := w.m.matches(ev.cur), w.m.matches(ev.prev)
		switch {
		case curOK && prevOK:
			return watch.Modified, false, true
		case curOK:
			return watch.Added, false, true
		case prevOK:
			// As Kubernetes: the state the watcher knew, at the revision
			// where it stopped matching.
			return watch.Deleted, true, true
		}
	}
	return "", false, false
}

// replay is what this watcher sees of a past event; see replayed.
func (w *Watcher) replay(ev *event) (replayed, bool) {
	typ, last, ok := w.sees(ev)
	if !ok {
		return replayed{}, false
	}
	src := ev.cur
	if last {
		src = ev.prev
	}
	return replayed{typ: typ, key: src.key, rev: ev.rev, obj: src.obj, last: last}, true
}

// dispatchLocked offers ev to the watchers that can match it: all watchers
// without a node index, and those indexed under the node names the object
// had before and after the change. A watcher whose buffer is full is closed.
// Both versions' objects are still held (see apply).
func (c *cache) dispatchLocked(ev *event) {
	d := dispatch{ev: ev}
	for w := range c.watchers {
		c.sendLocked(w, &d)
	}
	if c.nodeWatchers == nil {
		return
	}
	var curNode string
	if ev.cur != nil {
		curNode = ev.cur.node
		for w := range c.nodeWatchers[curNode] {
			c.sendLocked(w, &d)
		}
	}
	if ev.prev != nil && (ev.cur == nil || ev.prev.node != curNode) {
		for w := range c.nodeWatchers[ev.prev.node] {
			c.sendLocked(w, &d)
		}
	}
}

// dispatch is one live event being offered to the watchers.
type dispatch struct {
	ev   *event
	last resources.Object // the replaced version's state at ev.rev, made once when needed
}

// lastState returns prev's object carrying the event's revision; false if
// it is not held (see readReplaced).
func (d *dispatch) lastState() (resources.Object, bool) {
	if d.last == nil {
		if d.ev.prev.obj == nil {
			return nil, false
		}
		last, ok := d.ev.prev.obj.DeepCopyObject().(resources.Object)
		if !ok {
			return nil, false
		}
		last.SetResourceVersion(formatRV(d.ev.rev))
		d.last = last
	}
	return d.last, true
}

func (c *cache) sendLocked(w *Watcher, d *dispatch) {
	typ, last, ok := w.sees(d.ev)
	if !ok {
		return
	}
	var obj resources.Object
	if last {
		if obj, ok = d.lastState(); !ok {
			c.lg.Warn("closing a watcher: the state it needs was not read", "revision", d.ev.rev)
			c.removeLocked(w)
			return
		}
	} else {
		obj = d.ev.cur.obj
	}
	if !w.push(watch.Event{Type: typ, Object: obj}) {
		c.lg.Warn("watcher fell behind, closing it", "queuedEvents", w.limit, "revision", d.ev.rev)
		c.removeLocked(w)
	}
}

func (c *cache) registerLocked(w *Watcher) {
	if !w.m.hasNode || c.nodeWatchers == nil {
		c.watchers[w] = struct{}{}
		return
	}
	ws := c.nodeWatchers[w.m.node]
	if ws == nil {
		ws = make(map[*Watcher]struct{})
		c.nodeWatchers[w.m.node] = ws
	}
	ws[w] = struct{}{}
}

// remove unregisters w; see removeLocked.
func (c *cache) remove(w *Watcher) {
	c.mu.Lock()
	c.removeLocked(w)
	c.mu.Unlock()
}

// removeLocked unregisters w and ends it; what is queued can still be
// received. Idempotent.
func (c *cache) removeLocked(w *Watcher) {
	if w.removed {
		return
	}
	w.removed = true
	if w.m.hasNode && c.nodeWatchers != nil {
		if ws := c.nodeWatchers[w.m.node]; ws != nil {
			delete(ws, w)
			if len(ws) == 0 {
				delete(c.nodeWatchers, w.m.node)
			}
		}
	} else {
		delete(c.watchers, w)
	}
	w.end()
	if w.stopAfter != nil {
		w.stopAfter()
	}
}

// terminateAllLocked closes every watcher.
func (c *cache) terminateAllLocked() {
	for w := range c.watchers {
		c.removeLocked(w)
	}
	for _, ws := range c.nodeWatchers {
		for w := range ws {
			c.removeLocked(w)
		}
	}
}
