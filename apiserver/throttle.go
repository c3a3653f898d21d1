package apiserver

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"k8s.io/utils/lru"

	"github.com/everynode/everynode/internal/ctxtime"
)

// Failed authentications from one source are slowed (docs/security.md
// §1): each source has a bucket of failureBurst failures answered
// at once, refilled by one every failureEvery; a failure beyond it is still
// answered 401, after waiting for its turn (at most failureMaxDelay). Valid
// credentials never meet the throttle. Sources are IP addresses, IPv6 ones
// by their /64; the server remembers the failureSources most recent ones.
const (
	failureBurst    = 10
	failureEvery    = time.Second
	failureMaxDelay = 5 * time.Second
	failureSources  = 10000
)

// failureThrottle is a per-source token bucket, kept as GCRA does: one
// "theoretical arrival time" per source, the moment its bucket is full again.
type failureThrottle struct {
	burst    int
	every    time.Duration
	maxDelay time.Duration
	now      func() time.Time
	// sleep waits d or until ctx ends.
	sleep func(ctx context.Context, d time.Duration) bool

	mu      sync.Mutex
	sources *lru.Cache // source string → time.Time
}

func newFailureThrottle() *failureThrottle {
	return &failureThrottle{
		burst: failureBurst, every: failureEvery, maxDelay: failureMaxDelay,
		now: time.Now, sleep: ctxtime.Sleep, sources: lru.New(failureSources),
	}
}

// wait records a failed authentication from remoteAddr (host:port) and
// waits as long as the source's bucket says.
func (t *failureThrottle) wait(ctx context.Context, remoteAddr string) {
	if d := t.fail(sourceOf(remoteAddr)); d > 0 {
		t.sleep(ctx, d)
	}
}

// fail records one failure of source and returns how long its answer waits.
func (t *failureThrottle) fail(source string) time.Duration {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	full := now
	if v, ok := t.sources.Get(source); ok && v.(time.Time).After(now) {
		full = v.(time.Time)
	}
	full = full.Add(t.every)
	tolerance := time.Duration(t.burst) * t.every
	delay := full.Sub(now) - tolerance
	if delay > t.maxDelay {
		// A source that keeps failing waits the most; its debt stops
		// growing there, so it recovers within tolerance+maxDelay of
		// stopping.
		delay = t.maxDelay
		full = now.Add(tolerance + t.maxDelay)
	}
	t.sources.Add(source, full)
	return max(delay, 0)
}

// sourceOf is the throttle's key for a remote address: its IP, or for IPv6
// its /64 (what one host usually gets); the address as is when it does not
// parse.
func sourceOf(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		if p, err := ip.WithZone("").Prefix(64); err == nil {
			return p.String()
		}
	}
	return ip.String()
}
