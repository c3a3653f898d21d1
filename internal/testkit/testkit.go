// Package testkit holds what every test package of everynode shares: polling
// assertions with deadlines (Eventually, Consistently), a concurrency-safe
// Buffer for logs and command output, and goroutine leak checks built on
// go.uber.org/goleak (VerifyNone, LeakCheck, VerifyTestMain).
//
// A test that asserts something does not happen uses Consistently over a
// bounded window, never a sleep followed by one look. The settable gossip
// membership tests use is nodelifecycle.StaticMembership (the benchmark's
// gossip-free runs use it too, so it lives with the interface it implements).
package testkit

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Poll is how often Eventually and Consistently call their condition.
const Poll = 25 * time.Millisecond

// Eventually calls fn until it returns nil and fails the test with fn's
// last error if it has not by timeout. fn runs at least once.
func Eventually(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	if err := eventually(timeout, fn); err != nil {
		t.Fatalf("not true after %s: %v", timeout, err)
	}
}

// EventuallyTrue is Eventually for a boolean condition; what names it in
// the failure ("pod running").
func EventuallyTrue(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := eventually(timeout, func() error {
		if cond() {
			return nil
		}
		return errString("not yet: " + what)
	})
	if err != nil {
		t.Fatalf("%s: not true after %s", what, timeout)
	}
}

func eventually(timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(Poll)
	}
}

// Consistently calls fn over the whole window and fails the test at the
// first error: the bounded form of "nothing happens". Call it after the
// positive convergence it guards, so the window starts from a known state.
// fn runs at least twice: at the start and at the end of the window.
func Consistently(t testing.TB, window time.Duration, fn func() error) {
	t.Helper()
	if err := consistently(window, fn); err != nil {
		t.Fatalf("changed within %s: %v", window, err)
	}
}

func consistently(window time.Duration, fn func() error) error {
	deadline := time.Now().Add(window)
	for {
		if err := fn(); err != nil {
			return err
		}
		if !time.Now().Before(deadline) {
			return nil
		}
		time.Sleep(min(Poll, time.Until(deadline)))
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// Buffer is a bytes.Buffer safe for concurrent writers and readers: the
// output of a command, a logger or a child process that a test reads while
// it still runs.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Contains reports whether s has been written.
func (b *Buffer) Contains(s string) bool { return strings.Contains(b.String(), s) }

// Reset discards what was written.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// LeakOptions are the goroutines every leak check ignores: process-wide
// daemons that libraries start once and never stop (klog's flusher, the
// HTTP/2 and gRPC background resolvers), none of them ours; and a probe
// that a shut-down memberlist member still waits out until its ack timer
// fires (the probe interval, scaled up by Lifeguard while the member's
// health is degraded: seconds), which memberlist cannot cancel. A member
// left running leaks its other goroutines too, which are not ignored.
func LeakOptions(extra ...goleak.Option) []goleak.Option {
	opts := []goleak.Option{
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
		goleak.IgnoreAnyFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
	}
	return append(opts, extra...)
}

// VerifyNone fails t if goroutines other than the ignored ones are still
// running: call it (deferred, or from t.Cleanup) after everything the test
// started is closed. goleak retries for a while, so goroutines that are on
// their way out do not count.
func VerifyNone(t testing.TB, extra ...goleak.Option) {
	t.Helper()
	goleak.VerifyNone(t, LeakOptions(extra...)...)
}

// LeakCheck snapshots the goroutines running now and returns the check
// that fails t if any other goroutine is still running when it is called:
// the leaks of this test only, not the goroutines that earlier tests of the
// package left on their way out (TestMain's VerifyTestMain catches those).
// Call it first thing in the test: defer testkit.LeakCheck(t)().
func LeakCheck(t testing.TB, extra ...goleak.Option) func() {
	t.Helper()
	before := goleak.IgnoreCurrent()
	return func() {
		t.Helper()
		VerifyNone(t, append(extra, before)...)
	}
}

// VerifyTestMain runs the package's tests and then fails the run if any
// goroutine is left behind: call it from TestMain.
func VerifyTestMain(m *testing.M, extra ...goleak.Option) {
	goleak.VerifyTestMain(m, LeakOptions(extra...)...)
}

// NavigateRetrying runs navigate, a headless browser's page load, again
// while it fails with Chromium's ERR_NETWORK_CHANGED, at most tries times a
// second apart: Chromium fails a navigation when another program adds or
// removes a network interface, as Docker does for tests running beside
// this one. Any other error, or the last one, is returned.
func NavigateRetrying(tries int, navigate func() error) error {
	for try := 1; ; try++ {
		err := navigate()
		if err == nil || try >= tries || !strings.Contains(err.Error(), "ERR_NETWORK_CHANGED") {
			return err
		}
		time.Sleep(time.Second)
	}
}
