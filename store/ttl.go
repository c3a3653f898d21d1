package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/everynode/everynode/resources"
)

// DefaultEventTTL is how long an Event lives after its last write when
// Config.EventTTL is zero: the Kubernetes API server's --event-ttl default.
const DefaultEventTTL = time.Hour

// leaseReuse is how long one etcd lease serves every expiring write, as the
// Kubernetes API server's lease manager does: an object written with a TTL
// lives at least TTL and at most TTL + leaseReuse, and etcd holds one lease
// a minute instead of one per Event.
const leaseReuse = time.Minute

// leases hands out etcd leases for objects that expire (Events), one lease
// per leaseReuse window.
type leases struct {
	client *clientv3.Client
	ttl    time.Duration // 0: nothing expires
	reuse  time.Duration
	now    func() time.Time

	mu     sync.Mutex
	id     clientv3.LeaseID
	expiry time.Time // when id expires
}

func newLeases(client *clientv3.Client, ttl, reuse time.Duration) *leases {
	return &leases{client: client, ttl: ttl, reuse: reuse, now: time.Now}
}

// putOpts returns the options of a put of an object of r: a lease for an
// expiring resource, none otherwise.
func (l *leases) putOpts(ctx context.Context, r *resources.Resource) ([]clientv3.OpOption, error) {
	if r != resources.Events || l.ttl <= 0 {
		return nil, nil
	}
	id, err := l.lease(ctx)
	if err != nil {
		return nil, err
	}
	return []clientv3.OpOption{clientv3.WithLease(id)}, nil
}

// lease returns a lease that expires between ttl and ttl+reuse from now,
// granting a new one when the current one would expire too early or too
// late. A lease is reused only while at least ttl of it remains.
func (l *leases) lease(ctx context.Context) (clientv3.LeaseID, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	earliest := l.now().Add(l.ttl)
	if l.id != 0 && !l.expiry.Before(earliest) && l.expiry.Sub(earliest) <= l.reuse {
		return l.id, nil
	}
	ttl := l.ttl + l.reuse
	resp, err := l.client.Grant(ctx, int64((ttl+time.Second-1)/time.Second))
	if err != nil {
		return 0, fmt.Errorf("store: grant a %s lease: %w", ttl, err)
	}
	l.id, l.expiry = resp.ID, l.now().Add(time.Duration(resp.TTL)*time.Second)
	return l.id, nil
}
