package daemonset

import (
	"testing"
	"time"

	"github.com/everynode/everynode/client/fake"
)

// statusWrites counts the DaemonSet status updates the fake API received.
func statusWrites(tc *testController) int {
	n := 0
	for _, a := range tc.client.Actions() {
		if a.Verb == fake.VerbUpdate && a.Resource == "daemonsets" && a.Subresource == "status" {
			n++
		}
	}
	return n
}

// TestStatusOnlySyncsArePaced: while the controller waits to observe its
// own creates, a DaemonSet's status is recounted at most once per
// StatusOnlyInterval; a sync held back comes back by itself when the
// interval ends, and a sync whose expectations are satisfied is not held.
func TestStatusOnlySyncsArePaced(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	tc.dsStore.Add(ds)
	addNodes(tc.nodeStore, 0, 3, nil)
	key := dsKey(ds)
	tc.expectations.Set(key, 3, 0)

	expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
	if u := lastStatusUpdate(t, tc, ds); u == nil || u.Status.DesiredNumberScheduled != 3 || u.Status.CurrentNumberScheduled != 0 {
		t.Fatalf("first status-only sync wrote %+v", u)
	}
	writes := statusWrites(tc)

	// A pod appears but the other creates are still unobserved: the next
	// sync, in the same instant, is held back and writes nothing.
	addPods(tc.podStore, "node-0", simpleDaemonSetLabel, ds, 1)
	tc.clock.Step(StatusOnlyInterval - time.Millisecond)
	expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
	if n := statusWrites(tc); n != writes {
		t.Fatalf("a status-only sync %v after the last wrote the status (%d writes, want %d)", StatusOnlyInterval-time.Millisecond, n, writes)
	}
	if n := tc.queue.Len(); n != 0 {
		t.Fatalf("the held-back key was queued at once (%d queued)", n)
	}

	// When the interval has passed, the key is queued again, and that
	// sync counts the pod.
	tc.clock.Step(time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for tc.queue.Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the held-back key was not queued again after the interval")
		}
		time.Sleep(time.Millisecond)
	}
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

func TestPacer(t *testing.T) {
	p := newPacer()
	t0 := time.Unix(1000, 0)
	if d := p.wait("a", t0, time.Second); d != 0 {
		t.Fatalf("first wait %v, want 0", d)
	}
	if d := p.wait("a", t0.Add(300*time.Millisecond), time.Second); d != 700*time.Millisecond {
		t.Fatalf("wait 300ms after %v, want 700ms", d)
	}
	if d := p.wait("b", t0, time.Second); d != 0 {
		t.Fatalf("another key waited %v", d)
	}
	// A held-back wait does not move the last time.
	if d := p.wait("a", t0.Add(time.Second), time.Second); d != 0 {
		t.Fatalf("wait a second after %v, want 0", d)
	}
	if d := p.wait("a", t0.Add(1500*time.Millisecond), time.Second); d != 500*time.Millisecond {
		t.Fatalf("wait after the second pass %v, want 500ms", d)
	}
	p.forget("a")
	if d := p.wait("a", t0.Add(1600*time.Millisecond), time.Second); d != 0 {
		t.Fatalf("forgotten key waited %v", d)
	}
}
