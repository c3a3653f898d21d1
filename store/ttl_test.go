package store

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/resources"
)

// TestLeasesReusedWithinWindow: one lease serves every write of a reuse
// window, each object living at least the TTL; past the window, or when the
// lease would outlive TTL + reuse, a new lease is granted.
func TestLeasesReusedWithinWindow(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	l := newLeases(s.client, time.Hour, time.Minute)
	l.now = func() time.Time { return now }

	first, err := l.lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := s.client.TimeToLive(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL < int64((time.Hour + time.Minute).Seconds()) {
		t.Fatalf("granted TTL %d s, want at least TTL + reuse = %d s", ttl.GrantedTTL, int64((time.Hour + time.Minute).Seconds()))
	}
	for _, step := range []struct {
		at   time.Duration
		same bool
	}{
		{30 * time.Second, true}, // 1h30s of the lease left ≥ the 1h TTL
		{60 * time.Second, true}, // exactly the TTL left
		{61 * time.Second, false},
	} {
		now = t0.Add(step.at)
		id, err := l.lease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if (id == first) != step.same {
			t.Fatalf("at +%s: lease %x, first %x; want same=%v", step.at, id, first, step.same)
		}
	}
	if got, _ := l.lease(ctx); got == first {
		t.Fatal("the new lease was not kept for the next write")
	}
}

// TestEventsExpire: an Event is deleted by etcd once its TTL has passed (and
// watchers see it deleted); a pod written at the same time is not; with a
// negative EventTTL nothing expires.
func TestEventsExpire(t *testing.T) {
	s := openTest(t, func(c *Config) { c.EventTTL = time.Second; c.leaseReuse = time.Nanosecond })
	ctx := testCtx(t)
	w, err := s.Watch(ctx, resources.Events, "ns1", 0, Selector{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	mustCreate(t, s, resources.Events, newEvent("ns1", "e.1", "a", "A"))
	mustCreate(t, s, resources.Pods, newPod("ns1", "p", "n1", nil))
	if e := next(t, w); e.Type != watch.Added {
		t.Fatalf("first event %s, want ADDED", e.Type)
	}
	if e := next(t, w); e.Type != watch.Deleted || objName(e.Object) != "ns1/e.1" {
		t.Fatalf("second event %s %s, want DELETED e.1 (expired)", e.Type, objName(e.Object))
	}
	if _, err := s.Get(ctx, resources.Events, "ns1", "e.1"); !IsNotFound(err) {
		t.Fatalf("Get expired event: %v, want NotFound", err)
	}
	if _, err := s.Get(ctx, resources.Pods, "ns1", "p"); err != nil {
		t.Fatalf("the pod expired too: %v", err)
	}

	keep := openTest(t, func(c *Config) { c.EventTTL = -1 })
	mustCreate(t, keep, resources.Events, newEvent("ns1", "e.2", "a", "A"))
	resp, err := keep.client.Get(ctx, "/registry/events/ns1/e.2")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get e.2 from etcd: %v, %d kvs", err, len(resp.Kvs))
	}
	if resp.Kvs[0].Lease != int64(clientv3.NoLease) {
		t.Fatalf("EventTTL < 0: the event has lease %x", resp.Kvs[0].Lease)
	}
}
