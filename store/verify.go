package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/everynode/everynode/resources"
)

// VerifyCache compares every object the watch caches hold with etcd's copy
// at the cache's revision and reports each difference: an object missing
// on either side, or one whose cached copy differs from a fresh decode of
// the stored bytes. Cached objects are shared, READ-ONLY, with every List
// and Watch caller, in-process controllers included; a difference means a
// reader modified one. It is a consistency check for tests and debugging,
// as the Kubernetes API server's watch cache consistency checker; it reads
// every stored object.
func (s *Store) VerifyCache(ctx context.Context) error {
	var errs []error
	for _, r := range resources.All() {
		c, err := s.cacheFor(r)
		if err != nil {
			return err
		}
		if err := c.verify(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *cache) verify(ctx context.Context) error {
	c.mu.RLock()
	rev := c.rev
	cached := make(map[string]resources.Object, len(c.objects))
	for k, e := range c.objects {
		cached[k] = e.obj // nil without kept objects: presence is checked
	}
	c.mu.RUnlock()
	resp, err := c.client.Get(ctx, c.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return fmt.Errorf("store: verify %s at revision %d: %w", c.r.Name, rev, err)
	}
	var errs []error
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		obj, ok := cached[key]
		delete(cached, key)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: stored at revision %d but not cached", key, kv.ModRevision))
			continue
		}
		if obj == nil {
			continue
		}
		stored, err := c.atRest.decode(c.r, kv.Key, kv.Value, kv.ModRevision)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
			continue
		}
		if !reflect.DeepEqual(obj, stored) {
			errs = append(errs, fmt.Errorf("%s: the cached object (resourceVersion %s) differs from the stored one (%d): a reader modified it",
				key, obj.GetResourceVersion(), kv.ModRevision))
		}
	}
	for key := range cached {
		errs = append(errs, fmt.Errorf("%s: cached but not stored at revision %d", key, rev))
	}
	return errors.Join(errs...)
}
