package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/nodeagent/runtime"
	"github.com/everynode/everynode/nodeagent/runtime/docker"
	"github.com/everynode/everynode/rollout"
)

// The safe-rollout session of docs/rollouts.md §11 on a real Docker engine:
// the real server and controllers in process, three node agents driving the
// engine through the Docker runtime, the example daemon's images built from
// examples/daemon, and every step done by the everynode binary as a user
// types it.

const (
	// dockerRequireEnv set to "1" turns a missing engine into a failure.
	dockerRequireEnv = "EVERYNODE_REQUIRE_DOCKER"
	// dockerRunLabel marks the images one run builds.
	dockerRunLabel = "everynode-test.run"
	// dockerWait bounds one convergence on the engine (containers created,
	// started, stopped and removed on a loaded machine).
	dockerWait = 2 * time.Minute
)

// requireDocker is a client of the environment's engine once it answers;
// without one the test is skipped loudly (EVERYNODE_REQUIRE_DOCKER=1 makes
// that a failure).
func requireDocker(t *testing.T) *dockerclient.Client {
	t.Helper()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err == nil {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err = cli.Ping(ctx)
		cancel()
		if err != nil {
			cli.Close()
		}
	}
	if err != nil {
		if os.Getenv(dockerRequireEnv) == "1" {
			t.Fatalf("a Docker engine is required (%s=1) but does not answer: %v", dockerRequireEnv, err)
		}
		t.Skipf("SKIPPING: no Docker engine (%v); set %s=1 to fail instead", err, dockerRequireEnv)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// exampleImages builds the example daemon as `make images` does — the
// static binary in examples/daemon's Dockerfile, VERSION v1 and v2 — and v3,
// v2 with a default command that cannot listen (the process exits 1 at
// once), all as repo:TAG, labelled with run and removed when the test ends.
func exampleImages(t *testing.T, cli *dockerclient.Client, repo, run string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "daemon")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "github.com/everynode/everynode/examples/daemon")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build examples/daemon: %v\n%s", err, out)
	}
	binData, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	dockerfile, err := os.ReadFile(filepath.Join("..", "examples", "daemon", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, tag := range []string{"v3", "v2", "v1"} {
			if _, err := cli.ImageRemove(ctx, repo+":"+tag, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil && !strings.Contains(err.Error(), "No such image") {
				t.Errorf("remove image %s:%s: %v", repo, tag, err)
			}
		}
	})
	for _, version := range []string{"v1", "v2"} {
		dockerBuild(t, cli, repo+":"+version, run, map[string]string{"VERSION": version},
			map[string][]byte{"Dockerfile": dockerfile, "bin/daemon": binData})
	}
	dockerBuild(t, cli, repo+":v3", run, nil, map[string][]byte{
		"Dockerfile": fmt.Appendf(nil, "FROM %s:v2\nCMD [\"-listen\", \"no-such-address\"]\n", repo)})
}

// dockerBuild builds the context files (executable when under bin/) into tag.
func dockerBuild(t *testing.T, cli *dockerclient.Client, tag, run string, args map[string]string, files map[string][]byte) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, data := range files {
		mode := int64(0o644)
		if strings.HasPrefix(name, "bin/") {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	buildArgs := map[string]*string{}
	for k, v := range args {
		buildArgs[k] = &v
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	resp, err := cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{
		Tags: []string{tag}, BuildArgs: buildArgs, Remove: true, ForceRemove: true,
		Labels: map[string]string{dockerRunLabel: run},
	})
	if err != nil {
		t.Fatalf("docker build %s: %v", tag, err)
	}
	defer resp.Body.Close()
	if err := jsonmessage.DisplayJSONMessagesStream(resp.Body, io.Discard, 0, false, nil); err != nil {
		t.Fatalf("docker build %s: %v", tag, err)
	}
}

// startDockerNode runs a node agent on the engine for node name: its pods
// become containers labelled everynode.io/node=name. Every container of the
// node is removed when the test ends.
func (c *cluster) startDockerNode(name string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	rt, err := docker.New(ctx, docker.Config{NodeName: name, Logger: testLogger().With("component", "docker", "node", name)})
	if err != nil {
		c.t.Fatalf("docker runtime for %s: %v", name, err)
	}
	// Cleanups run last first: this one runs before the cluster's, so it
	// stops the agent itself (which would otherwise start the pod's
	// containers again) before removing them.
	c.root.Cleanup(func() {
		defer rt.Close()
		c.stopNode(name)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := rt.ListContainers(ctx, nil)
		if err != nil {
			c.root.Errorf("cleanup: containers of %s: %v", name, err)
		}
		for _, ctr := range list {
			if err := rt.RemoveContainer(ctx, ctr.ID); err != nil {
				c.root.Errorf("cleanup: remove container %s of %s: %v", ctr.ID, name, err)
			}
		}
		if left, err := rt.ListContainers(ctx, nil); err != nil || len(left) > 0 {
			c.root.Errorf("cleanup: containers of %s left behind: %+v %v", name, left, err)
		}
	})
	token := "node-token-" + name
	c.tokens.add(token, apiserver.UserInfo{Name: "system:node:" + name, Groups: []string{"system:nodes"}})
	c.runAgent(nil, nodeagent.Config{
		NodeName:         name,
		NodeIP:           "127.0.0.1",
		Client:           c.httpClient(token),
		Runtime:          rt,
		Logger:           testLogger().With("component", "agent", "node", name),
		DataDir:          c.root.TempDir(),
		RelistPeriod:     100 * time.Millisecond,
		ResyncPeriod:     time.Second,
		NodeStatusPeriod: 5 * time.Second,
	})
}

// nodeContainers lists the engine's containers of node, in every state.
func nodeContainers(ctx context.Context, cli *dockerclient.Client, node string) ([]container.Summary, error) {
	return cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", runtime.LabelNode+"="+node))})
}

// dockerRunning checks on the engine that each node has exactly one
// container, running image; it returns their IDs by node.
func dockerRunning(ctx context.Context, cli *dockerclient.Client, nodes []string, image string) (map[string]string, error) {
	ids := map[string]string{}
	for _, n := range nodes {
		list, err := nodeContainers(ctx, cli, n)
		if err != nil {
			return nil, err
		}
		if len(list) != 1 {
			var seen []string
			for _, ctr := range list {
				seen = append(seen, fmt.Sprintf("%.12s %s %s", ctr.ID, ctr.Image, ctr.State))
			}
			return nil, fmt.Errorf("node %s has %d containers %v, want one", n, len(list), seen)
		}
		if ctr := list[0]; ctr.State != container.StateRunning || ctr.Image != image {
			return nil, fmt.Errorf("node %s: container %.12s %s is %s, want %s running", n, ctr.ID, ctr.Image, ctr.State, image)
		}
		ids[n] = list[0].ID
	}
	return ids, nil
}

// containerDeaths lists the engine's "die" events between since and until
// of containers of the nodes: node, image and exit code of each.
func containerDeaths(ctx context.Context, cli *dockerclient.Client, since, until time.Time, nodes []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stamp := func(t time.Time) string { return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()) }
	msgs, errs := cli.Events(ctx, events.ListOptions{Since: stamp(since), Until: stamp(until),
		Filters: filters.NewArgs(filters.Arg("type", string(events.ContainerEventType)), filters.Arg("event", string(events.ActionDie)))})
	var out []string
	for {
		select {
		case m := <-msgs:
			a := m.Actor.Attributes
			if slices.Contains(nodes, a[runtime.LabelNode]) {
				out = append(out, fmt.Sprintf("%s %s exit %s", a[runtime.LabelNode], a["image"], a["exitCode"]))
			}
		case err := <-errs:
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
	}
}

// TestDockerCanaryPromoteAutoRollback (issue 15, docs/rollouts.md §11): on
// three agents running real containers, examples/auto-rollback.yaml runs v1;
// a canary selector holds v2 on the one labelled node until `rollout
// promote`, and `rollout status` says so; then v3, whose container exits 1
// at once, reaches one node (maxUnavailable 1), crash-loops, and the
// controller rolls the template back to v2 within the progress deadline —
// `rollout status` exits 1 naming the rollback, no ProgressDeadlineExceeded
// is recorded, and on the engine every node runs one v2 container again,
// the two untouched nodes the very containers they ran before. Setting v3
// again is held (BadRevision) and replaces nothing.
func TestDockerCanaryPromoteAutoRollback(t *testing.T) {
	cli := requireDocker(t)
	run := randomRun(t)
	repo := "everynode-rollback-" + run + "/daemon"
	exampleImages(t, cli, repo, run)
	bin := buildEverynode(t)

	c := newCluster(t, 0)
	nodes := []string{"rb" + run + "-edge-1", "rb" + run + "-edge-2", "rb" + run + "-edge-3"}
	for _, n := range nodes {
		c.startDockerNode(n)
	}
	for _, n := range nodes {
		c.waitNode(n)
	}
	k := &kfTool{t: t, name: "everynode", bin: bin, env: []string{"KUBECONFIG=" + kfKubeconfig(t, c)}}
	ctx := t.Context()
	const name, sel = "guarded-daemon", "app=guarded-daemon"
	v1, v2, v3 := repo+":v1", repo+":v2", repo+":v3"

	example, err := os.ReadFile(filepath.Join("..", "examples", "auto-rollback.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.ReplaceAll(string(example), "everynode-example/daemon:", repo+":")
	if !strings.Contains(manifest, "image: "+v1) {
		t.Fatalf("examples/auto-rollback.yaml does not run everynode-example/daemon:v1:\n%s", example)
	}
	k.ok("apply", "-f", writeFile(t, "auto-rollback.yaml", manifest))
	kfWantLastLine(t, k.ok("rollout", "status", "ds/"+name, "--timeout=80s"), `daemon set "guarded-daemon" successfully rolled out`)
	waitFullyAvailable := func(hash string) {
		t.Helper()
		eventually(t, dockerWait, func() error {
			for _, cr := range c.revisions(sel) {
				if cr.Labels[hashLabel] == hash && cr.Annotations[rollout.FullyAvailable] != "" {
					return nil
				}
			}
			return fmt.Errorf("revision %s not marked %s yet", hash, rollout.FullyAvailable)
		})
	}
	hash1 := c.currentRevision(name, sel).Labels[hashLabel]
	waitFullyAvailable(hash1)
	var onV1 map[string]string
	eventually(t, dockerWait, func() (err error) { onV1, err = dockerRunning(ctx, cli, nodes, v1); return err })

	// Canary: only the labelled node gets v2, and `rollout status` is done
	// when its pod is available, waiting for promote.
	canary := nodes[0]
	k.ok("label", "node", canary, "canary=true")
	k.ok("annotate", "ds/"+name, "rollout.everynode.io/canary-selector=canary=true")
	k.ok("set", "image", "ds/"+name, "daemon="+v2)
	kfWantLastLine(t, k.ok("rollout", "status", "ds/"+name, "--timeout=80s"), "canary: 1/1 updated and ready; waiting for promote")
	hash2 := c.currentRevision(name, sel).Labels[hashLabel]
	if err := c.wantRevisions(name, map[string]string{canary: hash2, nodes[1]: hash1, nodes[2]: hash1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, dockerWait, func() error {
		if _, err := dockerRunning(ctx, cli, nodes[:1], v2); err != nil {
			return err
		}
		got, err := dockerRunning(ctx, cli, nodes[1:], v1)
		for _, n := range nodes[1:] {
			if err == nil && got[n] != onV1[n] {
				err = fmt.Errorf("node %s outside the canary runs container %.12s, want %.12s untouched", n, got[n], onV1[n])
			}
		}
		return err
	})
	c.waitEvents(name, rollout.ReasonWaitingForPromote, 1)

	// Promote: the rest follow, one node at a time.
	kfWant(t, k.ok("rollout", "promote", "ds/"+name), "daemonset.apps/guarded-daemon promoted")
	kfWantLastLine(t, k.ok("rollout", "status", "ds/"+name, "--timeout=80s"), `daemon set "guarded-daemon" successfully rolled out`)
	waitFullyAvailable(hash2)
	var onV2 map[string]string
	eventually(t, dockerWait, func() (err error) { onV2, err = dockerRunning(ctx, cli, nodes, v2); return err })

	// The bad image: its container exits 1 at once. One node gets it
	// (maxUnavailable 1), the pod crash-loops, and the controller rolls back
	// to v2 long before the 60 s deadline.
	badAt := time.Now()
	k.ok("set", "image", "ds/"+name, "daemon="+v3)
	stderr := k.fails("rollout", "status", "ds/"+name, "--timeout=80s")
	kfWant(t, stderr, `error: daemon set "guarded-daemon" rollout failed and was rolled back automatically (RolledBack): rolled back to revision 2 (guarded-daemon-`+hash2+`): revision 3 (guarded-daemon-`)
	kfWant(t, stderr, "failed: 1 updated pods failing (threshold 1): pod guarded-daemon-")
	kfWant(t, stderr, ": container daemon: CrashLoopBackOff; fix the template and apply it again")
	t.Logf("rolled back %s after the bad image was set", time.Since(badAt).Round(100*time.Millisecond))
	ds := c.getDS(name)
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != v2 {
		t.Fatalf("template image after the rollback: %s, want %s", img, v2)
	}
	bad := ds.Annotations[rollout.BadRevision]
	if bad == "" || bad == hash2 || !strings.Contains(stderr, "(guarded-daemon-"+bad+") failed") {
		t.Fatalf("bad-revision %q; rollout status said %q", bad, stderr)
	}
	if cond := c.progressing(name); cond.Status != "False" || cond.Reason != rollout.ReasonRolledBack {
		t.Fatalf("Progressing condition %+v, want False RolledBack", cond)
	}
	c.waitEvents(name, rollout.ReasonRolledBack, 1)
	kfWant(t, k.ok("get", "ds", name, "-o", "wide"), " "+v2+" ")
	kfWant(t, k.ok("describe", "ds", name), "Warning  RolledBack")
	if n := c.events(name, rollout.ReasonProgressDeadlineExceeded); n != 0 {
		t.Fatalf("%d ProgressDeadlineExceeded events: the deadline, not the crash, ended the update", n)
	}

	// Back on v2 everywhere, in the API and on the engine; the nodes v3
	// never reached keep the containers they ran.
	eventually(t, dockerWait, func() error {
		_, err := c.onePodPerNode(sel, nodes, hash2)
		return err
	})
	var after map[string]string
	eventually(t, dockerWait, func() (err error) { after, err = dockerRunning(ctx, cli, nodes, v2); return err })
	deaths, err := containerDeaths(ctx, cli, badAt, time.Now(), nodes)
	if err != nil {
		t.Fatalf("docker events: %v", err)
	}
	t.Logf("containers that died since the bad image was set: %v", deaths)
	var touched []string
	for _, n := range nodes {
		if after[n] != onV2[n] {
			touched = append(touched, n)
		}
	}
	if len(touched) != 1 {
		t.Fatalf("containers replaced on %v, want on exactly one node (maxUnavailable 1); deaths %v", touched, deaths)
	}
	if !slices.Contains(deaths, touched[0]+" "+v3+" exit 1") {
		t.Fatalf("no v3 container exited 1 on %s: deaths %v", touched[0], deaths)
	}
	for _, d := range deaths {
		if !strings.HasPrefix(d, touched[0]+" ") {
			t.Fatalf("a container died on a node v3 never reached: %s (all: %v)", d, deaths)
		}
	}

	// The failed template is not retried: setting it again is held.
	k.ok("set", "image", "ds/"+name, "daemon="+v3)
	kfWant(t, k.fails("rollout", "status", "ds/"+name, "--timeout=80s"), `error: daemon set "guarded-daemon" rollout held (BadRevision)`)
	consistently(t, 3*time.Second, func() error {
		got, err := dockerRunning(ctx, cli, nodes, v2)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if got[n] != after[n] {
				return fmt.Errorf("node %s: container %.12s, want %.12s kept", n, got[n], after[n])
			}
		}
		return c.wantRevisions(name, allOn(hash2, nodes...))
	})
}

// randomRun names one test run (images, node names).
func randomRun(t *testing.T) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}
