// Package agentruntime holds the Go runtime settings the lean node agent
// (everynode-agent) runs with unless its environment sets them, so that the
// agent and the benchmark's simulated agents that stand for it run alike.
//
// Both trade throughput the agent does not need for what an idle agent
// costs (docs/agent.md, "Footprint"):
//
//   - GOGC=50: Go's smallest heap goal is 4 MiB × GOGC/100, about twice what
//     an idle agent holds; at 50 it holds up to 1.5 MiB less.
//   - GOMAXPROCS=1: an idle agent wakes about 20 times a second (gossip
//     ticks and probes, the API's keep-alive); with more than one P each
//     wake-up also wakes idle threads that look for work and find none,
//     about a fifth more CPU. The agent's work is waiting on the network and
//     on Docker, which one P does; a busy goroutine is preempted every 10 ms,
//     well inside gossip's probe timeouts.
package agentruntime

import (
	"runtime"
	"runtime/debug"
	"strconv"
)

const (
	// GCPercent is the agent's GOGC.
	GCPercent = 50
	// MaxProcs is the agent's GOMAXPROCS.
	MaxProcs = 1
)

// Apply sets the agent's settings in this process, each one only where
// lookupEnv (os.LookupEnv) finds no GOGC or GOMAXPROCS: the environment
// overrides them.
func Apply(lookupEnv func(string) (string, bool)) {
	if _, set := lookupEnv("GOGC"); !set {
		debug.SetGCPercent(GCPercent)
	}
	if _, set := lookupEnv("GOMAXPROCS"); !set {
		runtime.GOMAXPROCS(MaxProcs)
	}
}

// Environ returns the settings as environment entries, for a child process
// that is to run as the agent does.
func Environ() []string {
	return []string{"GOGC=" + strconv.Itoa(GCPercent), "GOMAXPROCS=" + strconv.Itoa(MaxProcs)}
}
