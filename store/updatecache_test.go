package store

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// countingKV counts the requests a store sends to etcd's KV service.
type countingKV struct {
	clientv3.KV
	n atomic.Int64
}

func (k *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	k.n.Add(1)
	return k.KV.Get(ctx, key, opts...)
}

func (k *countingKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	k.n.Add(1)
	return k.KV.Put(ctx, key, val, opts...)
}

func (k *countingKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	k.n.Add(1)
	return k.KV.Delete(ctx, key, opts...)
}

func (k *countingKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	k.n.Add(1)
	return k.KV.Do(ctx, op)
}

func (k *countingKV) Txn(ctx context.Context) clientv3.Txn {
	k.n.Add(1)
	return k.KV.Txn(ctx)
}

// openCounting is openTest with the store's etcd requests counted.
func openCounting(t *testing.T) (*Store, *countingKV) {
	kv := &countingKV{}
	s := openTest(t, func(c *Config) {
		c.wrapKV = func(inner clientv3.KV) clientv3.KV { kv.KV = inner; return kv }
	})
	return s, kv
}

// bump is a try for GuaranteedUpdate: annotation n of the object plus one;
// seen records the n each call was given.
func bump(seen *[]string) func(resources.Object) (resources.Object, error) {
	return func(cur resources.Object) (resources.Object, error) {
		a := cur.GetAnnotations()
		*seen = append(*seen, a["n"])
		n, _ := strconv.Atoi(a["n"])
		a["n"] = strconv.Itoa(n + 1)
		return cur, nil
	}
}

// awaitCached waits until the cache holds rv of pod default/p.
func awaitCached(t *testing.T, s *Store, rv string) {
	t.Helper()
	obj, err := s.GetCached(testCtx(t), resources.Pods, "default", "p")
	if err != nil || obj.GetResourceVersion() != rv {
		t.Fatalf("cached pod: %v %v, want resourceVersion %s", obj, err, rv)
	}
}

// TestGuaranteedUpdateStartsFromTheCache: an update starts from the watch
// cache's copy, so one whose copy is current costs no etcd read, only the
// conditional write.
func TestGuaranteedUpdateStartsFromTheCache(t *testing.T) {
	s, kv := openCounting(t)
	ctx := testCtx(t)
	p := newPod("default", "p", "", nil)
	p.Annotations = map[string]string{"n": "0"}
	out := mustCreate(t, s, resources.Pods, p)
	const updates = 20
	var seen []string
	for i := range updates {
		awaitCached(t, s, out.GetResourceVersion())
		before := kv.n.Load()
		var err error
		if out, err = s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", bump(&seen)); err != nil {
			t.Fatal(err)
		}
		if n := kv.n.Load() - before; n != 1 {
			t.Fatalf("update %d made %d etcd requests, want 1: the conditional write", i, n)
		}
		if got := out.GetAnnotations()["n"]; got != strconv.Itoa(i+1) {
			t.Fatalf("update %d wrote n=%s", i, got)
		}
	}
	if len(seen) != updates {
		t.Errorf("try ran %d times for %d updates", len(seen), updates)
	}

	// The same for deletes: one conditional delete, which returns what it
	// deleted.
	for i := range updates {
		q := newPod("default", "q"+strconv.Itoa(i), "", nil)
		created := mustCreate(t, s, resources.Pods, q)
		testkit.Eventually(t, 10*time.Second, func() error {
			_, err := s.GetCached(ctx, resources.Pods, "default", q.Name)
			return err
		})
		before := kv.n.Load()
		gone, err := s.Delete(ctx, resources.Pods, "default", q.Name, &Preconditions{UID: string(q.UID), ResourceVersion: created.GetResourceVersion()})
		if err != nil {
			t.Fatal(err)
		}
		if n := kv.n.Load() - before; n != 1 {
			t.Fatalf("delete %d made %d etcd requests, want 1: the conditional delete", i, n)
		}
		if gone.GetName() != q.Name || string(gone.GetUID()) != string(q.UID) || rvOf(t, gone) <= rvOf(t, created) {
			t.Fatalf("delete returned %s (%s) at %s, want %s after %s", gone.GetName(), gone.GetUID(), gone.GetResourceVersion(), q.Name, created.GetResourceVersion())
		}
	}
}

// TestGuaranteedUpdateOutdatedCacheCopy: when the cache's copy is older than
// etcd's (a write through another server not yet seen here), the write
// conditional on it fails and try runs again on the current object; an
// error or a no-op answer from try on the old copy is checked against the
// current object; an object gone from etcd is NotFound. Delete likewise.
func TestGuaranteedUpdateOutdatedCacheCopy(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	p := newPod("default", "p", "", nil)
	p.Annotations = map[string]string{"n": "1"}
	v1 := mustCreate(t, s, resources.Pods, p)
	var seen []string
	v2, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", bump(&seen))
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.cacheFor(resources.Pods)
	if err != nil {
		t.Fatal(err)
	}
	key, err := keyOf(resources.Pods, "default", "p")
	if err != nil {
		t.Fatal(err)
	}
	// outdate puts v1 back into the cache, as if v2 had not reached it.
	outdate := func() {
		t.Helper()
		if err := s.waitWritten(ctx, c); err != nil { // nothing of ours still to come
			t.Fatal(err)
		}
		c.mu.Lock()
		old := *c.objects[key]
		old.obj, old.rev = v1, rvOf(t, v1)
		c.objects[key] = &old
		c.mu.Unlock()
	}

	outdate()
	seen = nil
	v3, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", bump(&seen))
	if err != nil {
		t.Fatal(err)
	}
	if got := v3.GetAnnotations()["n"]; got != "3" || len(seen) != 2 || seen[0] != "1" || seen[1] != "2" {
		t.Fatalf("update from an outdated copy: wrote n=%s, try saw %v; want n=3 after [1 2]", got, seen)
	}
	v2 = v3

	// try refuses the outdated copy (a resourceVersion precondition): the
	// current object decides.
	outdate()
	seen = nil
	want := v2.GetResourceVersion()
	v4, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", func(cur resources.Object) (resources.Object, error) {
		if cur.GetResourceVersion() != want {
			seen = append(seen, "refused "+cur.GetResourceVersion())
			return nil, newError(Conflict, resources.Pods, "default", "p", errModified)
		}
		return bump(&seen)(cur)
	})
	if err != nil {
		t.Fatalf("precondition met by the current object: %v (try saw %v)", err, seen)
	}
	if got := v4.GetAnnotations()["n"]; got != "4" || len(seen) != 2 {
		t.Fatalf("precondition: wrote n=%s, try saw %v", got, seen)
	}
	v2 = v4

	// try changes nothing on the outdated copy: the current object is
	// compared, and try runs on it; nothing is written.
	outdate()
	seen = nil
	rev, _ := s.currentRevision(ctx)
	same, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", func(cur resources.Object) (resources.Object, error) {
		seen = append(seen, cur.GetAnnotations()["n"])
		return cur, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if same.GetResourceVersion() != v2.GetResourceVersion() || same.GetAnnotations()["n"] != "4" || len(seen) != 2 {
		t.Fatalf("no-op on an outdated copy: got rv %s n=%s (try saw %v), want rv %s n=4", same.GetResourceVersion(),
			same.GetAnnotations()["n"], seen, v2.GetResourceVersion())
	}
	if now, _ := s.currentRevision(ctx); now != rev {
		t.Errorf("no-op update wrote to etcd: revision %d -> %d", rev, now)
	}

	// A delete from the outdated copy: the precondition is checked on the
	// current object, and the delete returns the current object's last state.
	outdate()
	gone, err := s.Delete(ctx, resources.Pods, "default", "p", &Preconditions{ResourceVersion: v2.GetResourceVersion()})
	if err != nil {
		t.Fatalf("delete with the current resourceVersion from an outdated copy: %v", err)
	}
	if gone.GetAnnotations()["n"] != "4" || rvOf(t, gone) <= rvOf(t, v2) {
		t.Fatalf("delete returned n=%s at %s, want n=4 after %s", gone.GetAnnotations()["n"], gone.GetResourceVersion(), v2.GetResourceVersion())
	}
	p.ResourceVersion = ""
	v1 = mustCreate(t, s, resources.Pods, p)
	if v2, err = s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", bump(&seen)); err != nil {
		t.Fatal(err)
	}
	outdate()
	if gone, err = s.Delete(ctx, resources.Pods, "default", "p", nil); err != nil {
		t.Fatalf("delete from an outdated copy: %v", err)
	}
	if gone.GetAnnotations()["n"] != "2" || rvOf(t, gone) <= rvOf(t, v2) {
		t.Fatalf("delete returned n=%s at %s, want n=2 after %s", gone.GetAnnotations()["n"], gone.GetResourceVersion(), v2.GetResourceVersion())
	}
	v1 = mustCreate(t, s, resources.Pods, p)
	if v2, err = s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", bump(&seen)); err != nil {
		t.Fatal(err)
	}
	outdate()
	if _, err := s.Delete(ctx, resources.Pods, "default", "p", &Preconditions{ResourceVersion: v1.GetResourceVersion()}); !IsConflict(err) {
		t.Fatalf("delete with the outdated copy's resourceVersion: %v, want Conflict", err)
	}

	// Gone from etcd while the cache still holds it.
	if _, err := s.Delete(ctx, resources.Pods, "default", "p", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetCached(ctx, resources.Pods, "default", "p"); !IsNotFound(err) {
		t.Fatalf("cache after delete: %v", err)
	}
	c.mu.Lock()
	c.objects[key] = c.newEntry(key, rvOf(t, v2), v2)
	c.mu.Unlock()
	if _, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", bump(&seen)); !IsNotFound(err) {
		t.Fatalf("update of a deleted object the cache still holds: %v, want NotFound", err)
	}
}
