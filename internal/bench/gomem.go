package bench

import "runtime/metrics"

// goMem splits what the Go runtime holds from the OS (Result.ServerGoMB)
// into the parts that answer "where does the memory go": the heap's
// objects (live and not yet swept), the free heap kept for reuse and not
// yet returned to the OS, fragmentation inside spans, goroutine stacks, and
// the runtime's own structures; with the collector's work so far.
type goMem struct {
	ObjectsMB float64 `json:"objects_mb"`
	FreeMB    float64 `json:"free_mb"`
	UnusedMB  float64 `json:"unused_mb"`
	StacksMB  float64 `json:"stacks_mb"`
	OtherMB   float64 `json:"other_mb"`
	// GoalMB is the heap size at which the next collection is due; LimitMB
	// the soft memory limit (0: none).
	GoalMB  float64 `json:"goal_mb"`
	LimitMB float64 `json:"limit_mb,omitempty"`
	// GCCycles and GCCPUS count the collections and the CPU seconds they
	// took since the process started (an estimate by the runtime).
	GCCycles uint64  `json:"gc_cycles"`
	GCCPUS   float64 `json:"gc_cpu_s"`
}

// readGoMem reads the runtime's memory classes without forcing a
// collection.
func readGoMem() goMem {
	names := []string{
		"/memory/classes/heap/objects:bytes",
		"/memory/classes/heap/free:bytes",
		"/memory/classes/heap/unused:bytes",
		"/memory/classes/heap/stacks:bytes",
		"/memory/classes/os-stacks:bytes",
		"/memory/classes/total:bytes",
		"/memory/classes/heap/released:bytes",
		"/gc/heap/goal:bytes",
		"/gc/gomemlimit:bytes",
		"/gc/cycles/total:gc-cycles",
		"/cpu/classes/gc/total:cpu-seconds",
	}
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	u := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	mb := func(b uint64) float64 { return float64(b) / (1 << 20) }
	m := goMem{
		ObjectsMB: mb(u(0)), FreeMB: mb(u(1)), UnusedMB: mb(u(2)),
		StacksMB: mb(u(3) + u(4)), GoalMB: mb(u(7)), GCCycles: u(9),
	}
	if held := u(5) - u(6); held > u(0)+u(1)+u(2)+u(3)+u(4) {
		m.OtherMB = mb(held - u(0) - u(1) - u(2) - u(3) - u(4))
	}
	if l := u(8); l < 1<<62 {
		m.LimitMB = mb(l)
	}
	if s[10].Value.Kind() == metrics.KindFloat64 {
		m.GCCPUS = s[10].Value.Float64()
	}
	return m
}
