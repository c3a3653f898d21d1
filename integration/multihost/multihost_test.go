// Package multihost_test runs everynode as separate hosts would: a server
// and three agents as containers on a private Docker network, each agent
// driving the host's Docker engine through its mounted socket. It kills an
// agent (docker kill) and cuts another off (docker network disconnect), and
// checks what the rest of the cluster sees and that the daemons themselves
// are left alone.
//
// It builds everything it runs: a static bin/everynode in an image FROM
// scratch, and the example daemon's image (no registry is used). Without a
// Docker engine it is skipped with a loud SKIP line; with
// EVERYNODE_REQUIRE_DOCKER=1 a missing engine fails it. Every container,
// network and image it makes carries the run's unique name or label and is
// removed at cleanup, also on failure. Traffic stays on the private network
// and loopback (the API port is published on 127.0.0.1 only).
package multihost_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

const (
	// mhRequireEnv set to "1" turns a missing engine into a failure.
	mhRequireEnv = "EVERYNODE_REQUIRE_DOCKER"
	// mhRunLabel marks everything one run creates.
	mhRunLabel = "everynode-test.run"
	// mhNodeLabel is the Docker runtime's node label on pod containers.
	mhNodeLabel = "everynode.io/node"
	// mhWait bounds one convergence (pods running, a node's condition).
	mhWait = 90 * time.Second
)

// mhEnv is one run's cluster of containers.
type mhEnv struct {
	t        *testing.T
	ctx      context.Context
	run      string // unique run id, in every name
	dir      string // shared data dir, the same path on the host and in the containers
	bin      string // the static everynode built for the run
	image    string // everynode image
	daemon   string // example daemon image
	network  string
	subnet   string // 10.x.y.0/24
	server   string // server container name
	agents   []string
	nodes    []string // node names of the agents, same order
	ips      []string // fixed agent IPs, same order
	kubecfg  string   // host kubeconfig (127.0.0.1:<published port>)
	api      *client.HTTP
	dockerOK bool
	// logContainers are more containers whose logs a failure shows.
	logContainers []string
	// stopCtx, when set, ends a ctx given to cleanup alone.
	stopCtx context.CancelFunc
}

// mhDocker runs the docker CLI, bounded, and returns its trimmed stdout.
func (e *mhEnv) docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func (e *mhEnv) mustDocker(args ...string) string {
	e.t.Helper()
	out, err := e.docker(args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// mhRunID is a short random id.
func mhRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// mhModuleRoot is the repository root (where go.mod is).
func mhModuleRoot(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// newMHEnv checks the engine (skip or fail), builds the everynode binary
// and image (withServer) and the example daemon's image, and prepares
// cleanup. It starts no container.
func newMHEnv(t *testing.T, withServer bool) *mhEnv {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	e := &mhEnv{t: t, ctx: ctx, run: mhRunID()}
	if _, err := e.docker("version", "--format", "{{.Server.Version}}"); err != nil {
		if os.Getenv(mhRequireEnv) == "1" {
			t.Fatalf("FAIL: no Docker engine and %s=1: %v", mhRequireEnv, err)
		}
		fmt.Fprintf(os.Stderr, "SKIP: multi-host test needs a Docker engine: %v (set %s=1 to fail instead)\n", err, mhRequireEnv)
		t.Skipf("SKIP: no Docker engine: %v", err)
	}
	e.dockerOK = true
	// Data dir: an absolute path mounted at the same path in every
	// container (hostPath and emptyDir volumes resolve on the engine's host).
	dir, err := os.MkdirTemp("", "everynode-mh-"+e.run+"-")
	if err != nil {
		t.Fatal(err)
	}
	e.dir = dir
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	t.Cleanup(e.cleanup) // runs first: containers before the data dir

	root := mhModuleRoot(t)
	build := filepath.Join(dir, "build")
	type target struct{ pkg, out string }
	targets := []target{{"./examples/daemon", filepath.Join(build, "daemon", "daemon")}}
	if withServer {
		targets = append(targets, target{"./cmd/everynode", filepath.Join(build, "everynode", "everynode")})
	}
	for _, b := range targets {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", b.out, b.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	type image struct{ tag, dir, dockerfile string }
	e.daemon = "everynode-mh-" + e.run + "/daemon:v1"
	images := []image{{e.daemon, filepath.Join(build, "daemon"), "FROM scratch\nENV DAEMON_VERSION=v1\nCOPY daemon /daemon\nENTRYPOINT [\"/daemon\"]\n"}}
	if withServer {
		e.bin = filepath.Join(build, "everynode", "everynode")
		e.image = "everynode-mh-" + e.run + ":dev"
		images = append(images, image{e.image, filepath.Join(build, "everynode"), "FROM scratch\nCOPY everynode /everynode\nENTRYPOINT [\"/everynode\"]\n"})
	}
	for _, img := range images {
		if err := os.WriteFile(filepath.Join(img.dir, "Dockerfile"), []byte(img.dockerfile), 0o644); err != nil {
			t.Fatal(err)
		}
		e.mustDocker("build", "-q", "--label", mhRunLabel+"="+e.run, "-t", img.tag, img.dir)
	}
	return e
}

// cleanup removes every container, network and image of the run, logging
// (not failing) what it could not remove.
func (e *mhEnv) cleanup() {
	if !e.dockerOK {
		return
	}
	if e.t.Failed() {
		e.dumpLogs()
	}
	var ids []string
	if out, err := e.docker("ps", "-aq", "--filter", "label="+mhRunLabel+"="+e.run); err == nil && out != "" {
		ids = append(ids, strings.Fields(out)...)
	}
	for _, n := range e.nodes {
		if out, err := e.docker("ps", "-aq", "--filter", "label="+mhNodeLabel+"="+n); err == nil && out != "" {
			ids = append(ids, strings.Fields(out)...)
		}
	}
	// The daemon containers carry both labels (images pass theirs on).
	sort.Strings(ids)
	ids = slices.Compact(ids)
	if len(ids) > 0 {
		if _, err := e.docker(append([]string{"rm", "-f", "-v"}, ids...)...); err != nil {
			e.t.Logf("cleanup: %v", err)
		}
	}
	if e.network != "" {
		if _, err := e.docker("network", "rm", e.network); err != nil {
			e.t.Logf("cleanup: %v", err)
		}
	}
	for _, img := range []string{e.image, e.daemon} {
		if img != "" {
			if _, err := e.docker("rmi", "-f", img); err != nil {
				e.t.Logf("cleanup: %v", err)
			}
		}
	}
	if e.api != nil {
		e.api.Close()
	}
	if e.stopCtx != nil {
		e.stopCtx()
	}
}

// dumpLogs prints the last lines of the server's and agents' logs.
func (e *mhEnv) dumpLogs() {
	for _, c := range append(append([]string{e.server}, e.logContainers...), e.agents...) {
		if c == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, _ := exec.CommandContext(ctx, "docker", "logs", "--tail", "40", c).CombinedOutput()
		cancel()
		e.t.Logf("--- docker logs %s ---\n%s", c, out)
	}
}

// startNetwork creates the run's network on a free 10.x.y.0/24 subnet, so
// the agents keep fixed addresses across a disconnect.
func (e *mhEnv) startNetwork() {
	e.t.Helper()
	e.network = "everynode-mh-" + e.run
	var last error
	for range 8 {
		x, _ := rand.Int(rand.Reader, big.NewInt(200))
		y, _ := rand.Int(rand.Reader, big.NewInt(250))
		e.subnet = fmt.Sprintf("10.%d.%d.0/24", 20+x.Int64(), y.Int64()+1)
		if _, last = e.docker("network", "create", "--label", mhRunLabel+"="+e.run, "--subnet", e.subnet, e.network); last == nil {
			return
		}
	}
	e.network = ""
	e.t.Fatalf("no free subnet for the test network: %v", last)
}

// ip is host number n on the run's subnet.
func (e *mhEnv) ip(n int) string {
	return strings.TrimSuffix(e.subnet, "0/24") + fmt.Sprint(n)
}

// startServer runs the server container and waits for its kubeconfig.
func (e *mhEnv) startServer() {
	e.t.Helper()
	e.server = "everynode-mh-" + e.run + "-server"
	e.mustDocker("run", "-d", "--name", e.server, "--label", mhRunLabel+"="+e.run,
		"--network", e.network, "--ip", e.ip(10), "-p", "127.0.0.1::6443",
		"-v", e.dir+":"+e.dir, e.image,
		"server", "--no-agent", "--data-dir", e.dir+"/server", "--listen", "0.0.0.0:6443",
		"--tls-san", e.server, "--gossip-profile", "lan")
	port := e.mustDocker("port", e.server, "6443/tcp")
	port = strings.Fields(port)[0] // "127.0.0.1:49153"
	src := filepath.Join(e.dir, "server", "admin.kubeconfig")
	mhEventually(e.t, mhWait, "the server's admin.kubeconfig", func() error {
		if fi, err := os.Stat(src); err != nil || fi.Size() == 0 {
			return fmt.Errorf("no %s yet", src)
		}
		return nil
	})
	data, err := os.ReadFile(src)
	if err != nil {
		e.t.Fatal(err)
	}
	data = regexp.MustCompile(`server: https://\S+`).ReplaceAll(data, []byte("server: https://"+port))
	e.kubecfg = filepath.Join(e.dir, "host.kubeconfig")
	if err := os.WriteFile(e.kubecfg, data, 0o600); err != nil {
		e.t.Fatal(err)
	}
	cfg, err := client.LoadKubeconfigFrom([]string{e.kubecfg})
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	cfg.ResourceFor = resources.ForObject
	if e.api, err = client.NewHTTP(cfg); err != nil {
		e.t.Fatal(err)
	}
}

// startAgents runs n agent containers with fixed IPs and the host's socket.
func (e *mhEnv) startAgents(n int) {
	e.t.Helper()
	token, err := os.ReadFile(filepath.Join(e.dir, "server", "join-token"))
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range n {
		name := fmt.Sprintf("everynode-mh-%s-agent%d", e.run, i+1)
		node := fmt.Sprintf("mh-%s-n%d", e.run, i+1)
		ip := e.ip(20 + i)
		e.agents, e.nodes, e.ips = append(e.agents, name), append(e.nodes, node), append(e.ips, ip)
		e.mustDocker("run", "-d", "--name", name, "--label", mhRunLabel+"="+e.run,
			"--network", e.network, "--ip", ip,
			"-v", "/var/run/docker.sock:/var/run/docker.sock", "-v", e.dir+":"+e.dir, e.image,
			"agent", "--server", "https://"+e.server+":6443", "--token", strings.TrimSpace(string(token)),
			"--name", node, "--runtime", "docker", "--data-dir", fmt.Sprintf("%s/agent%d", e.dir, i+1),
			"--gossip-profile", "lan")
	}
}

// everynode runs the CLI built for the run against the host kubeconfig.
func (e *mhEnv) everynode(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, append(args, "--kubeconfig", e.kubecfg)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mhEventually is testkit.Eventually with what named in the failure; it
// returns how long fn took to hold.
func mhEventually(t *testing.T, timeout time.Duration, what string, fn func() error) time.Duration {
	t.Helper()
	start := time.Now()
	testkit.Eventually(t, timeout, func() error {
		if err := fn(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
	return time.Since(start)
}

func (e *mhEnv) node(name string) (*corev1.Node, error) {
	obj, err := e.api.Get(e.ctx, resources.Nodes, "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Node), nil
}

func nodeReadyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// readyIs returns a poll function: nil once node's Ready condition is (or,
// with not, is no longer) True.
func (e *mhEnv) readyIs(node string, ready bool) func() error {
	return func() error {
		n, err := e.node(node)
		if err != nil {
			return err
		}
		if st := nodeReadyStatus(n); (st == corev1.ConditionTrue) != ready {
			return fmt.Errorf("node %s Ready=%s", node, st)
		}
		return nil
	}
}

// dsPods lists the pods of the run's DaemonSet by node.
func (e *mhEnv) dsPods() (map[string][]*corev1.Pod, error) {
	items, _, err := e.api.List(e.ctx, resources.Pods, "default", client.ListOptions{LabelSelector: "app=mh-daemon"})
	if err != nil {
		return nil, err
	}
	out := map[string][]*corev1.Pod{}
	for _, it := range items {
		p := it.(*corev1.Pod)
		out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p)
	}
	return out, nil
}

// allRunning is nil when every agent's node runs exactly one Running pod of
// the DaemonSet.
func (e *mhEnv) allRunning() (map[string]*corev1.Pod, error) {
	byNode, err := e.dsPods()
	if err != nil {
		return nil, err
	}
	out := map[string]*corev1.Pod{}
	for _, n := range e.nodes {
		ps := byNode[n]
		if len(ps) != 1 {
			return nil, fmt.Errorf("node %s has %d pods", n, len(ps))
		}
		if ps[0].Status.Phase != corev1.PodRunning {
			return nil, fmt.Errorf("pod %s on %s is %s", ps[0].Name, n, ps[0].Status.Phase)
		}
		out[n] = ps[0]
	}
	if len(byNode) != len(e.nodes) {
		return nil, fmt.Errorf("pods on %d nodes, want %d", len(byNode), len(e.nodes))
	}
	return out, nil
}

// daemonContainer is the Docker state of the run's daemon container on node:
// its ID, whether it runs and its engine restart count.
func (e *mhEnv) daemonContainer(node string) (id string, running bool) {
	e.t.Helper()
	ids := strings.Fields(e.mustDocker("ps", "-aq", "--filter", "label="+mhNodeLabel+"="+node))
	if len(ids) != 1 {
		e.t.Fatalf("node %s: %d daemon containers, want 1", node, len(ids))
	}
	out := e.mustDocker("inspect", "-f", "{{.Id}} {{.State.Running}}", ids[0])
	f := strings.Fields(out)
	return f[0], f[1] == "true"
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

const mhDaemonSet = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: mh-daemon
  namespace: default
spec:
  selector:
    matchLabels: {app: mh-daemon}
  template:
    metadata:
      labels: {app: mh-daemon}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: daemon
        image: %s
        imagePullPolicy: IfNotPresent
        args: ["-every", "1s"]
        env:
        - name: NODE_NAME
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
`

func TestMultihost(t *testing.T) {
	e := newMHEnv(t, true)
	e.startNetwork()
	e.startServer()
	e.startAgents(3)
	for _, n := range e.nodes {
		mhEventually(t, mhWait, "node "+n+" Ready", e.readyIs(n, true))
	}

	manifest := filepath.Join(e.dir, "ds.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(mhDaemonSet, e.daemon)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := e.everynode("apply", "-f", manifest); err != nil {
		t.Fatalf("everynode apply: %v\n%s", err, out)
	}
	var before map[string]*corev1.Pod
	took := mhEventually(t, mhWait, "3 daemon pods Running", func() (err error) {
		before, err = e.allRunning()
		return err
	})
	t.Logf("3 pods Running %s after apply", took.Round(time.Millisecond))
	containers := map[string]string{}
	for _, n := range e.nodes {
		id, running := e.daemonContainer(n)
		if !running {
			t.Fatalf("daemon container of %s not running", n)
		}
		containers[n] = id
	}

	t.Run("logs", func(t *testing.T) { e.checkLogs(t, e.nodes[2], before[e.nodes[2]]) })

	// docker kill: the agent dies without a word; gossip notices.
	killed := e.nodes[0]
	start := time.Now()
	e.mustDocker("kill", e.agents[0])
	mhEventually(t, mhWait, "killed node "+killed+" not Ready", e.readyIs(killed, false))
	t.Logf("MEASURED: docker kill of %s → Node not Ready after %s", e.agents[0], time.Since(start).Round(time.Millisecond))

	// docker network disconnect: the agent lives on, cut off; its daemon
	// keeps running.
	cut, cutAgent := e.nodes[1], e.agents[1]
	start = time.Now()
	e.mustDocker("network", "disconnect", e.network, cutAgent)
	mhEventually(t, mhWait, "cut-off node "+cut+" not Ready", e.readyIs(cut, false))
	t.Logf("MEASURED: docker network disconnect of %s → Node not Ready after %s", cutAgent, time.Since(start).Round(time.Millisecond))
	if id, running := e.daemonContainer(cut); id != containers[cut] || !running {
		t.Errorf("cut-off node's daemon container: %s running=%v, want %s running", id, running, containers[cut])
	}
	start = time.Now()
	e.mustDocker("network", "connect", "--ip", e.ips[1], e.network, cutAgent)
	mhEventually(t, mhWait, "reconnected node "+cut+" Ready", e.readyIs(cut, true))
	t.Logf("MEASURED: docker network connect of %s → Node Ready again after %s", cutAgent, time.Since(start).Round(time.Millisecond))

	// Nothing was replaced or restarted: the same pods (uids), one per node,
	// the same containers, restart counts unchanged.
	byNode, err := e.dsPods()
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for n := range byNode {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	if len(nodes) != 3 {
		t.Errorf("pods on nodes %v, want %v", nodes, e.nodes)
	}
	for _, n := range e.nodes {
		ps := byNode[n]
		if len(ps) != 1 {
			t.Errorf("node %s: %d pods after the outages, want 1", n, len(ps))
			continue
		}
		if ps[0].UID != before[n].UID {
			t.Errorf("node %s: pod %s (%s), want the same pod %s (%s)", n, ps[0].Name, ps[0].UID, before[n].Name, before[n].UID)
		}
		if n != killed && restarts(ps[0]) != restarts(before[n]) {
			t.Errorf("node %s: restartCount %d, was %d", n, restarts(ps[0]), restarts(before[n]))
		}
		if id, running := e.daemonContainer(n); id != containers[n] || !running {
			t.Errorf("node %s: daemon container %s running=%v, want %s still running", n, id, running, containers[n])
		}
	}
	if p := byNode[cut]; len(p) == 1 && p[0].Status.Phase != corev1.PodRunning {
		t.Errorf("reconnected node's pod is %s", p[0].Status.Phase)
	}
}

// checkLogs reads a pod's output through the API with the CLI, then follows
// it and sees new lines arrive as the daemon writes them.
func (e *mhEnv) checkLogs(t *testing.T, node string, pod *corev1.Pod) {
	n, err := e.node(node)
	if err != nil {
		t.Fatal(err)
	}
	if n.Status.DaemonEndpoints.KubeletEndpoint.Port == 0 {
		t.Fatalf("node %s publishes no log port (status.daemonEndpoints.kubeletEndpoint)", node)
	}
	out, err := e.everynode("logs", pod.Name, "--tail", "3")
	if err != nil || !strings.Contains(out, "node="+node) {
		t.Fatalf("everynode logs %s: %v\n%s", pod.Name, err, out)
	}

	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, "logs", "-f", "--tail", "1", pod.Name, "--kubeconfig", e.kubecfg)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	sc := bufio.NewScanner(stdout)
	uptimes := map[string]bool{}
	for len(uptimes) < 3 && sc.Scan() {
		line := sc.Text()
		if m := regexp.MustCompile(`uptime=(\S+)`).FindStringSubmatch(line); m != nil {
			uptimes[m[1]] = true
		}
	}
	if len(uptimes) < 3 {
		t.Fatalf("logs -f: %d distinct lines before the stream ended (%v): %s", len(uptimes), sc.Err(), stderr.String())
	}
	t.Logf("logs -f of %s streamed new lines: %v", pod.Name, uptimes)
}
