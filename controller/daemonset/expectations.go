package daemonset

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ExpectationsTimeout is how long unobserved creates and deletes hold back a
// DaemonSet before the controller assumes they were lost
// (docs/controller-rules.md §2.8).
const ExpectationsTimeout = 5 * time.Minute

// expectations remembers, per DaemonSet key, how many pod creations and
// deletions the controller issued but has not yet seen in its pod cache, so a
// sync never acts on a cache that is behind its own writes
// (docs/controller-rules.md §2.8). It is safe for concurrent use.
type expectations struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	m     map[string]*expectation
}

type expectation struct {
	add, del  int64
	timestamp time.Time
}

func newExpectations(clk clock.PassiveClock) *expectations {
	return &expectations{clock: clk, m: map[string]*expectation{}}
}

// Satisfied is true when there is no record for key, when every expected
// create and delete has been observed, or when the record expired.
func (e *expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok {
		return true
	}
	if x.add <= 0 && x.del <= 0 {
		return true
	}
	return e.clock.Since(x.timestamp) > ExpectationsTimeout
}

// Set replaces the record for key.
func (e *expectations) Set(key string, add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[key] = &expectation{add: int64(add), del: int64(del), timestamp: e.clock.Now()}
}

// Lower decrements the expected creates and deletes of key.
func (e *expectations) Lower(key string, add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok {
		x.add -= int64(add)
		x.del -= int64(del)
	}
}

// CreationObserved records one observed (or failed) creation.
func (e *expectations) CreationObserved(key string) { e.Lower(key, 1, 0) }

// DeletionObserved records one observed (or failed) deletion.
func (e *expectations) DeletionObserved(key string) { e.Lower(key, 0, 1) }

// Delete forgets key (DaemonSet deleted or re-created with a new UID).
func (e *expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}

// get returns the pending creates and deletes of key (for tests).
func (e *expectations) get(key string) (add, del int64, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok {
		return 0, 0, false
	}
	return x.add, x.del, true
}
