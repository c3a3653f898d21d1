package bench

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procWakeups is what a process's threads were switched out so far: the
// voluntary context switches (a thread blocked: a sleep, a futex, a poll
// with nothing to read, each one a later wake-up) and the involuntary ones
// (preempted while runnable), summed over /proc/<pid>/task/*/status. A
// thread that exited takes its counts with it; the Go runtime rarely ends
// threads, and an idle process starts none.
type procWakeups struct{ voluntary, involuntary int64 }

// readWakeups sums the context switch counters of every thread of pid.
func readWakeups(pid int) (procWakeups, error) {
	var w procWakeups
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		return w, fmt.Errorf("bench: threads of process %d: none readable", pid)
	}
	for _, p := range tasks {
		f, err := os.Open(p)
		if err != nil {
			continue // the thread ended meanwhile
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			var to *int64
			switch k {
			case "voluntary_ctxt_switches":
				to = &w.voluntary
			case "nonvoluntary_ctxt_switches":
				to = &w.involuntary
			default:
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil {
				*to += n
			}
		}
		f.Close()
	}
	return w, nil
}

// procSample is one process's CPU time and wake-ups at one moment.
type procSample struct {
	cpuS    float64
	wakeups procWakeups
}

func sampleProcs(pids []int) ([]procSample, error) {
	out := make([]procSample, len(pids))
	for i, pid := range pids {
		w, err := readWakeups(pid)
		if err != nil {
			return nil, err
		}
		out[i] = procSample{cpuS: procCPUSeconds(pid), wakeups: w}
	}
	return out, nil
}

// idleCPUSettle is how long the fleet idles before its idle CPU is
// measured, as for idle traffic.
const idleCPUSettle = idleTrafficSettle

// idleCPU measures, over d once every pod runs, the CPU time and the
// context switches of the agent processes (pids, running nodes agents
// between them) and of this process, and sets the Idle* CPU figures of
// res. profile, when set, is called with true at the start of the window
// and false at its end (a CPU profile of one agent process).
func idleCPU(ctx context.Context, pids []int, nodes int, d time.Duration, profile func(ctx context.Context, on bool) error, res *Result, log *slog.Logger) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(idleCPUSettle):
	}
	if profile != nil {
		if err := profile(ctx, true); err != nil {
			return err
		}
	}
	s0, err := sampleProcs(pids)
	if err != nil {
		return err
	}
	self0 := cpuSeconds()
	t0 := time.Now()
	log.Info("measuring idle CPU", "for", d, "processes", len(pids))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
	}
	s1, err := sampleProcs(pids)
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	self1 := cpuSeconds()
	res.IdleLoadAvg = loadAvg()
	if profile != nil {
		if err := profile(ctx, false); err != nil {
			return err
		}
	}
	idleCPURates(s0, s1, secs, nodes, res)
	res.IdleServerCPUMsPerS = (self1 - self0) * 1000 / secs
	log.Info("idle CPU per agent", "ms_per_s", res.IdleCPUMsPerS, "wakeups_per_s", res.IdleWakeupsPerS, "loadavg", res.IdleLoadAvg)
	return nil
}

// idleCPURates turns two samples of the agent processes, secs apart, into
// the per-agent figures of res: nodes agents ran in those processes,
// evenly shared.
func idleCPURates(s0, s1 []procSample, secs float64, nodes int, res *Result) {
	var cpu float64
	var w procWakeups
	per := float64(nodes) / float64(len(s0)) // agents per process
	for i := range s0 {
		c := s1[i].cpuS - s0[i].cpuS
		cpu += c
		w = procWakeups{voluntary: w.voluntary + s1[i].wakeups.voluntary - s0[i].wakeups.voluntary,
			involuntary: w.involuntary + s1[i].wakeups.involuntary - s0[i].wakeups.involuntary}
		res.IdleCPUMsPerSMax = max(res.IdleCPUMsPerSMax, c*1000/secs/per)
	}
	n := float64(nodes)
	res.IdleCPUS = secs
	res.IdleCPUMsPerS = cpu * 1000 / secs / n
	res.IdleVoluntaryPerS = float64(w.voluntary) / secs / n
	res.IdleInvoluntaryPerS = float64(w.involuntary) / secs / n
	res.IdleWakeupsPerS = res.IdleVoluntaryPerS + res.IdleInvoluntaryPerS
}
