package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/internal/ctxtime"
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

// entry is one version of an object with what selectors need, computed
// once. Entries are read and changed only under cache.mu.
//
// obj is the decoded object while this version is current (for resources
// whose cache keeps objects, see keepsObjects; otherwise only while the
// change that made it is dispatched). Once a newer
// version or a deletion replaced it and that change was dispatched, obj is
// dropped: the ring keeps the selector data of old versions, not decoded
// copies, and a watch resuming from before the change re-reads such a
// version from etcd (cache.fetch).
type entry struct {
	key    string // etcd key
	rev    int64  // the version's mod revision
	obj    resources.Object
	labels labels.Set
	fields objectFields
	node   string // spec.nodeName, pods only
}

// namespace is the object's metadata.namespace (the second field).
func (e *entry) namespace() string { return e.fields.values[1] }

// shareWith makes e use prev's key, labels and field values where they are
// equal, so that old versions in the ring share them instead of each
// keeping its own copies.
func (e *entry) shareWith(prev *entry) {
	e.key = prev.key
	if maps.Equal(e.labels, prev.labels) {
		e.labels = prev.labels
	}
	if slices.Equal(e.fields.values, prev.fields.values) {
		e.fields.values = prev.fields.values
		e.node = prev.node
	}
}

// sameSelection reports whether e and prev have the same namespace, labels
// and fields: no selector can tell them apart.
func (e *entry) sameSelection(prev *entry) bool {
	return maps.Equal(e.labels, prev.labels) && slices.Equal(e.fields.values, prev.fields.values)
}

// event is one change in the cache's history.
type event struct {
	typ watch.EventType // Added, Modified or Deleted
	rev int64
	// cur is the new version; nil for Deleted.
	cur *entry
	// prev is the version before the change; nil for Added. Deleted events
	// carry prev's state with the deletion's revision as resourceVersion.
	prev *entry
}

// cache is the watch cache of one resource: the current objects, decoded
// once, and a ring of recent events, fed by a single etcd watch on the
// resource's key prefix. Readers share the cached objects; nobody mutates
// them. The ring holds decoded objects only of current versions (see entry).
//
// Lock order: cache.mu, then a Watcher's mu, never the reverse; the
// dispatcher queues events holding both and never blocks.
type cache struct {
	r           *resources.Resource
	fieldNames  []string // fieldNames(r), shared by every entry
	keepObjects bool     // keepsObjects(r)
	prefix      string
	client      *clientv3.Client
	atRest      *atRest // decrypts Secrets
	lg          *slog.Logger
	watchBuffer int

	// written is the highest revision of a write to r this process's
	// Store has completed (see ListCached).
	written atomic.Int64

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
	watchers     map[*Watcher]struct{}
	nodeWatchers map[string]map[*Watcher]struct{}

	progressc chan struct{} // buffered(1): ask the watch loop for a progress notification
	stopc     chan struct{} // closed by stop
	donec     chan struct{} // closed when run has returned
}

func newCache(r *resources.Resource, client *clientv3.Client, at *atRest, lg *slog.Logger, ringSize, watchBuffer int) *cache {
	c := &cache{
		atRest:      at,
		r:           r,
		fieldNames:  fieldNames(r),
		keepObjects: keepsObjects(r),
		prefix:      prefixOf(r),
		client:      client,
		lg:          lg.With("resource", r.Name),
		watchBuffer: watchBuffer,
		objects:     make(map[string]*entry),
		ring:        newRing(ringSize),
		revc:        make(chan struct{}),
		watchers:    make(map[*Watcher]struct{}),
		progressc:   make(chan struct{}, 1),
		stopc:       make(chan struct{}),
		donec:       make(chan struct{}),
	}
	if r == resources.Pods {
		c.byNode = make(map[string]map[string]*entry)
		c.nodeWatchers = make(map[string]map[*Watcher]struct{})
	}
	return c
}

func (c *cache) newEntry(key string, rev int64, obj resources.Object) *entry {
	e := &entry{key: key, rev: rev, obj: obj, labels: labels.Set(obj.GetLabels()),
		fields: objectFields{names: c.fieldNames, values: fieldValues(c.r, obj)}}
	if c.byNode != nil {
		e.node = e.fields.Get(resources.FieldNodeName)
	}
	return e
}

// start loads the current state (bounded by ctx) and then follows etcd until
// bg ends or stop is called.
func (c *cache) start(ctx, bg context.Context) error {
	if err := retryUnavailable(ctx, func() error { return c.relist(ctx) }); err != nil {
		close(c.donec)
		return err
	}
	go c.run(bg)
	return nil
}

// stop closes every watcher and waits for the watch loop (watchers have no
// goroutines). bg (see start) must already be cancelled, or be cancelled
// concurrently, for the watch loop to end.
func (c *cache) stop() {
	c.mu.Lock()
	c.stopped = true
	c.terminateAllLocked()
	c.mu.Unlock()
	close(c.stopc)
	<-c.donec
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
		if !ctxtime.Sleep(ctx, backoff) {
			return
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
			c.apply(ctx, resp.Events)
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
		obj, err := c.atRest.decode(c.r, kv.Key, kv.Value, kv.ModRevision)
		if err != nil {
			c.lg.Error("skipping undecodable object", "key", string(kv.Key), "err", err)
			continue
		}
		key := string(kv.Key)
		e := c.newEntry(key, kv.ModRevision, obj)
		if !c.keepObjects {
			e.obj = nil
		}
		objects[key] = e
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

// change is one etcd event of a batch, decoded.
type change struct {
	key string
	rev int64
	e   *entry // nil: deleted
	// replaced is, for a cache that keeps no objects, the state this change
	// replaced, read back from etcd when a watcher may need it (see
	// readReplaced).
	replaced resources.Object
}

// apply adds a batch of etcd events to the cache and dispatches them.
// Decoding (and, without kept objects, reading replaced states) happens
// before taking the lock. After its dispatch, the version a change replaced
// keeps only its selector data (see entry).
func (c *cache) apply(ctx context.Context, evs []*clientv3.Event) {
	changes := make([]change, 0, len(evs))
	for _, ev := range evs {
		ch := change{key: string(ev.Kv.Key), rev: ev.Kv.ModRevision}
		if ev.Type == clientv3.EventTypePut {
			obj, err := c.atRest.decode(c.r, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision)
			if err != nil {
				c.lg.Error("undecodable object in etcd, treating it as deleted", "key", ch.key, "err", err)
			} else {
				ch.e = c.newEntry(ch.key, ch.rev, obj)
			}
		}
		changes = append(changes, ch)
	}
	if !c.keepObjects {
		c.readReplaced(ctx, changes)
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
			ev = &event{typ: watch.Deleted, rev: ch.rev, prev: prev}
			delete(c.objects, prev.key)
			c.unindexLocked(prev.key, prev)
		default:
			e := ch.e
			ev = &event{typ: watch.Added, rev: ch.rev, cur: e}
			if prev != nil {
				e.shareWith(prev)
				ev.typ, ev.prev = watch.Modified, prev
				c.unindexLocked(prev.key, prev)
			}
			c.objects[e.key] = e
			c.indexLocked(e.key, e)
		}
		if prev != nil && prev.obj == nil {
			prev.obj = ch.replaced
		}
		if dropped := c.ring.push(ev); dropped != nil && dropped.rev > c.window {
			c.window = dropped.rev
		}
		c.dispatchLocked(ev)
		if prev != nil {
			prev.obj = nil
		}
	}
	if !c.keepObjects {
		// Only now: a later change of the same key in this batch replaced
		// an object the batch itself made, and needed it for its dispatch.
		for _, ch := range changes {
			if ch.e != nil {
				ch.e.obj = nil
			}
		}
	}
	if n := len(changes); n > 0 {
		c.advanceLocked(changes[n-1].rev)
	}
}

// readReplaced reads from etcd, for a cache that keeps no objects, the state
// a change replaces when a watcher may need it: the last state of a deleted
// object, and the previous state of one whose labels or fields changed (it
// may stop matching a watcher). Only a key's first change in the batch can
// need it; later ones replace an object of the batch itself. A state that
// cannot be read is left nil: the watchers that need it are closed and
// resume (see sendLocked).
func (c *cache) readReplaced(ctx context.Context, changes []change) {
	var need []int
	seen := make(map[string]bool, len(changes))
	// The watch loop is the only writer of c.objects: what it reads here
	// is still there when apply takes the write lock.
	c.mu.RLock()
	for i, ch := range changes {
		if seen[ch.key] {
			continue
		}
		seen[ch.key] = true
		if prev := c.objects[ch.key]; prev != nil && (ch.e == nil || !ch.e.sameSelection(prev)) {
			need = append(need, i)
		}
	}
	c.mu.RUnlock()
	for _, i := range need {
		obj, err := c.fetch(ctx, changes[i].key, changes[i].rev-1)
		if err != nil {
			if ctx.Err() == nil {
				c.lg.Warn("cannot read a replaced state; watchers needing it will be closed", "key", changes[i].key, "err", err)
			}
			continue
		}
		changes[i].replaced = obj
	}
}

// fetch reads from etcd the state key had at revision rev, for a watch
// resuming from before a change whose replaced version the cache no longer
// holds decoded. The object carries its own mod revision. History compacted
// meanwhile is Gone.
func (c *cache) fetch(ctx context.Context, key string, rev int64) (resources.Object, error) {
	resp, err := c.client.Get(ctx, key, clientv3.WithRev(rev))
	if errors.Is(err, rpctypes.ErrCompacted) {
		return nil, newError(Gone, c.r, "", "", fmt.Errorf("too old resource version: the history at %d was compacted", rev))
	}
	if err != nil {
		return nil, newError(Internal, c.r, "", "", fmt.Errorf("store: get %s at revision %d: %w", key, rev, err))
	}
	if len(resp.Kvs) == 0 {
		return nil, newError(Internal, c.r, "", "", fmt.Errorf("store: %s missing at revision %d", key, rev))
	}
	kv := resp.Kvs[0]
	obj, err := c.atRest.decode(c.r, kv.Key, kv.Value, kv.ModRevision)
	if err != nil {
		return nil, newError(Internal, c.r, "", "", fmt.Errorf("store: get %s at revision %d: %w", key, rev, err))
	}
	return obj, nil
}

// keepsObjects reports whether r's watch cache keeps its current objects
// decoded. Events are the exception: the most numerous objects (several per
// pod start), read only by people (describe, get events) and never by the
// server's controllers or agents; their cache keeps what selectors need and
// lists read the objects from etcd.
func keepsObjects(r *resources.Resource) bool { return r != resources.Events }

// prefixIn is the etcd key prefix of c's objects in namespace ("" = all;
// ignored for cluster-scoped resources).
func (c *cache) prefixIn(namespace string) string {
	if namespace == "" || !c.r.Namespaced {
		return c.prefix
	}
	return c.prefix + namespace + "/"
}

// fetchTxnOps is how many single-key reads fetchAt puts in one etcd
// transaction (etcd's default limit is 128 operations per transaction).
const fetchTxnOps = 64

// fetchAt reads the state of keys at revision rev from etcd, in the order
// given, for a cache that keeps no objects. Up to fetchTxnOps keys are read
// in one transaction of single-key reads; more by a range read of prefix,
// which must hold them all. History compacted meanwhile is Gone.
func (c *cache) fetchAt(ctx context.Context, prefix string, keys []string, rev int64) ([]resources.Object, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	kvs := make(map[string]*mvccpb.KeyValue, len(keys))
	fail := func(err error) error {
		if errors.Is(err, rpctypes.ErrCompacted) {
			return newError(Gone, c.r, "", "", fmt.Errorf("too old resource version: the history at %d was compacted", rev))
		}
		return newError(Internal, c.r, "", "", fmt.Errorf("store: read %s at revision %d: %w", prefix, rev, err))
	}
	if len(keys) <= fetchTxnOps {
		ops := make([]clientv3.Op, len(keys))
		for i, k := range keys {
			ops[i] = clientv3.OpGet(k, clientv3.WithRev(rev))
		}
		resp, err := c.client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, fail(err)
		}
		for _, r := range resp.Responses {
			for _, kv := range r.GetResponseRange().GetKvs() {
				kvs[string(kv.Key)] = kv
			}
		}
	} else {
		resp, err := c.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			return nil, fail(err)
		}
		for _, kv := range resp.Kvs {
			kvs[string(kv.Key)] = kv
		}
	}
	out := make([]resources.Object, len(keys))
	for i, k := range keys {
		kv := kvs[k]
		if kv == nil {
			return nil, newError(Internal, c.r, "", "", fmt.Errorf("store: %s missing at revision %d", k, rev))
		}
		obj, err := c.atRest.decode(c.r, kv.Key, kv.Value, kv.ModRevision)
		if err != nil {
			return nil, newError(Internal, c.r, "", "", fmt.Errorf("store: read %s at revision %d: %w", k, rev, err))
		}
		out[i] = obj
	}
	return out, nil
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

// ring is a bounded FIFO of events in revision order. Its buffer grows as
// events arrive, up to size, so a resource with little history costs little.
type ring struct {
	buf  []*event
	size int // the most events kept
	head int // index of the oldest event
	n    int
}

func newRing(size int) ring { return ring{size: size} }

// at returns the i-th oldest event.
func (r *ring) at(i int) *event { return r.buf[(r.head+i)%len(r.buf)] }

// push appends ev and returns the event it evicted, if any.
func (r *ring) push(ev *event) *event {
	var dropped *event
	if r.n == len(r.buf) && len(r.buf) < r.size {
		grown := make([]*event, min(max(2*len(r.buf), 64), r.size))
		for i := range r.n {
			grown[i] = r.at(i)
		}
		r.buf, r.head = grown, 0
	}
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
