package docker

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent/runtime"
	"github.com/everynode/everynode/nodeagent/runtime/docker/internal/testimage"
)

// requireEnv turns a missing engine from a skip into a failure.
const requireEnv = testimage.RequireEnv

// runLabel marks every container a test run creates, so TestMain can sweep
// what a failed test left behind.
const runLabel = testimage.RunLabel

// engine is what TestMain found: set once before any test runs, read-only
// after.
var engine struct {
	cli     *client.Client
	skipWhy string // non-empty: no engine
	image   string // the test image's tag
	run     string // this run's ID
}

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	engine.run = testimage.RunID()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := testimage.Connect(ctx)
	if err != nil {
		engine.skipWhy = err.Error()
		if os.Getenv(requireEnv) == "1" {
			fmt.Fprintf(os.Stderr, "FAIL: no Docker engine and %s=1: %v\n", requireEnv, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "SKIP: no Docker engine: %v (set %s=1 to fail instead)\n", err, requireEnv)
		return m.Run()
	}
	defer cli.Close()
	engine.cli = cli
	tag, err := testimage.Build(ctx, cli, "testdata/testdaemon", engine.run)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: building the test image: %v\n", err)
		return 1
	}
	engine.image = tag
	code := m.Run()

	// Sweep: every test removes what it made; anything left is a bug.
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	left, err := cli.ContainerList(cctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", runLabel+"="+engine.run))})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: listing leftover containers: %v\n", err)
		code = 1
	}
	for _, c := range left {
		fmt.Fprintf(os.Stderr, "FAIL: container %s %v left behind\n", c.ID[:12], c.Names)
		_ = cli.ContainerRemove(cctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		code = 1
	}
	if err := testimage.Remove(cctx, cli, tag); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		code = 1
	}
	return code
}

// needEngine skips (or, with EVERYNODE_REQUIRE_DOCKER=1, fails: TestMain
// already did) a test that needs the engine.
func needEngine(t *testing.T) {
	t.Helper()
	if engine.cli == nil {
		t.Skip("SKIP: no Docker engine: " + engine.skipWhy)
	}
}

// newRuntime returns a Runtime for a node unique to this run.
func newRuntime(t *testing.T, node string) *Runtime {
	t.Helper()
	needEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := New(ctx, Config{NodeName: node + "-" + engine.run})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// testSpec is a container of pod ns/pod running the test image with args.
func testSpec(r *Runtime, pod, name string, args ...string) runtime.ContainerSpec {
	return runtime.ContainerSpec{
		Name:  name,
		Image: engine.image,
		Args:  args,
		Labels: map[string]string{
			runtime.LabelNode:         r.node,
			runtime.LabelPodNamespace: "default",
			runtime.LabelPodName:      pod,
			runtime.LabelPodUID:       "uid-" + pod,
			runtime.LabelContainer:    name,
			runtime.LabelAttempt:      "0",
			runLabel:                  engine.run,
		},
	}
}

// create creates spec and removes the container when the test ends.
func create(t *testing.T, r *Runtime, spec runtime.ContainerSpec) string {
	t.Helper()
	id, err := r.CreateContainer(ctxT(t), spec)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.RemoveContainer(ctx, id); err != nil {
			t.Errorf("cleanup: RemoveContainer %s: %v", id, err)
		}
	})
	return id
}

// run creates and starts spec.
func run(t *testing.T, r *Runtime, spec runtime.ContainerSpec) string {
	t.Helper()
	id := create(t, r, spec)
	if err := r.StartContainer(ctxT(t), id); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return id
}

// ctxT is a context bounded by a short deadline and the test.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitState polls the real engine until the container reaches want.
func waitState(t *testing.T, r *Runtime, id string, want runtime.State) runtime.ContainerStatus {
	t.Helper()
	var st runtime.ContainerStatus
	testkit.Eventually(t, 20*time.Second, func() error {
		var err error
		if st, err = r.ContainerStatus(ctxT(t), id); err != nil {
			t.Fatalf("ContainerStatus: %v", err)
		}
		if st.State != want {
			return fmt.Errorf("container %s is %s, want %s", id, st.State, want)
		}
		return nil
	})
	return st
}
