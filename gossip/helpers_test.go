package gossip

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/everynode/everynode/internal/testkit"
)

// testKey returns a 32-byte key filled with b.
func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// testLogger logs to stderr when EVERYNODE_GOSSIP_DEBUG is set, else discards.
func testLogger() *slog.Logger {
	if os.Getenv("EVERYNODE_GOSSIP_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testConfig is a loopback config with the given profile and key 1.
func testConfig(name, profile string) Config {
	cfg := DefaultLocalConfig()
	cfg.Name = name
	cfg.Profile = profile
	cfg.Key = testKey(1)
	cfg.Meta = Meta{Role: RoleAgent, AgentAddr: "127.0.0.1:1" + name}
	cfg.Logger = testLogger()
	return cfg
}

// startMember starts a member and closes it when the test ends.
func startMember(tb testing.TB, cfg Config) *Member {
	tb.Helper()
	m, err := New(cfg)
	if err != nil {
		tb.Fatalf("New(%s): %v", cfg.Name, err)
	}
	tb.Cleanup(func() { _ = m.Close() })
	return m
}

// startCluster starts n members named m0…m(n-1) with the profile and joins them all to
// m0, then waits until everyone sees everyone alive.
func startCluster(tb testing.TB, profile string, n int) []*Member {
	tb.Helper()
	ms := make([]*Member, n)
	for i := range ms {
		ms[i] = startMember(tb, testConfig(fmt.Sprintf("m%d", i), profile))
		if i > 0 {
			if _, err := ms[i].Join([]string{ms[0].LocalAddr()}); err != nil {
				tb.Fatalf("join m%d: %v", i, err)
			}
		}
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("m%d", i)
	}
	waitFor(tb, 10*time.Second, "full membership", func() bool {
		for _, m := range ms {
			if !seesAlive(m, names...) {
				return false
			}
		}
		return true
	})
	return ms
}

// waitFor is testkit.EventuallyTrue: cond (a real asynchronous system:
// memberlist) must hold within timeout.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	testkit.EventuallyTrue(tb, timeout, what, cond)
}

// stateOf returns the state m sees for name, and whether it lists name at all.
func stateOf(m *Member, name string) (MemberInfo, bool) {
	for _, mi := range m.Members() {
		if mi.Name == name {
			return mi, true
		}
	}
	return MemberInfo{}, false
}

// seesAlive reports whether m lists every name as Alive.
func seesAlive(m *Member, names ...string) bool {
	for _, n := range names {
		if mi, ok := stateOf(m, n); !ok || mi.State != Alive {
			return false
		}
	}
	return true
}

// checkGoroutines fails the test if goroutines it started (memberlist's,
// this package's) still run 5s after the test's members are closed: a
// memberlist probe in flight at Shutdown ends only at its timeout. Call it
// first so its cleanup runs last.
func checkGoroutines(tb testing.TB) {
	tb.Helper()
	opts := testkit.LeakOptions(goleak.IgnoreCurrent())
	tb.Cleanup(func() {
		testkit.Eventually(tb, 5*time.Second, func() error { return goleak.Find(opts...) })
	})
}

// measureDetection starts n members with the profile, crashes the last one (Close
// without Leave) and returns how long each other member took to list it Dead, watching
// Hints with a polling fallback.
func measureDetection(tb testing.TB, profile string, n int) []time.Duration {
	tb.Helper()
	ms := startCluster(tb, profile, n)
	defer func() {
		for _, m := range ms {
			_ = m.Close()
		}
	}()
	victim, observers := ms[n-1], ms[:n-1]
	for _, o := range observers {
		drain(o.Hints())
	}
	type result struct {
		i int
		d time.Duration
	}
	results := make(chan result, len(observers))
	stop := make(chan struct{})
	defer close(stop)
	start := time.Now()
	if err := victim.Close(); err != nil {
		tb.Fatalf("close victim: %v", err)
	}
	for i, o := range observers {
		go func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				if mi, ok := stateOf(o, victim.name); ok && mi.State != Alive {
					if mi.State != Dead {
						tb.Errorf("%s sees crashed %s as %v, want dead", o.name, victim.name, mi.State)
					}
					results <- result{i, time.Since(start)}
					return
				}
				select {
				case <-o.Hints():
				case <-tick.C:
				case <-stop:
					return
				}
			}
		}()
	}
	out := make([]time.Duration, len(observers))
	timeout := time.After(15 * time.Second)
	for range observers {
		select {
		case r := <-results:
			out[r.i] = r.d
		case <-timeout:
			tb.Fatalf("crashed member not seen dead by every member within 15 s: %v", out)
		}
	}
	return out
}

// drain empties a hint channel without blocking.
func drain(ch <-chan string) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
