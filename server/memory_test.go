package server

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"testing"
)

func TestAutoMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		nodes int
		want  int64
	}{
		{0, 128 << 20},
		{1000, 128<<20 + 1000*96<<10},
		{5000, 128<<20 + 5000*96<<10},
	} {
		if got := autoMemoryLimit(tc.nodes); got != tc.want {
			t.Errorf("autoMemoryLimit(%d) = %d, want %d", tc.nodes, got, tc.want)
		}
	}
}

// keepMemoryLimit puts back the process's memory limit after a test that
// changes it.
func keepMemoryLimit(t *testing.T) int64 {
	was := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(was) })
	return was
}

func TestMemoryLimiter(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	log := slog.New(slog.DiscardHandler)
	noLoop := func(f func()) { t.Fatal("a loop started for a fixed limit or none") }

	t.Run("fixed", func(t *testing.T) {
		was := keepMemoryLimit(t)
		var m memoryLimiter
		m.start(t.Context(), 200<<20, nil, noLoop, log)
		if got := debug.SetMemoryLimit(-1); got != 200<<20 {
			t.Fatalf("limit %d, want %d", got, 200<<20)
		}
		m.restore()
		if got := debug.SetMemoryLimit(-1); got != was {
			t.Fatalf("after restore: limit %d, want the earlier %d", got, was)
		}
	})

	t.Run("none", func(t *testing.T) {
		was := keepMemoryLimit(t)
		var m memoryLimiter
		m.start(t.Context(), MemoryLimitNone, nil, noLoop, log)
		m.restore()
		if got := debug.SetMemoryLimit(-1); got != was {
			t.Fatalf("limit %d, want it untouched (%d)", got, was)
		}
	})

	t.Run("auto follows the Nodes", func(t *testing.T) {
		keepMemoryLimit(t)
		nodes, fail := 10, false
		count := func() (int, error) {
			if fail {
				return 0, errors.New("no cache")
			}
			return nodes, nil
		}
		var loop func()
		ctx, cancel := context.WithCancel(t.Context())
		var m memoryLimiter
		m.start(ctx, MemoryLimitAuto, count, func(f func()) { loop = f }, log)
		if got, want := debug.SetMemoryLimit(-1), autoMemoryLimit(10); got != want {
			t.Fatalf("limit %d, want %d for 10 Nodes", got, want)
		}
		if loop == nil {
			t.Fatal("no loop started to follow the number of Nodes")
		}
		nodes = 1000
		m.follow()
		if got, want := debug.SetMemoryLimit(-1), autoMemoryLimit(1000); got != want {
			t.Fatalf("limit %d, want %d for 1000 Nodes", got, want)
		}
		fail = true
		m.follow()
		if got, want := debug.SetMemoryLimit(-1), autoMemoryLimit(1000); got != want {
			t.Fatalf("after a failed count: limit %d, want it kept at %d", got, want)
		}
		cancel()
		loop() // returns once ctx has ended
		m.restore()
	})

	t.Run("auto sizes for none when it cannot count", func(t *testing.T) {
		keepMemoryLimit(t)
		var m memoryLimiter
		m.start(t.Context(), MemoryLimitAuto, func() (int, error) { return 0, errors.New("no cache") }, func(func()) {}, log)
		if got, want := debug.SetMemoryLimit(-1), autoMemoryLimit(0); got != want {
			t.Fatalf("limit %d, want %d", got, want)
		}
		m.restore()
	})

	t.Run("GOMEMLIMIT wins over auto", func(t *testing.T) {
		was := keepMemoryLimit(t)
		t.Setenv("GOMEMLIMIT", "1GiB")
		var m memoryLimiter
		m.start(t.Context(), MemoryLimitAuto, func() (int, error) { return 1, nil }, noLoop, log)
		if got := debug.SetMemoryLimit(-1); got != was {
			t.Fatalf("limit %d, want the runtime's (%d)", got, was)
		}
	})
}
