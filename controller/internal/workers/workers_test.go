package workers

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/everynode/everynode/internal/testkit"
)

func newQueue() workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
}

func TestProcessNext(t *testing.T) {
	tests := []struct {
		name         string
		syncErr      error
		wantReported bool
		wantRequeues int
	}{
		{name: "success forgets the key", syncErr: nil, wantReported: false, wantRequeues: 0},
		{name: "failure requeues and reports", syncErr: errors.New("boom"), wantReported: true, wantRequeues: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newQueue()
			defer q.ShutDown()
			q.Add("a")
			var got string
			reported := false
			ok := ProcessNext(context.Background(), q,
				func(_ context.Context, k string) error { got = k; return tt.syncErr },
				func(k string, err error) { reported = true })
			if !ok || got != "a" {
				t.Fatalf("ProcessNext = %v, synced %q; want true, \"a\"", ok, got)
			}
			if reported != tt.wantReported {
				t.Errorf("reported = %v, want %v", reported, tt.wantReported)
			}
			if n := q.NumRequeues("a"); n != tt.wantRequeues {
				t.Errorf("NumRequeues = %d, want %d", n, tt.wantRequeues)
			}
		})
	}
}

func TestProcessNextQuietAfterCancel(t *testing.T) {
	q := newQueue()
	defer q.ShutDown()
	q.Add("a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ProcessNext(ctx, q, func(context.Context, string) error { return errors.New("canceled") },
		func(string, error) { t.Error("failure reported after ctx ended") })
	if n := q.NumRequeues("a"); n != 1 {
		t.Errorf("NumRequeues = %d, want 1", n)
	}
}

func TestProcessNextShutdown(t *testing.T) {
	q := newQueue()
	q.ShutDown()
	if ProcessNext(context.Background(), q, func(context.Context, string) error { return nil }, func(string, error) {}) {
		t.Error("ProcessNext on a shut-down queue = true, want false")
	}
}

func TestRunStopsOnShutdown(t *testing.T) {
	q := newQueue()
	var wg sync.WaitGroup
	synced := make(chan string, 3)
	Run(context.Background(), &wg, 2, q, func(_ context.Context, k string) error { synced <- k; return nil }, func(string, error) {})
	for _, k := range []string{"a", "b", "c"} {
		q.Add(k)
	}
	seen := map[string]bool{}
	for range 3 {
		seen[<-synced] = true
	}
	q.ShutDown()
	wg.Wait()
	if len(seen) != 3 {
		t.Errorf("synced %v, want a, b and c", seen)
	}
}

func TestEvery(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	ticks := make(chan struct{}, 1)
	Every(ctx, &wg, clk, time.Minute, func() { ticks <- struct{}{} })
	testkit.EventuallyTrue(t, 10*time.Second, "ticker created", clk.HasWaiters)
	clk.Step(time.Minute)
	<-ticks
	cancel()
	wg.Wait()
}

func TestShutDownOnError(t *testing.T) {
	for _, failure := range []error{nil, errors.New("constructor failed")} {
		q := newQueue()
		construct := func() (err error) {
			defer ShutDownOnError(q, &err)
			return failure
		}
		if err := construct(); err != failure {
			t.Fatalf("construct = %v, want %v", err, failure)
		}
		if got, want := q.ShuttingDown(), failure != nil; got != want {
			t.Errorf("constructor returning %v: queue shutting down = %v, want %v", failure, got, want)
		}
		q.ShutDown()
	}
}
