package agenttest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/agent"
	enclient "github.com/everynode/everynode/client"
	clientfake "github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/nodeagent/runtime"
	"github.com/everynode/everynode/nodeagent/runtime/docker"
	"github.com/everynode/everynode/nodeagent/runtime/docker/internal/testimage"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/server"
)

// engine is what TestMain found: set before any test runs, read-only after.
var engine struct {
	cli     *client.Client
	skipWhy string
	image   string
	run     string
}

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	engine.run = testimage.RunID()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := testimage.Connect(ctx)
	if err != nil {
		engine.skipWhy = err.Error()
		if os.Getenv(testimage.RequireEnv) == "1" {
			fmt.Fprintf(os.Stderr, "FAIL: no Docker engine and %s=1: %v\n", testimage.RequireEnv, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "SKIP: no Docker engine: %v (set %s=1 to fail instead)\n", err, testimage.RequireEnv)
		return m.Run()
	}
	defer cli.Close()
	engine.cli = cli
	if engine.image, err = testimage.Build(ctx, cli, "../testdata/testdaemon", engine.run); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	code := m.Run()

	// Every test removes its node's containers; anything left is a bug.
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	all, err := cli.ContainerList(cctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", runtime.LabelNode))})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: listing leftover containers: %v\n", err)
		code = 1
	}
	for _, c := range all {
		if strings.HasPrefix(c.Labels[runtime.LabelNode], nodePrefix()) {
			fmt.Fprintf(os.Stderr, "FAIL: container %s %v left behind\n", c.ID[:12], c.Names)
			_ = cli.ContainerRemove(cctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			code = 1
		}
	}
	if err := testimage.Remove(cctx, cli, engine.image); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		code = 1
	}
	return code
}

func nodePrefix() string { return "agenttest-" + engine.run + "-" }

// node is one agent on the engine with its API.
type node struct {
	t    testing.TB
	name string
	api  *clientfake.Client
	rt   *docker.Runtime
	logs *testkit.Buffer
}

// newNode makes a node name unique to this run and removes every container
// of it when the test ends.
func newNode(t testing.TB, name string, api *clientfake.Client) *node {
	t.Helper()
	if engine.cli == nil {
		t.Skip("SKIP: no Docker engine: " + engine.skipWhy)
	}
	n := &node{t: t, name: nodePrefix() + name, api: api, logs: &testkit.Buffer{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt, err := docker.New(ctx, docker.Config{NodeName: n.name, Logger: n.logger()})
	if err != nil {
		t.Fatal(err)
	}
	n.rt = rt
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		list, err := rt.ListContainers(ctx, nil)
		if err != nil {
			t.Errorf("cleanup: list: %v", err)
		}
		for _, c := range list {
			if err := rt.RemoveContainer(ctx, c.ID); err != nil {
				t.Errorf("cleanup: remove %s: %v", c.ID, err)
			}
		}
		rt.Close()
		if t.Failed() {
			t.Logf("logs of node %s:\n%s", n.name, n.logs.String())
		}
	})
	return n
}

func (n *node) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// start runs an agent for the node until the returned stop is called (or the
// test ends). source nil: the API's pods.
func (n *node) start(source nodeagent.PodSource) (*nodeagent.Agent, func()) {
	n.t.Helper()
	return n.run(nodeagent.Config{Client: n.api, DataDir: n.t.TempDir(), Source: source}, true)
}

// run runs an agent with cfg, given the node's name, IP, runtime and logger
// and short relist and resync periods, until the returned stop is called (or
// the test ends). With checkRun, an error from Run fails the test.
func (n *node) run(cfg nodeagent.Config, checkRun bool) (*nodeagent.Agent, func()) {
	n.t.Helper()
	cfg.NodeName, cfg.NodeIP, cfg.Runtime, cfg.Logger = n.name, "127.0.0.1", n.rt, n.logger()
	cfg.RelistPeriod, cfg.ResyncPeriod = 200*time.Millisecond, time.Second
	a, err := nodeagent.New(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if checkRun && err != nil {
					n.t.Errorf("agent %s: Run: %v", n.name, err)
				}
			case <-time.After(30 * time.Second):
				n.t.Errorf("agent %s did not stop", n.name)
			}
		})
	}
	n.t.Cleanup(stop)
	return a, stop
}

// pod is a one-container pod on the node running the test daemon with args.
func (n *node) pod(name string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(n.name + "-" + name)},
		Spec: corev1.PodSpec{
			NodeName:      n.name,
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{
				Name: "app", Image: engine.image, Args: args, ImagePullPolicy: corev1.PullIfNotPresent,
			}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func (n *node) seed(p *corev1.Pod) {
	n.t.Helper()
	if err := n.api.Seed(p); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) get(name string) *corev1.Pod {
	n.t.Helper()
	o, err := n.api.Get(context.Background(), resources.Pods, "default", name)
	if err != nil {
		n.t.Fatalf("get pod %s: %v", name, err)
	}
	return o.(*corev1.Pod)
}

// wait polls the pod (a real asynchronous system) until cond holds. A pod
// not found yet is waited for too: a static pod's mirror is published only
// once the agent has registered its Node.
func (n *node) wait(name, what string, within time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	n.t.Helper()
	var p *corev1.Pod
	testkit.Eventually(n.t, within, func() error {
		o, err := n.api.Get(context.Background(), resources.Pods, "default", name)
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s: waiting for %s: %w", name, what, err)
		}
		if err != nil {
			n.t.Fatalf("get pod %s: %v", name, err)
		}
		if p = o.(*corev1.Pod); !cond(p) {
			return fmt.Errorf("pod %s: waiting for %s; status: %+v", name, what, p.Status)
		}
		return nil
	})
	return p
}

// containers lists the node's containers of the pod on the engine.
func (n *node) containers(p *corev1.Pod) []runtime.Container {
	n.t.Helper()
	l, err := n.rt.ListContainers(context.Background(), runtime.Labels{runtime.LabelPodUID: string(p.UID)})
	if err != nil {
		n.t.Fatal(err)
	}
	return l
}

func running(p *corev1.Pod) bool {
	return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
}

func waitingReason(p *corev1.Pod) string {
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil {
		return ""
	}
	return p.Status.ContainerStatuses[0].State.Waiting.Reason
}

// startServer runs a whole server whose local agent is node n on the
// engine, stopped when the test ends, and returns it with an admin client
// once n's Node is registered (a pod bound to a Node not registered yet is
// deleted by the pod GC).
func (n *node) startServer() (*server.Server, *enclient.HTTP) {
	n.t.Helper()
	t, ctx := n.t, context.Background()
	s, err := server.Start(ctx, server.Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", CompactInterval: -1,
		Logger: slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Gossip: agent.GossipOptions{Addr: "127.0.0.1:0", Profile: gossip.ProfileLocal, LeaveOnStop: true},
		Agent:  &agent.NodeOptions{Name: n.name, IP: "127.0.0.1", Runtime: agent.RuntimeDocker, LogListen: "127.0.0.1:0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cfg, err := enclient.LoadKubeconfigFrom([]string{s.Kubeconfig()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.ResourceFor = resources.ForObject // RBAC kinds and DaemonSets, not only core/v1
	admin, err := enclient.NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	testkit.Eventually(t, 30*time.Second, func() error {
		_, err := admin.Get(ctx, resources.Nodes, "", n.name)
		return err
	})
	return s, admin
}
