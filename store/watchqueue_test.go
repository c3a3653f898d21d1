package store

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/resources"
)

// takeNext waits for w's next events through Ready and Take.
func takeNext(t *testing.T, w *Watcher) ([]watch.Event, bool) {
	t.Helper()
	select {
	case <-w.Ready():
		return w.Take(nil)
	case <-time.After(10 * time.Second):
		t.Fatal("no events within 10 s")
		return nil, false
	}
}

func TestTakeReturnsQueuedEventsInOrderThenTheEnd(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	mustCreate(t, s, resources.Pods, newPod("default", "p0", "n1", nil))
	w, err := s.Watch(ctx, resources.Pods, "", 0, Selector{})
	if err != nil {
		t.Fatal(err)
	}
	evs, open := takeNext(t, w)
	if len(evs) != 1 || evs[0].Type != watch.Added || !open {
		t.Fatalf("initial Take = %d events (%v), open %v; want the one ADDED, open", len(evs), evs, open)
	}
	for i := 1; i <= 3; i++ {
		mustCreate(t, s, resources.Pods, newPod("default", fmt.Sprintf("p%d", i), "n1", nil))
	}
	var got []string
	for len(got) < 3 {
		evs, open := takeNext(t, w)
		if !open {
			t.Fatalf("watch ended after %v", got)
		}
		for _, e := range evs {
			got = append(got, e.Object.(resources.Object).GetName())
		}
	}
	if fmt.Sprint(got) != "[p1 p2 p3]" {
		t.Fatalf("events %v, want [p1 p2 p3]", got)
	}
	if evs, _ := w.Take(nil); len(evs) != 0 {
		t.Fatalf("Take after everything was taken returned %d events", len(evs))
	}
	mustCreate(t, s, resources.Pods, newPod("default", "p4", "n1", nil))
	waitQueued(t, w, 1)
	w.Stop()
	evs, open = takeNext(t, w)
	if open || len(evs) != 1 || evs[0].Object.(resources.Object).GetName() != "p4" {
		t.Fatalf("Take after Stop = %d events, open %v; want p4, then the end", len(evs), open)
	}
}

// waitQueued waits until w holds n events.
func waitQueued(t *testing.T, w *Watcher, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		got := len(w.queue)
		w.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events queued after 10 s, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An idle watcher holds no buffer for events it might get: the memory of
// thousands of watchers, one per node, is their bookkeeping alone. A
// watcher that reserved room for its bound (1,024 events of 32 bytes, or
// the 128 of a buffered channel before) would fail this.
func TestIdleWatchersHoldNoEventBuffer(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	const n = 5000
	sel := Selector{Field: fields.OneTermEqualSelector("spec.nodeName", "n0")}
	before := heapInUse()
	ws := make([]*Watcher, 0, n)
	for range n {
		w, err := s.Watch(ctx, resources.Pods, "", 0, sel)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	per := float64(heapInUse()-before) / n
	runtime.KeepAlive(ws)
	for _, w := range ws {
		w.Stop()
	}
	const limit = 2048
	t.Logf("an idle watcher holds %.0f bytes", per)
	if per > limit {
		t.Fatalf("an idle watcher holds %.0f bytes of heap, want at most %d", per, limit)
	}
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// ResultChan's goroutine ends when the watcher is stopped, though nobody
// reads the channel any more: it is not left waiting to hand over the
// events still queued. Counted by stack, as in TestWatchersHaveNoGoroutines.
func TestResultChanGoroutineEndsAtStopWithoutAReader(t *testing.T) {
	s := openTest(t)
	ctx := context.Background() // no context ending to rescue it
	for _, fellBehind := range []bool{false, true} {
		t.Run(fmt.Sprintf("fell behind %v", fellBehind), func(t *testing.T) {
			before := storeGoroutines()
			w, err := s.Watch(ctx, resources.Pods, "", 0, Selector{})
			if err != nil {
				t.Fatal(err)
			}
			w.ResultChan() // started, never read
			n := 3
			if fellBehind {
				n = defaultWatchBuffer + 2
			}
			for i := range n {
				mustCreate(t, s, resources.Pods, newPod("default", fmt.Sprintf("p%v-%d", fellBehind, i), "", nil))
			}
			w.Stop()
			deadline := time.Now().Add(10 * time.Second)
			for storeGoroutines() > before {
				if time.Now().After(deadline) {
					t.Fatalf("%d goroutines running store code 10 s after Stop, %d before the watch", storeGoroutines(), before)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// Ending a watcher with nothing queued wakes its consumer: Ready gets a
// token and Take reports the end.
func TestEndWakesAnIdleWatcher(t *testing.T) {
	s := openTest(t)
	for name, end := range map[string]func(w *Watcher, cancel context.CancelFunc){
		"Stop":        func(w *Watcher, _ context.CancelFunc) { w.Stop() },
		"context end": func(_ *Watcher, cancel context.CancelFunc) { cancel() },
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			w, err := s.Watch(ctx, resources.Pods, "none", 0, Selector{})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-w.Ready():
				t.Fatal("a watch of an empty namespace is ready before anything happened")
			default:
			}
			end(w, cancel)
			evs, open := takeNext(t, w)
			if open || len(evs) != 0 {
				t.Fatalf("Take after the end = %d events, open %v; want none and the end", len(evs), open)
			}
		})
	}
}
