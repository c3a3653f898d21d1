package server

import (
	"log/slog"
	"runtime/debug"
	"testing"
)

func TestMemoryLimiter(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	was := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(was) })

	var m memoryLimiter
	m.start(200<<20, log)
	if got := debug.SetMemoryLimit(-1); got != 200<<20 {
		t.Fatalf("limit %d, want %d", got, 200<<20)
	}
	m.restore()
	if got := debug.SetMemoryLimit(-1); got != was {
		t.Fatalf("after restore: limit %d, want the earlier %d", got, was)
	}

	var none memoryLimiter
	none.start(0, log)
	none.restore()
	if got := debug.SetMemoryLimit(-1); got != was {
		t.Fatalf("with no limit: limit %d, want it untouched (%d)", got, was)
	}
}
