package testkit

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestEventuallyReturnsOnceTrue(t *testing.T) {
	var n atomic.Int32
	Eventually(t, time.Second, func() error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if got := n.Load(); got != 3 {
		t.Fatalf("calls = %d, want 3", got)
	}
}

func TestEventuallyGivesUpWithLastError(t *testing.T) {
	start := time.Now()
	err := eventually(100*time.Millisecond, func() error { return errors.New("still broken") })
	if err == nil || err.Error() != "still broken" {
		t.Fatalf("err = %v, want the condition's last error", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("gave up after %s, before its deadline", d)
	}
}

func TestConsistentlyCoversTheWindow(t *testing.T) {
	start := time.Now()
	var n atomic.Int32
	if err := consistently(120*time.Millisecond, func() error { n.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 120*time.Millisecond {
		t.Fatalf("returned after %s, before the window ended", d)
	}
	if n.Load() < 2 {
		t.Fatalf("condition ran %d times, want at least at both ends", n.Load())
	}
}

func TestConsistentlyFailsAtTheFirstChange(t *testing.T) {
	start := time.Now()
	var n atomic.Int32
	err := consistently(10*time.Second, func() error {
		if n.Add(1) == 3 {
			return fmt.Errorf("changed at call %d", n.Load())
		}
		return nil
	})
	if err == nil {
		t.Fatal("a change inside the window passed")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("waited %s for the window to end after a failure", d)
	}
}

func TestBufferConcurrentWriters(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				fmt.Fprintf(&b, "w%d;", i)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := len(b.String()); got != 8*100*3 {
		t.Fatalf("wrote %d bytes, want %d", got, 8*100*3)
	}
	if !b.Contains("w7;") {
		t.Fatal("Contains missed a write")
	}
	b.Reset()
	if b.String() != "" {
		t.Fatal("Reset kept data")
	}
}

// TestVerifyNoneSeesALeak proves the leak check can fail: a goroutine left
// blocked is reported, and once it ends the check passes.
func TestVerifyNoneSeesALeak(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); <-stop }()
	rec := &recorder{TB: t}
	VerifyNone(rec)
	if !rec.failed {
		t.Fatal("a blocked goroutine was not reported")
	}
	close(stop)
	<-done
	VerifyNone(t)
}

// TestLeakCheckSinceItsStart: a goroutine running before LeakCheck does
// not count; one started after it does, until it ends.
func TestLeakCheckSinceItsStart(t *testing.T) {
	stopOld, oldDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(oldDone); <-stopOld }()
	defer func() { close(stopOld); <-oldDone }()

	rec := &recorder{TB: t}
	check := LeakCheck(rec)
	check()
	if rec.failed {
		t.Fatal("a goroutine older than the check was reported")
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); <-stop }()
	check()
	if !rec.failed {
		t.Fatal("a goroutine started after the snapshot was not reported")
	}
	close(stop)
	<-done
	rec.failed = false
	check()
	if rec.failed {
		t.Fatal("a goroutine that ended was still reported")
	}
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Error(...any)          { r.failed = true }
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Helper()               {}

func TestNavigateRetrying(t *testing.T) {
	changed := errors.New("page load error net::ERR_NETWORK_CHANGED")
	calls := 0
	flaky := func() error {
		if calls++; calls == 1 {
			return changed
		}
		return nil
	}
	if err := NavigateRetrying(3, flaky); err != nil || calls != 2 {
		t.Errorf("network change once: %v after %d calls, want success after 2", err, calls)
	}
	calls = 0
	refused := errors.New("page load error net::ERR_CONNECTION_REFUSED")
	if err := NavigateRetrying(3, func() error { calls++; return refused }); err != refused || calls != 1 {
		t.Errorf("another error: %v after %d calls, want it after 1", err, calls)
	}
	calls = 0
	if err := NavigateRetrying(2, func() error { calls++; return changed }); err != changed || calls != 2 {
		t.Errorf("network changing throughout: %v after %d calls, want it after 2", err, calls)
	}
}
