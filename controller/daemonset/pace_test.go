package daemonset

import (
	"errors"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
)

// statusWrites counts the DaemonSet status updates the fake API received
// (failed ones included).
func statusWrites(tc *testController) int {
	n := 0
	for _, a := range tc.client.Actions() {
		if a.Verb == fake.VerbUpdate && a.Resource == "daemonsets" && a.Subresource == "status" {
			n++
		}
	}
	return n
}

// awaitingCreates is a controller with a DaemonSet over three nodes that
// waits to observe the three creates it expects.
func awaitingCreates(t *testing.T) (*testController, *appsv1.DaemonSet, string) {
	t.Helper()
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	tc.dsStore.Add(ds)
	addNodes(tc.nodeStore, 0, 3, nil)
	key := dsKey(ds)
	tc.expectations.Set(key, 3, 0)
	return tc, ds, key
}

// TestStatusOnlySyncsArePaced: while the controller waits to observe its
// own creates, a DaemonSet's status is recounted at most once per
// StatusOnlyInterval; a sync held back comes back by itself when the
// interval ends, and a sync whose expectations are satisfied is not held.
func TestStatusOnlySyncsArePaced(t *testing.T) {
	tc, ds, key := awaitingCreates(t)
	// The work queue's heartbeat ticker: the delayed re-queue below adds a
	// timer to it.
	testkit.EventuallyTrue(t, 10*time.Second, "the work queue's heartbeat on the fake clock", tc.clock.HasWaiters)

	expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
	if u := lastStatusUpdate(t, tc, ds); u == nil || u.Status.DesiredNumberScheduled != 3 || u.Status.CurrentNumberScheduled != 0 {
		t.Fatalf("first status-only sync wrote %+v", u)
	}
	writes := statusWrites(tc)

	// A pod appears but the other creates are still unobserved: the next
	// sync, within the interval, is held back and writes nothing.
	addPods(tc.podStore, "node-0", simpleDaemonSetLabel, ds, 1)
	tc.clock.Step(StatusOnlyInterval - time.Millisecond)
	waiters := tc.clock.Waiters()
	expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
	if n := statusWrites(tc); n != writes {
		t.Fatalf("a status-only sync %v after the last wrote the status (%d writes, want %d)", StatusOnlyInterval-time.Millisecond, n, writes)
	}
	// Stepping the clock before the queue arms its timer would leave the
	// timer a millisecond in the future for good.
	testkit.EventuallyTrue(t, 10*time.Second, "the held-back key's timer", func() bool { return tc.clock.Waiters() > waiters })
	if n := tc.queue.Len(); n != 0 {
		t.Fatalf("the held-back key was queued before the interval ended (%d queued)", n)
	}

	// When the interval has passed, the key is queued again, and that
	// sync counts the pod.
	tc.clock.Step(time.Millisecond)
	testkit.EventuallyTrue(t, 10*time.Second, "the held-back key queued again after the interval", func() bool { return tc.queue.Len() > 0 })
	if keys := queuedKeys(tc); len(keys) != 1 || keys[0] != key {
		t.Fatalf("queued %v, want [%s]", keys, key)
	}
	expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
	if u := lastStatusUpdate(t, tc, ds); statusWrites(tc) != writes+1 || u.Status.CurrentNumberScheduled != 1 {
		t.Fatalf("after the interval: %d writes (want %d), status %+v", statusWrites(tc), writes+1, u.Status)
	}

	// Expectations satisfied: the sync manages at once, in the same
	// instant as the last status-only sync.
	tc.expectations.Delete(key)
	expectSyncDaemonSets(t, tc, ds, 2, 0, 0)
}

// TestStatusOnlyPacingCountsOnlyWrittenStatus: a recount whose status write
// failed does not hold the next one back (the failure is retried with the
// queue's back-off, as before).
func TestStatusOnlyPacingCountsOnlyWrittenStatus(t *testing.T) {
	tc, ds, _ := awaitingCreates(t)

	boom := errors.New("etcd unavailable")
	tc.client.Fail(fake.VerbUpdate, "daemonsets/status", boom)
	expectSyncDaemonSetsWithError(t, tc, ds, 0, 0, 0, boom)
	failed := statusWrites(tc)
	if failed == 0 {
		t.Fatal("the status-only sync tried no status write")
	}
	tc.client.Fail(fake.VerbUpdate, "daemonsets/status", nil)
	expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
	if u := lastStatusUpdate(t, tc, ds); statusWrites(tc) == failed || u == nil || u.Status.DesiredNumberScheduled != 3 {
		t.Fatalf("the retry right after a failed write: %d writes (%d before), status %+v", statusWrites(tc), failed, u)
	}
}

// TestStatusOnlyPacingForgetsDeletedDaemonSets: a DaemonSet deleted and
// created again under its name is not held back by its predecessor's
// recount, whether the sync or the delete handler saw it go first.
func TestStatusOnlyPacingForgetsDeletedDaemonSets(t *testing.T) {
	for _, viaHandler := range []bool{false, true} {
		tc, ds, key := awaitingCreates(t)
		expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
		if d := tc.statusPacer.wait(key, tc.clock.Now(), StatusOnlyInterval); d != StatusOnlyInterval {
			t.Fatalf("after a recount the key waits %v, want %v", d, StatusOnlyInterval)
		}

		tc.dsStore.Delete(ds)
		if viaHandler {
			tc.deleteDaemonSet(ds)
		} else {
			expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
		}
		if d := tc.statusPacer.wait(key, tc.clock.Now(), StatusOnlyInterval); d != 0 {
			t.Errorf("handler %v: a deleted DaemonSet's key still waits %v", viaHandler, d)
		}
	}
}

func TestPacer(t *testing.T) {
	p := newPacer()
	t0 := time.Unix(1000, 0)
	if d := p.wait("a", t0, time.Second); d != 0 {
		t.Fatalf("first wait %v, want 0", d)
	}
	p.ran("a", t0)
	if d := p.wait("a", t0.Add(300*time.Millisecond), time.Second); d != 700*time.Millisecond {
		t.Fatalf("wait 300ms after a run: %v, want 700ms", d)
	}
	if d := p.wait("b", t0, time.Second); d != 0 {
		t.Fatalf("another key waited %v", d)
	}
	if d := p.wait("a", t0.Add(time.Second), time.Second); d != 0 {
		t.Fatalf("wait a second after a run: %v, want 0", d)
	}
	if d := p.wait("a", t0.Add(5*time.Second), time.Second); d != 0 {
		t.Fatalf("wait long after a run: %v, want 0", d)
	}
	p.forget("a")
	if d := p.wait("a", t0.Add(100*time.Millisecond), time.Second); d != 0 {
		t.Fatalf("forgotten key waited %v", d)
	}
}
