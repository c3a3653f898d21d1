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

// setting is one of the agent's runtime settings: its environment variable,
// its value, and how to set it in this process.
type setting struct {
	name  string
	value int
	set   func(int)
}

func settings() []setting {
	return []setting{
		{"GOGC", GCPercent, func(v int) { debug.SetGCPercent(v) }},
		{"GOMAXPROCS", MaxProcs, func(v int) { runtime.GOMAXPROCS(v) }},
	}
}

// Apply sets the agent's settings in this process, each one only where
// lookupEnv (os.LookupEnv) finds no GOGC or GOMAXPROCS: the environment
// overrides them.
func Apply(lookupEnv func(string) (string, bool)) {
	for _, s := range settings() {
		if _, set := lookupEnv(s.name); !set {
			s.set(s.value)
		}
	}
}

// Environ returns, as environment entries for a child process that is to run
// as the agent does, the settings Apply would make with lookupEnv: those the
// environment does not set.
func Environ(lookupEnv func(string) (string, bool)) []string {
	var env []string
	for _, s := range settings() {
		if _, set := lookupEnv(s.name); !set {
			env = append(env, s.name+"="+strconv.Itoa(s.value))
		}
	}
	return env
}
