package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/resources"
)

const (
	// progressRetry is how often a reader waiting for the cache to reach a
	// revision asks etcd again for a progress notification (etcd skips the
	// request while the cache's watch is still catching up).
	progressRetry = 50 * time.Millisecond
	// retryMin and retryMax bound the back-off between failed etcd watches.
	retryMin, retryMax = 100 * time.Millisecond, 5 * time.Second
)

// errWatchCompacted means the cache's etcd watch cannot resume because the
// history it needs was compacted; the cache must re-list.
var errWatchCompacted = errors.New("watch history compacted")

// entry is one cached object with what selectors need, computed once.
type entry struct {
	obj    resources.Object
	labels labels.Set
	fields fields.Set
	node   string // spec.nodeName, pods only
}

// event is one change in the cache's history.
type event struct {
	typ watch.EventType // Added, Modified or Deleted
	rev int64
	// cur is the new state; for Deleted it is the last state, carrying the
	// deletion's revision as its resourceVersion.
	cur *entry
	// prev is the state before the change; nil for Added.
	prev *entry
}

// cache is the watch cache of one resource: the current objects, decoded
// once, and a ring of recent events, fed by a single etcd watch on the
// resource's key prefix. Readers share the cached objects; nobody mutates them.
//
// Lock order: cache.mu is the only lock; watcher channels are sent to with
// select-default while holding it, so the dispatcher never blocks.
type cache struct {
	r           *resources.Resource
	prefix      string
	client      *clientv3.Client
	lg          *slog.Logger
	watchBuffer int

	mu      sync.RWMutex
	objects map[string]*entry
	byNode  map[string]map[string]*entry // pods only: spec.nodeName → key → entry
	rev     int64                        // every event up to rev is applied
	window  int64                        // oldest resourceVersion a watch may start from
	ring    ring
	revc    chan struct{} // closed and replaced whenever rev advances
	stopped bool
	// watchers without an exact spec.nodeName requirement, and those with
	// one, indexed by that node name.
	watchers     map[*cacheWatcher]struct{}
	nodeWatchers map[string]map[*cacheWatcher]struct{}

	progressc chan struct{} // buffered(1): ask the watch loop for a progress notification
	stopc     chan struct{} // closed by stop
	donec     chan struct{} // closed when run has returned
	wg        sync.WaitGroup
}

func newCache(r *resources.Resource, client *clientv3.Client, lg *slog.Logger, ringSize, watchBuffer int) *cache {
	c := &cache{
		r:           r,
		prefix:      prefixOf(r),
		client:      client,
		lg:          lg.With("resource", r.Name),
		watchBuffer: watchBuffer,
		objects:     make(map[string]*entry),
		ring:        newRing(ringSize),
		revc:        make(chan struct{}),
		watchers:    make(map[*cacheWatcher]struct{}),
		progressc:   make(chan struct{}, 1),
		stopc:       make(chan struct{}),
		donec:       make(chan struct{}),
	}
	if r == resources.Pods {
		c.byNode = make(map[string]map[string]*entry)
		c.nodeWatchers = make(map[string]map[*cacheWatcher]struct{})
	}
	return c
}

func (c *cache) newEntry(obj resources.Object) *entry {
	e := &entry{obj: obj, labels: labels.Set(obj.GetLabels()), fields: FieldSet(c.r, obj)}
	if c.byNode != nil {
		e.node = e.fields[fieldNodeName]
	}
	return e
}

// start loads the current state (bounded by ctx) and then follows etcd until
// bg ends or stop is called.
func (c *cache) start(ctx, bg context.Context) error {
	if err := c.relist(ctx); err != nil {
		close(c.donec)
		return err
	}
	go c.run(bg)
	return nil
}

// stop closes every watcher and waits for the watch loop and all watcher
// goroutines. bg (see start) must already be cancelled, or be cancelled
// concurrently, for the watch loop to end.
func (c *cache) stop() {
	c.mu.Lock()
	c.stopped = true
	c.terminateAllLocked()
	c.mu.Unlock()
	close(c.stopc)
	<-c.donec
	c.wg.Wait()
}

// run keeps an etcd watch open from the cache's revision, re-listing when the
// history it needs was compacted.
func (c *cache) run(ctx context.Context) {
	defer close(c.donec)
	// A stream of its own: progress requests then concern only this watch.
	ctx = metadata.AppendToOutgoingContext(ctx, "everynode-watch-cache", c.r.Name)
	backoff := retryMin
	for {
		progressed, err := c.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if progressed {
			backoff = retryMin
		}
		if errors.Is(err, errWatchCompacted) {
			c.lg.Warn("watch cache lost history, re-listing; open watches are closed", "err", err)
			if err = c.relist(ctx); err == nil {
				continue
			}
		}
		c.lg.Warn("watch cache's etcd watch failed, retrying", "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, retryMax)
	}
}

// watch follows etcd from rev+1 until the watch fails or ctx ends. It reports
// whether any response arrived.
func (c *cache) watch(ctx context.Context) (bool, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.RLock()
	from := c.rev + 1
	c.mu.RUnlock()
	wch := c.client.Watch(wctx, c.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	progressed := false
	for {
		select {
		case <-ctx.Done():
			return progressed, ctx.Err()
		case <-c.progressc:
			if err := c.client.RequestProgress(wctx); err != nil && wctx.Err() == nil {
				c.lg.Debug("progress request failed", "err", err)
			}
		case resp, ok := <-wch:
			if !ok {
				return progressed, errors.New("etcd watch channel closed")
			}
			if resp.CompactRevision != 0 {
				return progressed, fmt.Errorf("%w: etcd compacted to %d, cache at %d", errWatchCompacted, resp.CompactRevision, from-1)
			}
			if err := resp.Err(); err != nil {
				return progressed, fmt.Errorf("store: watch %s: %w", c.prefix, err)
			}
			progressed = true
			if resp.IsProgressNotify() {
				c.mu.Lock()
				c.advanceLocked(resp.Header.Revision)
				c.mu.Unlock()
				continue
			}
			c.apply(resp.Events)
		}
	}
}

// relist replaces the cached state with a fresh read of etcd. The history
// restarts at the read's revision, so older resourceVersions become Gone, and
// every open watcher is closed: it cannot be told what it missed.
func (c *cache) relist(ctx context.Context) error {
	resp, err := c.client.Get(ctx, c.prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("store: list %s: %w", c.prefix, err)
	}
	objects := make(map[string]*entry, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		obj, err := decode(c.r, kv.Value, kv.ModRevision)
		if err != nil {
			c.lg.Error("skipping undecodable object", "key", string(kv.Key), "err", err)
			continue
		}
		objects[string(kv.Key)] = c.newEntry(obj)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.terminateAllLocked()
	c.objects = objects
	if c.byNode != nil {
		c.byNode = make(map[string]map[string]*entry)
		for k, e := range objects {
			c.indexLocked(k, e)
		}
	}
	c.ring.reset()
	c.window = resp.Header.Revision
	c.advanceLocked(resp.Header.Revision)
	return nil
}

// apply adds a batch of etcd events to the cache and dispatches them.
// Decoding happens before taking the lock.
func (c *cache) apply(evs []*clientv3.Event) {
	type change struct {
		key string
		rev int64
		e   *entry // nil: deleted
	}
	changes := make([]change, 0, len(evs))
	for _, ev := range evs {
		ch := change{key: string(ev.Kv.Key), rev: ev.Kv.ModRevision}
		if ev.Type == clientv3.EventTypePut {
			obj, err := decode(c.r, ev.Kv.Value, ev.Kv.ModRevision)
			if err != nil {
				c.lg.Error("undecodable object in etcd, treating it as deleted", "key", ch.key, "err", err)
			} else {
				ch.e = c.newEntry(obj)
			}
		}
		changes = append(changes, ch)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range changes {
		prev := c.objects[ch.key]
		var ev *event
		switch {
		case ch.e == nil && prev == nil:
			continue
		case ch.e == nil:
			last, ok := prev.obj.DeepCopyObject().(resources.Object)
			if !ok {
				continue
			}
			last.SetResourceVersion(formatRV(ch.rev))
			gone := &entry{obj: last, labels: prev.labels, fields: prev.fields, node: prev.node}
			ev = &event{typ: watch.Deleted, rev: ch.rev, cur: gone, prev: prev}
			delete(c.objects, ch.key)
			c.unindexLocked(ch.key, prev)
		default:
			ev = &event{typ: watch.Added, rev: ch.rev, cur: ch.e, prev: prev}
			if prev != nil {
				ev.typ = watch.Modified
				c.unindexLocked(ch.key, prev)
			}
			c.objects[ch.key] = ch.e
			c.indexLocked(ch.key, ch.e)
		}
		if dropped := c.ring.push(ev); dropped != nil && dropped.rev > c.window {
			c.window = dropped.rev
		}
		c.dispatchLocked(ev)
	}
	if n := len(changes); n > 0 {
		c.advanceLocked(changes[n-1].rev)
	}
}

func (c *cache) indexLocked(key string, e *entry) {
	if c.byNode == nil {
		return
	}
	m := c.byNode[e.node]
	if m == nil {
		m = make(map[string]*entry)
		c.byNode[e.node] = m
	}
	m[key] = e
}

func (c *cache) unindexLocked(key string, e *entry) {
	if c.byNode == nil {
		return
	}
	if m := c.byNode[e.node]; m != nil {
		delete(m, key)
		if len(m) == 0 {
			delete(c.byNode, e.node)
		}
	}
}

// advanceLocked moves rev forward and wakes readers waiting for it.
func (c *cache) advanceLocked(rev int64) {
	if rev <= c.rev {
		return
	}
	c.rev = rev
	close(c.revc)
	c.revc = make(chan struct{})
}

// compacted records that etcd history before rev is gone: a watch must now
// start at rev-1 or later (it receives events from rev on).
func (c *cache) compacted(rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev-1 > c.window {
		c.window = rev - 1
	}
	c.ring.dropThrough(c.window)
}

// requestProgress asks the watch loop, without blocking, to request a
// progress notification from etcd. Requests coalesce.
func (c *cache) requestProgress() {
	select {
	case c.progressc <- struct{}{}:
	default:
	}
}

// waitRev blocks until the cache has applied every event up to target, the
// store stops, or ctx ends.
func (c *cache) waitRev(ctx context.Context, target int64) error {
	var tick *time.Ticker
	for {
		c.mu.RLock()
		rev, revc, stopped := c.rev, c.revc, c.stopped
		c.mu.RUnlock()
		if stopped {
			return errClosed
		}
		if rev >= target {
			return nil
		}
		c.requestProgress()
		if tick == nil {
			tick = time.NewTicker(progressRetry)
			defer tick.Stop()
		}
		select {
		case <-revc:
		case <-tick.C:
		case <-c.stopc:
			return errClosed
		case <-ctx.Done():
			return fmt.Errorf("waiting for the %s watch cache to reach revision %d (at %d): %w", c.r.Name, target, rev, ctx.Err())
		}
	}
}

// ring is a bounded FIFO of events in revision order.
type ring struct {
	buf  []*event
	head int // index of the oldest event
	n    int
}

func newRing(size int) ring { return ring{buf: make([]*event, size)} }

// at returns the i-th oldest event.
func (r *ring) at(i int) *event { return r.buf[(r.head+i)%len(r.buf)] }

// push appends ev and returns the event it evicted, if any.
func (r *ring) push(ev *event) *event {
	var dropped *event
	if r.n == len(r.buf) {
		dropped = r.buf[r.head]
		r.buf[r.head] = nil
		r.head = (r.head + 1) % len(r.buf)
		r.n--
	}
	r.buf[(r.head+r.n)%len(r.buf)] = ev
	r.n++
	return dropped
}

// dropThrough removes events with rev <= rev.
func (r *ring) dropThrough(rev int64) {
	for r.n > 0 && r.buf[r.head].rev <= rev {
		r.buf[r.head] = nil
		r.head = (r.head + 1) % len(r.buf)
		r.n--
	}
}

// after returns the index of the first event with revision > rev (n if none).
func (r *ring) after(rev int64) int {
	lo, hi := 0, r.n
	for lo < hi {
		mid := (lo + hi) / 2
		if r.at(mid).rev <= rev {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

func (r *ring) reset() {
	clear(r.buf)
	r.head, r.n = 0, 0
}
