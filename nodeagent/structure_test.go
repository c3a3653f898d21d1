package nodeagent

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	clientfake "github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/nodeagent/runtime"
	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

// Interface guards: the fake runtime satisfies both the contract and the
// agent's view of it.
var (
	_ Runtime         = (*rtfake.Fake)(nil)
	_ runtime.Runtime = (*rtfake.Fake)(nil)
	_ PodSink         = (*podCache)(nil)
	_ PodSource       = (*apiSource)(nil)
	_ PodSource       = (*diskSource)(nil)
	_ PodSink         = (*persistSink)(nil)
	_ PodSink         = setSink{}
)

// TestDependencies keeps the agent off the server's internals: it talks to
// the API only through client.Interface.
func TestDependencies(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not on PATH (the test runs under go test): %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{
			"github.com/everynode/everynode/apiserver",
			"github.com/everynode/everynode/store",
			"github.com/everynode/everynode/controller",
			"go.etcd.io/etcd/server",
		} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("nodeagent depends on %s", dep)
			}
		}
	}
}

// TestManyAgentsInOneProcess runs a small simulated fleet: every agent has
// its own fake runtime and shares one API, as the fleet benchmark does.
func TestManyAgentsInOneProcess(t *testing.T) {
	const nodes = 50
	e := newEnv(t, rtfake.Config{})
	api := clientfake.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, nodes)
	rts := make([]*rtfake.Fake, nodes)
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i)
		p := newPod("ds-"+name, func(p *corev1.Pod) { p.Spec.NodeName = name })
		if err := api.Seed(p); err != nil {
			t.Fatal(err)
		}
		rts[i] = rtfake.New(rtfake.Config{Clock: e.clock, Images: []string{"busybox:1.36"}})
		a, err := New(Config{NodeName: name, Client: api, Runtime: rts[i], Clock: e.clock, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- a.Run(ctx) }()
	}
	eventually(t, "every node running its pod", func() bool {
		for _, rt := range rts {
			l, _ := rt.ListContainers(ctx, nil)
			if len(l) != 1 || l[0].State != runtime.StateRunning {
				return false
			}
		}
		return true
	})
	cancel()
	for range nodes {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
