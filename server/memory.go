package server

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// The server's soft memory limit (runtime/debug.SetMemoryLimit), from
// Config.MemoryLimit ("everynode server --memory-limit"). Without one the
// Go runtime lets the heap grow to twice what was live at the last
// collection (GOGC=100) and keeps freed pages for reuse; a limit caps the
// total, and GOGC still paces collections below it.
//
// A limit trades CPU for memory ("everynode bench fleet", docs/benchmarks.md,
// "Server memory"): at 1,000 nodes, 158 MiB took the server's RSS after a
// DaemonSet converged from 256 to 220 MiB for 15-20 % more CPU in
// convergence and rollout; 126 MiB made the collector run almost back to
// back. No limit is set by default: one sized from the number of stored
// Nodes lagged behind thousands of agents registering at once, and at
// 5,000 nodes the collector then starved the API's connection pings and
// etcd's requests.

// memoryLimiter sets the process's soft memory limit from the server's
// Config.MemoryLimit and puts back the limit it found when the server
// closes. The limit is the process's, not the server's: with several
// servers in one process (tests), the last one set wins.
type memoryLimiter struct {
	found int64 // the limit before the server set one
	set   bool  // whether the server set one
}

// start sets limit bytes (Config.MemoryLimit) unless it is 0 or negative.
// GOMEMLIMIT in the environment is overridden by an explicit limit; it is
// logged so that the operator sees which one holds.
func (m *memoryLimiter) start(limit int64, log *slog.Logger) {
	if limit <= 0 {
		if env := os.Getenv("GOMEMLIMIT"); env != "" {
			log.Info("memory limit from GOMEMLIMIT", "bytes", debug.SetMemoryLimit(-1))
		}
		return
	}
	m.found, m.set = debug.SetMemoryLimit(limit), true
	log.Info("memory limit", "bytes", limit)
}

// restore puts back the limit found by start, if start set one.
func (m *memoryLimiter) restore() {
	if m.set {
		debug.SetMemoryLimit(m.found)
		m.set = false
	}
}
