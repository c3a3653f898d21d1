package daemonset

import (
	"context"
	"fmt"
	"testing"
)

// benchController is a controller whose caches hold n nodes, each running
// one ready pod of the current template of a rolling-update DaemonSet, and
// whose DaemonSet status already counts them: a converged fleet.
func benchController(b *testing.B, n int) (*testController, string) {
	b.Helper()
	ds := newDaemonSet("foo")
	ds.Spec.UpdateStrategy = *newRollingUpdateStrategy()
	tc := newTestController(b, ds)
	tc.dsStore.Add(ds)
	addNodes(tc.nodeStore, 0, n, nil)
	key := dsKey(ds)
	// Syncs create the pods in bounded batches (the fake pod control adds
	// them to the cache); one more, with all of them ready and observed,
	// counts them.
	for i := 0; ; i++ {
		if err := tc.sync(context.Background(), key); err != nil {
			b.Fatal(err)
		}
		syncHistoryStore(b, tc)
		created := len(tc.podStore.List())
		if created == n && validateSyncDaemonSets(tc, 0, 0, 0) == nil {
			break
		}
		if i > n {
			b.Fatalf("%d syncs created %d pods for %d nodes", i, created, n)
		}
		markPodsReady(tc)
		clearExpectations(b, tc, ds)
	}
	// The cache gets the written status, as the informer would deliver it.
	w := lastStatusUpdate(b, tc, ds)
	if w == nil || w.Status.NumberReady != int32(n) || w.Status.DesiredNumberScheduled != int32(n) {
		b.Fatalf("status written: %+v, want %d ready", w, n)
	}
	cached := ds.DeepCopy()
	cached.Status = w.Status
	tc.dsStore.Update(cached)
	tc.resetCounters()
	return tc, key
}

// BenchmarkSyncConverged: a sync of a converged DaemonSet that finds
// nothing to do, as after a pod's status changed (go test -run '^$' -bench
// Sync -benchmem ./controller/daemonset).
func BenchmarkSyncConverged(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			tc, key := benchController(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := tc.sync(context.Background(), key); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := validateSyncDaemonSets(tc, 0, 0, 0); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkSyncAwaitingCreates: a sync while the controller waits to observe
// its own creates, which only recounts the status (the pacer forgets each
// recount, so that none is held back).
func BenchmarkSyncAwaitingCreates(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			tc, key := benchController(b, n)
			tc.expectations.Set(key, 1, 0)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				tc.statusPacer.forget(key)
				if err := tc.sync(context.Background(), key); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if tc.expectations.Satisfied(key) {
				b.Fatal("the expectations were satisfied: the syncs were not status-only")
			}
		})
	}
}
