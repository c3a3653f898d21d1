package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/everynode/everynode/resources"
)

// freshTimeout bounds how long a consistent read waits for the watch cache to
// catch up with etcd. The cache normally lags by milliseconds; running into
// this means the cache's etcd watch is broken.
const freshTimeout = 10 * time.Second

// List returns the objects of r in namespace ("" = all namespaces; ignored
// for cluster-scoped resources) that match sel, sorted by namespace and name,
// and the list's resourceVersion. It is served by the watch cache after the
// cache has caught up with etcd's current revision, so it reflects every write
// that completed before the call. The returned objects are shared with the
// cache and other readers: they are READ-ONLY. For a resource whose cache
// keeps no objects (see keepsObjects), List reads them from etcd at the
// list's resourceVersion.
func (s *Store) List(ctx context.Context, r *resources.Resource, namespace string, sel Selector) ([]resources.Object, int64, error) {
	return s.list(ctx, r, namespace, sel, s.waitFresh)
}

// ListCached is List without the linearizable read of etcd's revision: it
// waits only until the watch cache has applied every write to r that this
// Store completed before the call, so it reflects this process's own writes
// (every write, when one server is the only writer) but may miss the last
// milliseconds of other servers' writes to r, as Kubernetes' admission
// plugins, which read informer caches, may. It answers without a round trip
// to etcd when the cache is up to date (for a resource written rarely, such
// as Namespaces or PriorityClasses, almost always).
func (s *Store) ListCached(ctx context.Context, r *resources.Resource, namespace string, sel Selector) ([]resources.Object, int64, error) {
	return s.list(ctx, r, namespace, sel, s.waitWritten)
}

// list serves List and ListCached once wait has returned.
func (s *Store) list(ctx context.Context, r *resources.Resource, namespace string, sel Selector, wait func(context.Context, *cache) error) ([]resources.Object, int64, error) {
	c, err := s.cacheFor(r)
	if err != nil {
		return nil, 0, err
	}
	if err := checkSelector(r, sel); err != nil {
		return nil, 0, err
	}
	if !r.Namespaced {
		namespace = ""
	}
	if err := wait(ctx, c); err != nil {
		return nil, 0, err
	}
	m := newMatcher(r, namespace, sel)
	c.mu.RLock()
	src := c.objects
	if m.hasNode {
		src = c.byNode[m.node]
	}
	var (
		items []resources.Object
		keys  []string // without kept objects: the keys to read from etcd
	)
	if c.keepObjects {
		items = make([]resources.Object, 0, len(src))
	}
	for _, e := range src {
		if !m.matches(e) {
			continue
		}
		if c.keepObjects {
			items = append(items, e.obj)
		} else {
			keys = append(keys, e.key)
		}
	}
	rev := c.rev
	c.mu.RUnlock()
	if !c.keepObjects {
		var err error
		if items, err = c.fetchAt(ctx, c.prefixIn(namespace), keys, rev); err != nil {
			return nil, 0, err
		}
	}
	sortObjects(items)
	return items, rev, nil
}

// waitFresh waits until c has applied every write etcd had committed when it
// was called (a linearizable read of the current revision, then a wait for
// the cache, prodding etcd for progress notifications meanwhile).
func (s *Store) waitFresh(ctx context.Context, c *cache) error {
	target, err := s.currentRevision(ctx)
	if err != nil {
		return newError(Internal, c.r, "", "", err)
	}
	wctx, cancel := context.WithTimeout(ctx, freshTimeout)
	defer cancel()
	if err := c.waitRev(wctx, target); err != nil {
		return newError(Internal, c.r, "", "", fmt.Errorf("store: %w", err))
	}
	return nil
}

// waitWritten waits until c has applied every write to its resource this
// Store completed before the call.
func (s *Store) waitWritten(ctx context.Context, c *cache) error {
	wctx, cancel := context.WithTimeout(ctx, freshTimeout)
	defer cancel()
	if err := c.waitRev(wctx, c.written.Load()); err != nil {
		return newError(Internal, c.r, "", "", fmt.Errorf("store: %w", err))
	}
	return nil
}

// noteWritten records that a write to r completed at revision rev.
func (s *Store) noteWritten(r *resources.Resource, rev int64) {
	c := s.caches[r.Name]
	if c == nil {
		return
	}
	for {
		old := c.written.Load()
		if rev <= old || c.written.CompareAndSwap(old, rev) {
			return
		}
	}
}

// sortObjects orders objects by namespace, then name.
func sortObjects(items []resources.Object) {
	slices.SortFunc(items, func(a, b resources.Object) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
}

// cachedObject is the watch cache's current copy of key (shared with the
// cache: read-only), or nil when r's cache keeps no objects or has none
// under key. It does not wait for the cache to catch up.
func (s *Store) cachedObject(r *resources.Resource, key string) resources.Object {
	c, err := s.cacheFor(r)
	if err != nil || !c.keepObjects {
		return nil
	}
	return c.current(key)
}

// current is the object the cache holds under key, or nil. It reads the
// entry's object under the lock: apply clears the object of an entry it
// replaces.
func (c *cache) current(key string) resources.Object {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e := c.objects[key]; e != nil {
		return e.obj
	}
	return nil
}

// GetCached returns one object from the watch cache, with ListCached's
// freshness: every write to r this Store completed before the call is
// reflected. The object is shared with the cache and READ-ONLY. For a
// resource whose cache keeps no objects it is Get.
func (s *Store) GetCached(ctx context.Context, r *resources.Resource, namespace, name string) (resources.Object, error) {
	c, err := s.cacheFor(r)
	if err != nil {
		return nil, err
	}
	key, err := keyOf(r, namespace, name)
	if err != nil {
		return nil, err
	}
	if !c.keepObjects {
		return s.Get(ctx, r, namespace, name)
	}
	if err := s.waitWritten(ctx, c); err != nil {
		return nil, err
	}
	obj := c.current(key)
	if obj == nil {
		return nil, newError(NotFound, r, namespace, name, nil)
	}
	return obj, nil
}
