package nodeagent

import (
	"context"
	"testing"

	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

// BenchmarkRelist is one relist of a node running one pod: what every agent
// does every RelistPeriod, busy or idle.
func BenchmarkRelist(b *testing.B) {
	e := newEnv(b, rtfake.Config{})
	e.seed(newPod("web"))
	e.sync("web")
	e.agent.relist(context.Background())
	b.ReportAllocs()
	for b.Loop() {
		e.agent.relist(context.Background())
	}
}

// BenchmarkSyncRunningPod is a sync of a running pod whose status is
// already written: the sync every pod event and relist change leads to.
func BenchmarkSyncRunningPod(b *testing.B) {
	e := newEnv(b, rtfake.Config{})
	e.seed(newPod("web"))
	e.sync("web")
	p := e.refresh("web")
	e.sync("web")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.agent.syncPod(context.Background(), p.UID); err != nil {
			b.Fatal(err)
		}
	}
}
