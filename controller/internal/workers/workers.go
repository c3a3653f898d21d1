// Package workers runs a controller's queue workers and periodic loops: the
// goroutines every controller starts after its caches have synced.
package workers

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// NewQueue is a controller's work queue: client-go's default controller rate
// limiter (per-item exponential back-off and an overall token bucket) on clk.
// Its goroutine runs until ShutDown: a controller's Run shuts it down, and a
// constructor that fails after NewQueue must shut it down itself.
func NewQueue[K comparable](clk clock.WithTicker) workqueue.TypedRateLimitingInterface[K] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[K](),
		workqueue.TypedRateLimitingQueueConfig[K]{Clock: clk})
}

// ShutDownOnError shuts queue down if *err is set. A constructor defers it
// right after NewQueue, with its named error result: the queue's goroutine
// runs until ShutDown, which Run calls, and a constructor that fails leaves
// no Run to call it.
func ShutDownOnError(queue interface{ ShutDown() }, err *error) {
	if *err != nil {
		queue.ShutDown()
	}
}

// ProcessNext takes one key from queue and passes it to sync. A failed key is
// requeued rate-limited and reported to onError (unless ctx has ended, when
// failures are expected and not reported); a synced key's rate-limit history
// is forgotten. It returns false once queue has been shut down and drained.
func ProcessNext[K comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[K],
	sync func(context.Context, K) error, onError func(K, error)) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	if err := sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			onError(key, err)
		}
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	return true
}

// Run starts n worker goroutines on wg, each calling ProcessNext until queue
// shuts down. The caller owns the goroutines: it stops them by shutting down
// queue and then waits for them with wg.Wait.
func Run[K comparable](ctx context.Context, wg *sync.WaitGroup, n int, queue workqueue.TypedRateLimitingInterface[K],
	sync func(context.Context, K) error, onError func(K, error)) {
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ProcessNext(ctx, queue, sync, onError) {
			}
		}()
	}
}

// Every starts a goroutine on wg that calls f on each tick of a clk ticker
// with period d. The caller owns the goroutine: it stops when ctx ends, and
// the caller waits for it with wg.Wait.
func Every(ctx context.Context, wg *sync.WaitGroup, clk clock.WithTicker, d time.Duration, f func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := clk.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				f()
			}
		}
	}()
}
