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
// re-list.
//
// An object that stops matching sel arrives as DELETED (its previous state,
// with the revision of the change), one that starts matching as ADDED.
// DELETED events of real deletions carry the last state with the deletion's
// revision. Event objects are shared: READ-ONLY.
//
// Each watcher has a bounded buffer; a consumer that falls behind by more
// than that is dropped: its result channel is closed after the buffered
// events, and it should resume from the last resourceVersion it saw. The
// result channel is also closed when ctx ends, Stop is called, or the store
// closes. Stop is idempotent and safe to call concurrently.
func (s *Store) Watch(ctx context.Context, r *resources.Resource, namespace string, rv int64, sel Selector) (watch.Interface, error) {
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

// cacheWatcher is one Watch. The dispatcher (holding cache.mu) puts converted
// events into input without blocking; the watcher's goroutine moves them
// from input (after the initial events) to the unbuffered result channel.
type cacheWatcher struct {
	c       *cache
	m       matcher
	input   chan watch.Event // closed by cache.removeLocked
	result  chan watch.Event // closed by run
	initial []watch.Event    // owned by run once started
	removed bool             // guarded by c.mu

	stopc    chan struct{}
	stopOnce sync.Once
}

var _ watch.Interface = (*cacheWatcher)(nil)

// ResultChan returns the event channel.
func (w *cacheWatcher) ResultChan() <-chan watch.Event { return w.result }

// Stop ends the watch; the result channel is closed shortly after.
func (w *cacheWatcher) Stop() {
	w.stopOnce.Do(func() { close(w.stopc) })
	w.c.remove(w)
}

// addWatcher registers a watcher starting after rv (0: synthetic ADDED
// events for the current state) with room for buffer pending events, and
// starts its goroutine.
func (c *cache) addWatcher(ctx context.Context, m matcher, rv int64, buffer int) (*cacheWatcher, error) {
	w := &cacheWatcher{
		c:      c,
		m:      m,
		input:  make(chan watch.Event, buffer),
		result: make(chan watch.Event),
		stopc:  make(chan struct{}),
	}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil, newError(Internal, c.r, "", "", errClosed)
	}
	if rv != 0 && rv < c.window {
		window := c.window
		c.mu.Unlock()
		return nil, newError(Gone, c.r, "", "", fmt.Errorf("too old resource version: %d (%d)", rv, window))
	}
	var (
		initial []watch.Event
		objs    []resources.Object // rv 0: the current state, sorted after unlocking
	)
	if rv == 0 {
		src := c.objects
		if m.hasNode {
			src = c.byNode[m.node]
		}
		objs = make([]resources.Object, 0, len(src))
		for _, e := range src {
			if m.matches(e) {
				objs = append(objs, e.obj)
			}
		}
	} else {
		for i := c.ring.after(rv); i < c.ring.n; i++ {
			if e, ok := w.convert(c.ring.at(i)); ok {
				initial = append(initial, e)
			}
		}
	}
	c.registerLocked(w)
	c.wg.Add(1)
	c.mu.Unlock()

	if rv == 0 {
		sortObjects(objs)
		initial = make([]watch.Event, len(objs))
		for i, o := range objs {
			initial[i] = watch.Event{Type: watch.Added, Object: o}
		}
	}
	w.initial = initial
	go w.run(ctx)
	return w, nil
}

// run delivers the initial events, then live ones, until the input closes,
// the watcher is stopped, ctx ends or the cache stops.
func (w *cacheWatcher) run(ctx context.Context) {
	defer w.c.wg.Done()
	defer close(w.result)
	defer w.c.remove(w)
	for _, e := range w.initial {
		if !w.deliver(ctx, e) {
			return
		}
	}
	w.initial = nil
	for {
		select {
		case e, ok := <-w.input:
			if !ok || !w.deliver(ctx, e) {
				return
			}
		case <-w.stopc:
			return
		case <-ctx.Done():
			return
		case <-w.c.stopc:
			return
		}
	}
}

func (w *cacheWatcher) deliver(ctx context.Context, e watch.Event) bool {
	select {
	case w.result <- e:
		return true
	case <-w.stopc:
	case <-ctx.Done():
	case <-w.c.stopc:
	}
	return false
}

// convert turns a cache event into what this watcher sees, applying the
// Kubernetes selector transitions. ok is false if the watcher sees nothing.
func (w *cacheWatcher) convert(ev *event) (watch.Event, bool) {
	switch ev.typ {
	case watch.Added:
		if w.m.matches(ev.cur) {
			return watch.Event{Type: watch.Added, Object: ev.cur.obj}, true
		}
	case watch.Deleted:
		if w.m.matches(ev.prev) {
			return watch.Event{Type: watch.Deleted, Object: ev.cur.obj}, true
		}
	case watch.Modified:
		curOK, prevOK := w.m.matches(ev.cur), w.m.matches(ev.prev)
		switch {
		case curOK && prevOK:
			return watch.Event{Type: watch.Modified, Object: ev.cur.obj}, true
		case curOK:
			return watch.Event{Type: watch.Added, Object: ev.cur.obj}, true
		case prevOK:
			// As Kubernetes: the state the watcher knew, at the revision
			// where it stopped matching.
			last, ok := ev.prev.obj.DeepCopyObject().(resources.Object)
			if !ok {
				return watch.Event{}, false
			}
			last.SetResourceVersion(formatRV(ev.rev))
			return watch.Event{Type: watch.Deleted, Object: last}, true
		}
	}
	return watch.Event{}, false
}

// dispatchLocked offers ev to the watchers that can match it: all watchers
// without a node index, and those indexed under the node names the object
// had before and after the change. A watcher whose buffer is full is closed.
func (c *cache) dispatchLocked(ev *event) {
	for w := range c.watchers {
		c.sendLocked(w, ev)
	}
	if c.nodeWatchers == nil {
		return
	}
	for w := range c.nodeWatchers[ev.cur.node] {
		c.sendLocked(w, ev)
	}
	if ev.prev != nil && ev.prev.node != ev.cur.node {
		for w := range c.nodeWatchers[ev.prev.node] {
			c.sendLocked(w, ev)
		}
	}
}

func (c *cache) sendLocked(w *cacheWatcher, ev *event) {
	e, ok := w.convert(ev)
	if !ok {
		return
	}
	select {
	case w.input <- e:
	default:
		c.lg.Warn("watcher fell behind, closing it", "bufferedEvents", cap(w.input), "revision", ev.rev)
		c.removeLocked(w)
	}
}

func (c *cache) registerLocked(w *cacheWatcher) {
	if !w.m.hasNode || c.nodeWatchers == nil {
		c.watchers[w] = struct{}{}
		return
	}
	ws := c.nodeWatchers[w.m.node]
	if ws == nil {
		ws = make(map[*cacheWatcher]struct{})
		c.nodeWatchers[w.m.node] = ws
	}
	ws[w] = struct{}{}
}

// remove unregisters w; see removeLocked.
func (c *cache) remove(w *cacheWatcher) {
	c.mu.Lock()
	c.removeLocked(w)
	c.mu.Unlock()
}

// removeLocked unregisters w and closes its input, so its goroutine ends
// after delivering what is buffered. Idempotent.
func (c *cache) removeLocked(w *cacheWatcher) {
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
	close(w.input)
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
