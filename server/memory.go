package server

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/everynode/everynode/resources"
)

// The server's soft memory limit (runtime/debug.SetMemoryLimit), when
// Config.MemoryLimit is MemoryLimitAuto ("everynode server"'s default):
// MemoryLimitBase plus MemoryLimitPerNode for every Node stored, re-read
// every memoryLimitPeriod. Without a limit the Go runtime lets the heap
// grow to twice what was live at the last collection (GOGC=100); the
// limit caps that, and GOGC still paces collections below it.
//
// The automatic limit is a ceiling, not a target: it sits just above what
// the server holds at its busiest with GOGC alone ("everynode bench
// fleet": about 190 MiB at 1,000 nodes, 580 at 5,000 while a DaemonSet
// converges), so it costs no CPU in normal work and stops a burst beyond
// that (a storm of lists, thousands of agents reconnecting) from taking
// the box's memory. A tighter limit trades CPU for memory: at 1,000 nodes,
// 158 MiB took the server's RSS after convergence from 256 to 220 MiB for
// 15-20 % more CPU in convergence and rollout (docs/benchmarks.md,
// "Server memory"); 126 MiB made the collector run back to back. The base
// is high enough that a thousand agents registering within two seconds,
// faster than the limit follows them, do not squeeze the collector.
const (
	// MemoryLimitNone (Config.MemoryLimit 0) sets no limit: the
	// runtime's default, or GOMEMLIMIT from the environment.
	MemoryLimitNone = 0
	// MemoryLimitAuto sizes the limit from the number of Nodes.
	MemoryLimitAuto = -1
	// MemoryLimitBase is the automatic limit of a server without nodes.
	MemoryLimitBase = 128 << 20
	// MemoryLimitPerNode is what the automatic limit adds for every Node.
	MemoryLimitPerNode = 96 << 10
	// memoryLimitPeriod is how often the automatic limit follows the
	// number of Nodes: a thousand agents register within two seconds, and
	// a limit that lagged behind them would make the collector run back
	// to back meanwhile. A count is a map's length under a read lock.
	memoryLimitPeriod = time.Second
)

// autoMemoryLimit is the automatic limit for a cluster of nodes Nodes.
func autoMemoryLimit(nodes int) int64 {
	return MemoryLimitBase + int64(nodes)*MemoryLimitPerNode
}

// memoryLimiter sets the process's soft memory limit from the server's
// Config.MemoryLimit and puts back the limit it found when the server
// closes. The limit is the process's, not the server's: with several
// servers in one process (tests), the last one set wins.
type memoryLimiter struct {
	found int64 // the limit before the server set one
	set   bool  // whether the server set one
	// With MemoryLimitAuto: the number of Nodes, and the limit set.
	count func() (int, error)
	cur   int64
	log   *slog.Logger
}

// memoryLimitFromEnv reports whether GOMEMLIMIT is set in the environment:
// an operator's explicit limit wins over the automatic one.
func memoryLimitFromEnv() bool { return os.Getenv("GOMEMLIMIT") != "" }

// start applies limit (Config.MemoryLimit): a positive limit at once and
// for good, MemoryLimitAuto now and then every memoryLimitPeriod from
// count (the number of Nodes) until ctx ends; run is how the caller runs
// that loop. MemoryLimitNone changes nothing. It logs what it chose.
func (m *memoryLimiter) start(ctx context.Context, limit int64, count func() (int, error), run func(func()), log *slog.Logger) {
	switch {
	case limit == MemoryLimitNone || limit < MemoryLimitAuto:
		return
	case limit == MemoryLimitAuto && memoryLimitFromEnv():
		log.Info("memory limit from GOMEMLIMIT", "bytes", debug.SetMemoryLimit(-1))
		return
	}
	m.found, m.set = debug.SetMemoryLimit(-1), true
	if limit > 0 {
		debug.SetMemoryLimit(limit)
		log.Info("memory limit", "bytes", limit)
		return
	}
	m.count, m.log = count, log
	m.follow()
	log.Info("memory limit (auto)", "bytes", m.cur)
	run(func() {
		t := time.NewTicker(memoryLimitPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				m.follow()
			}
		}
	})
}

// follow sets the automatic limit for the number of Nodes now. A failed
// count keeps the limit as it is (at start: sized for no Nodes).
func (m *memoryLimiter) follow() {
	n, err := m.count()
	if err != nil {
		if m.cur == 0 {
			m.log.Warn("memory limit: cannot count Nodes; sizing for none", "err", err)
			m.cur = autoMemoryLimit(0)
			debug.SetMemoryLimit(m.cur)
		}
		return
	}
	if l := autoMemoryLimit(n); l != m.cur {
		m.cur = l
		debug.SetMemoryLimit(l)
		m.log.Debug("memory limit (auto)", "bytes", l, "nodes", n)
	}
}

// restore puts back the limit found by start, if start set one.
func (m *memoryLimiter) restore() {
	if m.set {
		debug.SetMemoryLimit(m.found)
		m.set = false
	}
}

// countNodes is the number of Nodes in the server's watch cache.
func (s *Server) countNodes() (int, error) { return s.st.Count(resources.Nodes) }
