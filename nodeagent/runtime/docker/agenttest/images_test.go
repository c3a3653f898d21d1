package agenttest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/agent"
	evclient "github.com/everynode/everynode/client"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/images"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent/runtime"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/server"
)

// startEngine starts a Docker engine of its own (dockerd in a network
// namespace of its own, with its own data root, exec root, pid file and
// socket; no bridge, no iptables, the vfs storage driver) and returns a
// client for it. It skips loudly when
// dockerd cannot start, or fails with EVERYNODE_REQUIRE_DOCKER=1.
func startEngine(t *testing.T, name string) (*client.Client, string) {
	t.Helper()
	// Unix socket paths are short: keep the directory near the root.
	dir, err := os.MkdirTemp("", "en-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	cfg := filepath.Join(dir, "daemon.json")
	os.WriteFile(cfg, []byte("{}"), 0o600) // not the machine's /etc/docker/daemon.json
	logf, _ := os.Create(filepath.Join(dir, "log"))
	// Its own network namespace: a dockerd started with --bridge=none
	// deletes the docker0 interface of its namespace, which would cut
	// the machine's own engine off its default bridge.
	cmd := exec.Command("unshare", "--net", "dockerd", "--config-file", cfg, "--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"), "--pidfile", filepath.Join(dir, "pid"), "-H", "unix://"+sock,
		"--bridge=none", "--iptables=false", "--ip6tables=false", "--storage-driver=vfs")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	skip := func(why string) {
		t.Helper()
		if os.Getenv("EVERYNODE_REQUIRE_DOCKER") == "1" {
			t.Fatalf("FAIL: cannot start a second dockerd and EVERYNODE_REQUIRE_DOCKER=1: %s", why)
		}
		t.Skipf("SKIP: cannot start a second dockerd: %s", why)
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		skip(err.Error())
	}
	t.Cleanup(func() {
		syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		logf.Close()
		unmountUnder(dir) // dockerd leaves its network namespace file mounted
		os.RemoveAll(dir)
	})
	cli, err := client.NewClientWithOpts(client.WithHost("unix://"+sock), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.Ping(ctx)
		cancel()
		if err == nil {
			return cli, "unix://" + sock
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			skip(fmt.Sprintf("%v; its log ends: %s", err, tail(string(log), 400)))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// unmountUnder detaches every mount below dir, deepest first.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var under []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			under = append(under, f[1])
		}
	}
	for i := len(under) - 1; i >= 0; i-- {
		syscall.Unmount(under[i], syscall.MNT_DETACH)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// transferredRE reads an agent's "Pulled" event: image size, bytes
// received, bytes of them from peers.
var transferredRE = regexp.MustCompile(`from the everynode servers \(linux/[^,]+, (\d+) bytes, (\d+) transferred, (\d+) of them from peers\)`)

// TestImageReachesEnginesThatNeverHadIt: an image loaded once on the
// server (docker save of the test image, streamed to POST
// /everynode/v1/images) reaches agents on three separate Docker engines
// that never had it and reach no registry: each agent fails to pull,
// fetches the blobs, verifies them and docker loads them; the DaemonSet's
// pods run on all three, the pod events say so with the bytes, and the
// nodes report the image in status.images (what `everynode image ls
// --nodes` shows). It runs twice, the DaemonSet reaching one node first and
// then the two others: without peers the server sends the image three
// times; with peers once, the others get it from the first node. The bytes
// are logged for docs/benchmarks.md.
func TestImageReachesEnginesThatNeverHadIt(t *testing.T) {
	if engine.cli == nil {
		t.Skip("SKIP: no Docker engine: " + engine.skipWhy)
	}
	if testing.Short() {
		t.Skip("starts three Docker engines")
	}
	const n = 3
	var engines []*client.Client
	var hosts []string
	for i := range n {
		cli, host := startEngine(t, strconv.Itoa(i))
		engines, hosts = append(engines, cli), append(hosts, host)
	}
	var sent [2]int64
	var size int64
	for i, peers := range []bool{false, true} {
		t.Run(fmt.Sprintf("peers=%v", peers), func(t *testing.T) {
			sent[i], size = fetchOnEngines(t, engines, hosts, peers)
		})
	}
	t.Logf("BENCH image fetch: %d agents, image %d bytes; server sent %d bytes without peers (%.2f×), %d with peers (%.2f×)",
		n, size, sent[0], float64(sent[0])/float64(size), sent[1], float64(sent[1])/float64(size))
}

// fetchOnEngines runs a server, loads the test image into it, and one
// agent per engine; a DaemonSet selects node 0, then the others. It
// returns what the server sent (bytes the agents received, less those from
// peers) and the image's size.
func fetchOnEngines(t *testing.T, engines []*client.Client, hosts []string, peers bool) (sent, size int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := len(engines)
	for i, e := range engines {
		e.ImageRemove(ctx, engine.image, image.RemoveOptions{Force: true})
		if _, err := e.ImageInspect(ctx, engine.image); err == nil {
			t.Fatalf("engine %d already has %s", i, engine.image)
		}
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	s, err := server.Start(ctx, server.Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", CompactInterval: -1, Logger: log,
		Gossip: agent.GossipOptions{Addr: "127.0.0.1:0", Profile: gossip.ProfileLocal},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// docker save | everynode image load -
	rc, err := engine.cli.ImageSave(ctx, []string{engine.image})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := evclient.NewHTTP(evclient.Config{Server: s.URL(), CAPEM: s.CAPEM(), Token: s.AdminToken(), ResourceFor: resources.ForObject})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	resp, err := admin.Stream(ctx, http.MethodPost, images.ImagesPath, nil, nil, rc)
	rc.Close()
	if err != nil {
		t.Fatalf("image load: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	prefix := nodePrefix() + "img-"
	var agents []*agent.Agent
	defer func() {
		for _, a := range agents {
			a.Close()
		}
		for _, e := range engines {
			cs, _ := e.ContainerList(context.Background(), container.ListOptions{All: true,
				Filters: filters.NewArgs(filters.Arg("label", runtime.LabelNode))})
			for _, c := range cs {
				e.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
			}
		}
	}()
	for i, h := range hosts {
		a, err := agent.Start(ctx, agent.Config{
			Server: s.URL(), Token: s.JoinToken(), DataDir: t.TempDir(), Logger: log,
			Node: agent.NodeOptions{Name: prefix + strconv.Itoa(i), IP: "127.0.0.1", Runtime: agent.RuntimeDocker,
				DockerHost: h, LogListen: "127.0.0.1:0", NoImagePeers: !peers},
			Gossip: agent.GossipOptions{Addr: "127.0.0.1:0", Profile: gossip.ProfileLocal, LeaveOnStop: true},
		})
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	label := func(i int) {
		t.Helper()
		patch := []byte(`{"metadata":{"labels":{"airgapped":"yes"}}}`)
		testkit.Eventually(t, time.Minute, func() error {
			_, err := s.Admin().Patch(ctx, resources.Nodes, "", prefix+strconv.Itoa(i), types.MergePatchType, patch, evclient.WriteOptions{}, "")
			return err
		})
	}
	label(0)

	labels := map[string]string{"app": "airgapped"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "airgapped", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"airgapped": "yes"},
					HostNetwork:  true, // the engines have no bridge
					Containers: []corev1.Container{{Name: "d", Image: engine.image, ImagePullPolicy: corev1.PullIfNotPresent,
						Args: []string{"-say", "air-gapped", "-exit-after", "-1ns"}}},
				},
			},
		},
	}
	resources.DaemonSets.SetTypeMeta(ds)
	if _, err := s.Admin().Create(ctx, ds, evclient.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	running := func(want int) {
		t.Helper()
		testkit.Eventually(t, 4*time.Minute, func() error {
			objs, _, err := s.Admin().List(ctx, resources.Pods, "default", evclient.ListOptions{})
			if err != nil {
				return err
			}
			got := 0
			for _, o := range objs {
				if o.(*corev1.Pod).Status.Phase == corev1.PodRunning {
					got++
				}
			}
			if got != want {
				return fmt.Errorf("%d of %d pods running", got, want)
			}
			return nil
		})
	}
	// status.images: what `everynode image ls --nodes` shows, and what
	// the server names holders by.
	name, _ := images.Normalize(engine.image)
	reporting := func(want int) {
		t.Helper()
		testkit.Eventually(t, 2*time.Minute, func() error {
			objs, _, err := s.Admin().List(ctx, resources.Nodes, "", evclient.ListOptions{})
			if err != nil {
				return err
			}
			have := 0
			for _, o := range objs {
				for _, ci := range o.(*corev1.Node).Status.Images {
					if len(ci.Names) > 0 && ci.Names[0] == name && strings.HasPrefix(o.GetName(), prefix) {
						have++
					}
				}
			}
			if have != want {
				return fmt.Errorf("%d of %d nodes report %s in status.images", have, want, name)
			}
			return nil
		})
	}
	running(1)
	reporting(1)
	for i := 1; i < n; i++ {
		label(i)
	}
	running(n)
	reporting(n)
	for i, e := range engines {
		if _, err := e.ImageInspect(ctx, engine.image); err != nil {
			t.Errorf("engine %d does not have the image after the fetch: %v", i, err)
		}
	}

	// Pod events name the source and the bytes.
	var fromPeers int64
	testkit.Eventually(t, time.Minute, func() error {
		objs, _, err := s.Admin().List(ctx, resources.Events, "default", evclient.ListOptions{})
		if err != nil {
			return err
		}
		sent, fromPeers = 0, 0
		seen := 0
		for _, o := range objs {
			m := transferredRE.FindStringSubmatch(o.(*corev1.Event).Message)
			if m == nil {
				continue
			}
			seen++
			sz, _ := strconv.ParseInt(m[1], 10, 64)
			tr, _ := strconv.ParseInt(m[2], 10, 64)
			fp, _ := strconv.ParseInt(m[3], 10, 64)
			size, sent, fromPeers = sz, sent+tr-fp, fromPeers+fp
		}
		if seen != n {
			return fmt.Errorf("%d of %d pods have a Pulled event from the servers", seen, n)
		}
		return nil
	})
	t.Logf("peers=%v: image %d bytes, server sent %d, peers sent %d", peers, size, sent, fromPeers)
	switch {
	case !peers && (sent != int64(n)*size || fromPeers != 0):
		t.Errorf("without peers the server sent %d bytes and peers %d, want %d and 0", sent, fromPeers, int64(n)*size)
	case peers && (sent != size || fromPeers != int64(n-1)*size):
		t.Errorf("with peers the server sent %d bytes and peers %d, want %d and %d", sent, fromPeers, size, int64(n-1)*size)
	}
	return sent, size
}
