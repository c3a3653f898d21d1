package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/go-connections/nat"

	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent/runtime"
)

func freePort(t *testing.T) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

// TestCreateMapsEveryField creates a container with every ContainerSpec
// field set and checks each in the engine's own inspect output.
func TestCreateMapsEveryField(t *testing.T) {
	r := newRuntime(t, "fields")
	hostDir, scratch := t.TempDir(), t.TempDir()
	spec := testSpec(r, "web", "app", "-listen", ":8080", "-exit-after", "-1ns")
	spec.Command = []string{"/testdaemon", "-say", "hi"}
	spec.Env = []runtime.EnvVar{{Name: "NODE_NAME", Value: "n1"}, {Name: "EMPTY", Value: ""}}
	spec.WorkingDir = "/work"
	spec.Hostname = "web-host"
	spec.Ports = []runtime.Port{
		{Name: "http", ContainerPort: 8080, HostPort: 18080, HostIP: "127.0.0.1", Protocol: "TCP"},
		{ContainerPort: 53, HostPort: 15353, Protocol: "UDP"},
		{ContainerPort: 9090},
	}
	spec.Mounts = []runtime.Mount{
		{Type: runtime.MountBind, Source: hostDir, Target: "/host", ReadOnly: true},
		{Type: runtime.MountEmptyDir, Source: scratch, Target: "/scratch"},
		{Type: runtime.MountEmptyDir, Target: "/anon"},
		{Type: runtime.MountTmpfs, Target: "/mem"},
	}
	spec.Resources = runtime.Resources{CPUMillis: 250, MemoryBytes: 64 << 20}
	spec.CapAdd = []string{"NET_ADMIN", "SYS_TIME"}
	spec.CapDrop = []string{"MKNOD"}
	uid, gid := int64(1000), int64(2000)
	spec.RunAsUser, spec.RunAsGroup = &uid, &gid
	spec.ReadOnlyRootFilesystem, spec.NoNewPrivileges = true, true
	spec.Labels["app"] = "web"
	spec.Annotations = map[string]string{"note": "kept"}
	id := create(t, r, spec)

	c, err := engine.cli.ContainerInspect(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	hc := c.HostConfig
	wantName := "/everynode_" + r.node + "_default_web_app_0"
	check := []struct {
		what      string
		got, want any
	}{
		{"name", c.Name, wantName},
		{"image", c.Config.Image, engine.image},
		{"entrypoint", []string(c.Config.Entrypoint), spec.Command},
		{"cmd", []string(c.Config.Cmd), spec.Args},
		{"env NODE_NAME", slices.Contains(c.Config.Env, "NODE_NAME=n1"), true},
		{"env EMPTY", slices.Contains(c.Config.Env, "EMPTY="), true},
		{"workdir", c.Config.WorkingDir, "/work"},
		{"hostname", c.Config.Hostname, "web-host"},
		{"exposed 9090", hasKey(c.Config.ExposedPorts, "9090/tcp"), true},
		{"binding 8080", hc.PortBindings[nat.Port("8080/tcp")], []nat.PortBinding{{HostIP: "127.0.0.1", HostPort: "18080"}}},
		{"binding 53/udp", hc.PortBindings[nat.Port("53/udp")], []nat.PortBinding{{HostPort: "15353"}}},
		{"no binding 9090", len(hc.PortBindings[nat.Port("9090/tcp")]), 0},
		{"network", string(hc.NetworkMode), "default"},
		{"pid", string(hc.PidMode), ""},
		{"binds", hc.Binds, []string{hostDir + ":/host:ro", scratch + ":/scratch"}},
		{"anon volume", hc.Mounts, []mount.Mount{{Type: mount.TypeVolume, Target: "/anon"}}},
		{"tmpfs", hc.Tmpfs, map[string]string{"/mem": ""}},
		{"nanocpus", hc.NanoCPUs, int64(250_000_000)},
		{"memory", hc.Memory, int64(64 << 20)},
		{"memory+swap", hc.MemorySwap, int64(64 << 20)},
		{"privileged", hc.Privileged, false},
		{"capadd", []string(hc.CapAdd), []string{"CAP_NET_ADMIN", "CAP_SYS_TIME"}}, // the engine adds the prefix
		{"capdrop", []string(hc.CapDrop), []string{"CAP_MKNOD"}},
		{"user", c.Config.User, "1000:2000"},
		{"read-only rootfs", hc.ReadonlyRootfs, true},
		{"security opt", hc.SecurityOpt, []string{"no-new-privileges"}},
		{"label app", c.Config.Labels["app"], "web"},
		{"label node", c.Config.Labels[runtime.LabelNode], r.node},
		{"label uid", c.Config.Labels[runtime.LabelPodUID], "uid-web"},
		{"log driver", hc.LogConfig.Type, "json-file"},
		{"restart policy", string(hc.RestartPolicy.Name), "no"},
	}
	for _, c := range check {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	// Read-only and read-write mounts as the engine set them up.
	for _, m := range c.Mounts {
		switch m.Destination {
		case "/host":
			if m.RW {
				t.Errorf("/host mounted read-write")
			}
		case "/scratch":
			if !m.RW {
				t.Errorf("/scratch mounted read-only")
			}
		}
	}

	st, err := r.ContainerStatus(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != runtime.StateCreated || st.Image != engine.image || st.ImageID == "" || st.Created.IsZero() || !st.Started.IsZero() {
		t.Errorf("status of a created container: %+v", st)
	}
	if st.Annotations["note"] != "kept" {
		t.Errorf("annotations %v, want note=kept", st.Annotations)
	}
	if _, ok := st.Labels[labelAnnotations]; ok || st.Labels["app"] != "web" {
		t.Errorf("labels %v: want the spec's labels only", st.Labels)
	}
}

// TestCreateHostNamespacesAndPrivileged checks hostNetwork, hostPID and
// privileged in the engine's inspect output.
func TestCreateHostNamespacesAndPrivileged(t *testing.T) {
	r := newRuntime(t, "hostns")
	spec := testSpec(r, "sys", "agent", "-exit-after", "0")
	spec.HostNetwork, spec.HostPID, spec.Privileged = true, true, true
	spec.Ports = []runtime.Port{{ContainerPort: 9100, HostPort: 9100}}
	id := create(t, r, spec)
	c, err := engine.cli.ContainerInspect(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if c.HostConfig.NetworkMode != "host" || c.HostConfig.PidMode != "host" || !c.HostConfig.Privileged {
		t.Errorf("network %q pid %q privileged %v; want host, host, true", c.HostConfig.NetworkMode, c.HostConfig.PidMode, c.HostConfig.Privileged)
	}
	if len(c.HostConfig.PortBindings) != 0 {
		t.Errorf("port bindings with host networking: %v", c.HostConfig.PortBindings)
	}
}

func hasKey[M ~map[K]V, K comparable, V any](m M, k K) bool {
	_, ok := m[k]
	return ok
}

// TestRunServesHTTPOnHostPort runs the test daemon with a published host port
// and reads its answer through the port.
func TestRunServesHTTPOnHostPort(t *testing.T) {
	r := newRuntime(t, "http")
	port := freePort(t)
	spec := testSpec(r, "web", "app", "-listen", ":8080", "-exit-after", "-1ns")
	spec.Hostname = "web-0"
	spec.Ports = []runtime.Port{{ContainerPort: 8080, HostPort: port, HostIP: "127.0.0.1"}}
	id := run(t, r, spec)
	st := waitState(t, r, id, runtime.StateRunning)
	if st.Started.IsZero() || st.IP == "" {
		t.Errorf("running status %+v: want a start time and an IP", st)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	var body []byte
	testkit.Eventually(t, 10*time.Second, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return fmt.Errorf("GET %s: %w", url, err)
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		return nil
	})
	if !strings.Contains(string(body), "hostname=web-0") {
		t.Errorf("answer %q: want hostname=web-0", body)
	}
}

// TestCreateInvalid: fields Docker cannot honour fail with kind Invalid and
// create nothing.
func TestCreateInvalid(t *testing.T) {
	r := newRuntime(t, "invalid")
	tests := []struct {
		name string
		edit func(*runtime.ContainerSpec)
	}{
		{"relative host path", func(s *runtime.ContainerSpec) {
			s.Mounts = []runtime.Mount{{Type: runtime.MountBind, Source: "data", Target: "/data"}}
		}},
		{"colon in path", func(s *runtime.ContainerSpec) {
			s.Mounts = []runtime.Mount{{Type: runtime.MountBind, Source: "/a:b", Target: "/data"}}
		}},
		{"host port differs with host network", func(s *runtime.ContainerSpec) {
			s.HostNetwork = true
			s.Ports = []runtime.Port{{ContainerPort: 80, HostPort: 8080}}
		}},
		{"unknown protocol", func(s *runtime.ContainerSpec) {
			s.Ports = []runtime.Port{{ContainerPort: 80, Protocol: "QUIC"}}
		}},
		{"other node's label", func(s *runtime.ContainerSpec) { s.Labels[runtime.LabelNode] = "elsewhere" }},
		{"no image", func(s *runtime.ContainerSpec) { s.Image = "" }},
		{"memory below the engine's minimum", func(s *runtime.ContainerSpec) { s.Resources.MemoryBytes = 1 << 20 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := testSpec(r, "bad", "c")
			tt.edit(&spec)
			id, err := r.CreateContainer(ctxT(t), spec)
			if id != "" {
				_ = r.RemoveContainer(context.Background(), id)
			}
			if runtime.KindOf(err) != runtime.Invalid {
				t.Errorf("CreateContainer = %q, %v; want kind Invalid", id, err)
			}
		})
	}
	list, err := r.ListContainers(ctxT(t), nil)
	if err != nil || len(list) != 0 {
		t.Errorf("after invalid creates: %v, %v; want none", list, err)
	}
}

// TestContainerNamesUnique: the readable name, and a suffix when it is taken.
func TestContainerNamesUnique(t *testing.T) {
	r := newRuntime(t, "names")
	spec := testSpec(r, "pod_x", "c.1")
	spec.Labels[runtime.LabelAttempt] = "3"
	id1 := create(t, r, spec)
	id2 := create(t, r, spec)
	c1, _ := engine.cli.ContainerInspect(ctxT(t), id1)
	c2, _ := engine.cli.ContainerInspect(ctxT(t), id2)
	want := "/everynode_" + r.node + "_default_pod-x_c.1_3"
	if c1.Name != want {
		t.Errorf("name %q, want %q", c1.Name, want)
	}
	if !strings.HasPrefix(c2.Name, want+"_") || c2.Name == c1.Name {
		t.Errorf("second name %q, want %q with a suffix", c2.Name, want)
	}
}

// TestMissingImage: an image no registry serves is a typed pull error, an
// absent image is ImageNotFound for ImageStatus and CreateContainer.
func TestMissingImage(t *testing.T) {
	r := newRuntime(t, "pull")
	ref := "everynode-test/absent:" + engine.run
	var logs bytes.Buffer
	r.log = slogTo(&logs)
	id, err := r.PullImage(ctxT(t), ref)
	if err == nil || (!runtime.IsPullFailed(err) && !runtime.IsImageNotFound(err)) {
		t.Fatalf("PullImage = %q, %v; want kind PullFailed or ImageNotFound", id, err)
	}
	if !strings.Contains(err.Error(), ref) {
		t.Errorf("error %q does not name the image", err)
	}
	t.Logf("pull error: %v", err)
	if !strings.Contains(logs.String(), "pulling image") {
		t.Errorf("pull not logged: %q", logs.String())
	}
	if _, err := r.ImageStatus(ctxT(t), ref); !runtime.IsImageNotFound(err) {
		t.Errorf("ImageStatus = %v; want ImageNotFound", err)
	}
	spec := testSpec(r, "p", "c")
	spec.Image = ref
	if id, err := r.CreateContainer(ctxT(t), spec); !runtime.IsImageNotFound(err) {
		t.Errorf("CreateContainer = %q, %v; want ImageNotFound", id, err)
	}
	img, err := r.ImageStatus(ctxT(t), engine.image)
	if err != nil || img.ID == "" || !slices.Contains(img.Refs, engine.image) {
		t.Errorf("ImageStatus(test image) = %+v, %v", img, err)
	}
}

// TestVersion names the runtime and the engine.
func TestVersion(t *testing.T) {
	r := newRuntime(t, "version")
	v, err := r.Version(ctxT(t))
	if err != nil || v.Name != "docker" || v.Version == "" || v.APIVersion == "" {
		t.Errorf("Version = %+v, %v", v, err)
	}
}

// TestExitStatus: exit codes, reasons and times of containers that ended by
// themselves.
func TestExitStatus(t *testing.T) {
	r := newRuntime(t, "exit")
	for _, tt := range []struct {
		code   int
		reason string
	}{{0, "Completed"}, {7, "Error"}} {
		id := run(t, r, testSpec(r, fmt.Sprintf("p%d", tt.code), "c", "-exit-after", "0", "-exit-code", fmt.Sprint(tt.code)))
		st := waitState(t, r, id, runtime.StateExited)
		if st.ExitCode != tt.code || st.Reason != tt.reason || st.Started.IsZero() || st.Finished.Before(st.Started) {
			t.Errorf("exit %d: status %+v", tt.code, st)
		}
	}
}

// TestOOMKilled: a container beyond its memory limit is reported OOMKilled.
func TestOOMKilled(t *testing.T) {
	r := newRuntime(t, "oom")
	spec := testSpec(r, "hog", "c", "-alloc-mb", "256", "-exit-after", "0")
	spec.Resources.MemoryBytes = 32 << 20
	id := run(t, r, spec)
	st := waitState(t, r, id, runtime.StateExited)
	if st.Reason != "OOMKilled" || st.ExitCode == 0 {
		t.Errorf("status %+v; want reason OOMKilled and a non-zero exit", st)
	}
}

// TestStopGracePeriod: a process that honours SIGTERM stops at once; one that
// ignores it is killed when the grace period ends, not before.
func TestStopGracePeriod(t *testing.T) {
	r := newRuntime(t, "stop")
	polite := run(t, r, testSpec(r, "polite", "c", "-say", "ready", "-exit-after", "-1ns"))
	stubborn := run(t, r, testSpec(r, "stubborn", "c", "-say", "ready", "-ignore-term", "-exit-after", "-1ns"))
	waitLog(t, r, polite, "")
	waitLog(t, r, stubborn, "")

	start := time.Now()
	if err := r.StopContainer(ctxT(t), polite, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stopping a process that honours SIGTERM took %s", d)
	}
	if st := waitState(t, r, polite, runtime.StateExited); st.ExitCode != 143 {
		t.Errorf("polite exit code %d, want 143", st.ExitCode)
	}

	const grace = 2 * time.Second
	start = time.Now()
	if err := r.StopContainer(ctxT(t), stubborn, grace); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < grace || d > grace+5*time.Second {
		t.Errorf("stopping a process that ignores SIGTERM took %s, want about %s", d, grace)
	}
	if st := waitState(t, r, stubborn, runtime.StateExited); st.ExitCode != 137 {
		t.Errorf("stubborn exit code %d, want 137 (SIGKILL)", st.ExitCode)
	}
	// Stopping a stopped container is no error; an absent one is NotFound.
	if err := r.StopContainer(ctxT(t), stubborn, grace); err != nil {
		t.Errorf("second stop: %v", err)
	}
	if err := r.StopContainer(ctxT(t), "no-such-container", grace); !runtime.IsNotFound(err) {
		t.Errorf("stop of an absent container: %v, want NotFound", err)
	}
}

// TestRemove removes a running container and its anonymous volume; removing
// again is no error.
func TestRemove(t *testing.T) {
	r := newRuntime(t, "remove")
	spec := testSpec(r, "p", "c", "-exit-after", "-1ns")
	spec.Mounts = []runtime.Mount{{Type: runtime.MountEmptyDir, Target: "/anon"}}
	id, err := r.CreateContainer(ctxT(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.StartContainer(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	c, err := engine.cli.ContainerInspect(ctxT(t), id)
	if err != nil || len(c.Mounts) != 1 || c.Mounts[0].Name == "" {
		t.Fatalf("inspect: %v, mounts %+v", err, c.Mounts)
	}
	vol := c.Mounts[0].Name
	if err := r.RemoveContainer(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ContainerStatus(ctxT(t), id); !runtime.IsNotFound(err) {
		t.Errorf("status after remove: %v, want NotFound", err)
	}
	if _, err := engine.cli.VolumeInspect(ctxT(t), vol); err == nil {
		t.Errorf("anonymous volume %s survived its container", vol)
	}
	if err := r.RemoveContainer(ctxT(t), id); err != nil {
		t.Errorf("second remove: %v", err)
	}
}

// TestNodesIsolated: two runtimes with different node names on one engine
// never see or touch each other's containers; a new runtime for the same node
// (an agent restart) re-adopts them.
func TestNodesIsolated(t *testing.T) {
	a, b := newRuntime(t, "node-a"), newRuntime(t, "node-b")
	idA := create(t, a, testSpec(a, "ds-a", "c"))
	idB := create(t, b, testSpec(b, "ds-b", "c"))

	for _, tt := range []struct {
		r      *Runtime
		mine   string
		theirs string
	}{{a, idA, idB}, {b, idB, idA}} {
		list, err := tt.r.ListContainers(ctxT(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].ID != tt.mine {
			t.Errorf("%s lists %+v, want only %s", tt.r.node, list, tt.mine)
		}
		if _, err := tt.r.ContainerStatus(ctxT(t), tt.theirs); !runtime.IsNotFound(err) {
			t.Errorf("%s inspects another node's container: %v", tt.r.node, err)
		}
		if err := tt.r.StartContainer(ctxT(t), tt.theirs); !runtime.IsNotFound(err) {
			t.Errorf("%s starts another node's container: %v", tt.r.node, err)
		}
		if err := tt.r.RemoveContainer(ctxT(t), tt.theirs); err != nil {
			t.Errorf("%s remove of another node's container: %v", tt.r.node, err)
		}
		if list, _ := tt.r.ListContainers(ctxT(t), runtime.Labels{runtime.LabelNode: "x"}); len(list) != 0 {
			t.Errorf("%s lists %v for another node's label", tt.r.node, list)
		}
	}
	// b's container survived a's remove.
	if _, err := b.ContainerStatus(ctxT(t), idB); err != nil {
		t.Errorf("b's container after a's remove: %v", err)
	}
	// Filters by pod labels within a node.
	idA2 := create(t, a, testSpec(a, "ds-a2", "c"))
	list, err := a.ListContainers(ctxT(t), runtime.Labels{runtime.LabelPodUID: "uid-ds-a2"})
	if err != nil || len(list) != 1 || list[0].ID != idA2 || list[0].State != runtime.StateCreated || list[0].Image != engine.image {
		t.Errorf("list by pod uid: %+v, %v", list, err)
	}
	if _, ok := list[0].Labels[labelImage]; ok {
		t.Errorf("list shows internal labels: %v", list[0].Labels)
	}
	// Re-adoption: a fresh runtime for node a sees a's containers.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	again, err := New(ctx, Config{NodeName: a.node})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if list, err := again.ListContainers(ctxT(t), nil); err != nil || len(list) != 2 {
		t.Errorf("restarted runtime lists %d containers (%v), want 2", len(list), err)
	}
}

// TestExec: exit codes and output, bounded; errors for stopped and absent
// containers; ctx bounds the command.
func TestExec(t *testing.T) {
	r := newRuntime(t, "exec")
	id := run(t, r, testSpec(r, "p", "c", "-exit-after", "-1ns"))
	waitState(t, r, id, runtime.StateRunning)

	code, out, err := r.Exec(ctxT(t), id, []string{"/testdaemon", "-say", "hello", "-stderr", "oops", "-exit-after", "0", "-exit-code", "3"})
	if err != nil || code != 3 || !strings.Contains(string(out), "hello\n") || !strings.Contains(string(out), "oops\n") {
		t.Errorf("Exec = %d, %q, %v; want 3, hello and oops", code, out, err)
	}
	code, out, err = r.Exec(ctxT(t), id, []string{"/testdaemon", "-lines", "10000", "-exit-after", "0"})
	if err != nil || code != 0 || len(out) != MaxExecOutput || !strings.HasPrefix(string(out), "line 1\n") {
		t.Errorf("Exec of long output = %d, %d bytes, %v; want 0 and %d bytes", code, len(out), err, MaxExecOutput)
	}
	if _, _, err := r.Exec(ctxT(t), id, []string{"/no/such/binary"}); err == nil {
		// The engine reports a missing binary as exit code 126/127 or an error;
		// either way it must not pass silently as success.
		code, _, _ := r.Exec(ctxT(t), id, []string{"/no/such/binary"})
		if code == 0 {
			t.Errorf("exec of a missing binary exited 0")
		}
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err = r.Exec(ctx, id, []string{"/testdaemon", "-exit-after", "30s"})
	if err == nil || ctx.Err() == nil || !strings.Contains(err.Error(), context.DeadlineExceeded.Error()) {
		t.Errorf("Exec past its deadline = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Exec past its deadline returned after %s", d)
	}

	if err := r.StopContainer(ctxT(t), id, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Exec(ctxT(t), id, []string{"/testdaemon"}); runtime.KindOf(err) != runtime.NotRunning {
		t.Errorf("Exec in a stopped container: %v, want NotRunning", err)
	}
	if _, _, err := r.Exec(ctxT(t), "no-such-container", []string{"/testdaemon"}); !runtime.IsNotFound(err) {
		t.Errorf("Exec in an absent container: %v, want NotFound", err)
	}
}

// waitLog waits until the container's logs contain want ("": any output).
func waitLog(t *testing.T, r *Runtime, id, want string) string {
	t.Helper()
	var b bytes.Buffer
	testkit.Eventually(t, 15*time.Second, func() error {
		b.Reset()
		if err := r.Logs(ctxT(t), id, runtime.LogOptions{}, &b); err != nil {
			t.Fatalf("Logs: %v", err)
		}
		if (want == "" && b.Len() > 0) || (want != "" && strings.Contains(b.String(), want)) {
			return nil
		}
		return fmt.Errorf("logs %q do not contain %q", b.String(), want)
	})
	return b.String()
}

// TestLogs: all, tail, timestamps, since, stderr interleaved.
func TestLogs(t *testing.T) {
	r := newRuntime(t, "logs")
	id := run(t, r, testSpec(r, "p", "c", "-say", "start", "-lines", "5", "-exit-after", "0", "-exit-code", "0"))
	errID := run(t, r, testSpec(r, "q", "c", "-stderr", "warn", "-exit-after", "0"))
	waitState(t, r, id, runtime.StateExited)
	waitState(t, r, errID, runtime.StateExited)

	get := func(opts runtime.LogOptions) []string {
		t.Helper()
		var b bytes.Buffer
		if err := r.Logs(ctxT(t), id, opts, &b); err != nil {
			t.Fatalf("Logs(%+v): %v", opts, err)
		}
		return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	}
	all := get(runtime.LogOptions{})
	if len(all) != 6 || all[0] != "start" || all[5] != "line 5" {
		t.Errorf("all logs %q; want start and 5 lines", all)
	}
	var stderr bytes.Buffer
	if err := r.Logs(ctxT(t), errID, runtime.LogOptions{}, &stderr); err != nil || stderr.String() != "warn\n" {
		t.Errorf("logs of stderr: %q, %v", stderr.String(), err)
	}
	two := int64(2)
	if tail := get(runtime.LogOptions{TailLines: &two}); !slices.Equal(tail, []string{"line 4", "line 5"}) {
		t.Errorf("tail 2: %q", tail)
	}
	zero := int64(0)
	if none := get(runtime.LogOptions{TailLines: &zero}); len(none) != 1 || none[0] != "" {
		t.Errorf("tail 0: %q, want nothing", none)
	}
	stamped := get(runtime.LogOptions{Timestamps: true, TailLines: &two})
	var first time.Time
	for i, l := range stamped {
		ts, text, ok := strings.Cut(l, " ")
		tm, err := time.Parse(time.RFC3339Nano, ts)
		if !ok || err != nil || text != fmt.Sprintf("line %d", 4+i) {
			t.Errorf("stamped line %q: %v", l, err)
		}
		if i == 0 {
			first = tm
		}
	}
	if later := get(runtime.LogOptions{Since: first.Add(time.Nanosecond), Timestamps: true}); len(later) >= 6 {
		t.Errorf("since %s: %d lines, want fewer than all", first, len(later))
	}
	if none := get(runtime.LogOptions{Since: time.Now().Add(time.Hour)}); len(none) != 1 || none[0] != "" {
		t.Errorf("since the future: %q", none)
	}
	var b bytes.Buffer
	if err := r.Logs(ctxT(t), "no-such-container", runtime.LogOptions{}, &b); !runtime.IsNotFound(err) {
		t.Errorf("logs of an absent container: %v", err)
	}
}

// TestLogsFollow: follow streams new lines, ends when ctx is cancelled, and
// ends by itself when the container stops.
func TestLogsFollow(t *testing.T) {
	r := newRuntime(t, "follow")
	id := run(t, r, testSpec(r, "p", "c", "-every", "100ms", "-exit-after", "-1ns"))
	ctx, cancel := context.WithCancel(ctxT(t))
	buf := &testkit.Buffer{}
	done := make(chan error, 1)
	go func() { done <- r.Logs(ctx, id, runtime.LogOptions{Follow: true}, buf) }()
	testkit.Eventually(t, 10*time.Second, func() error {
		if !buf.Contains("tick 3\n") {
			return fmt.Errorf("follow got %q, want tick 3", buf.String())
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("follow ended by ctx: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end when ctx was cancelled")
	}

	short := run(t, r, testSpec(r, "q", "c", "-every", "50ms", "-exit-after", "1s"))
	var b bytes.Buffer
	start := time.Now()
	if err := r.Logs(ctxT(t), short, runtime.LogOptions{Follow: true}, &b); err != nil {
		t.Errorf("follow of an exiting container: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second || !strings.Contains(b.String(), "exiting with 0") {
		t.Errorf("follow ended after %s with %q; want the exit line", d, b.String())
	}
}

// slogTo is a text logger into w.
func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestStartFreshContainer: a container this runtime just created starts
// without an inspect first, and one removed behind its back before the
// start is still reported NotFound, as an inspect would have.
func TestStartFreshContainer(t *testing.T) {
	r := newRuntime(t, "node-fresh")
	id := create(t, r, testSpec(r, "ds-fresh", "c"))
	if err := r.StartContainer(ctxT(t), id); err != nil {
		t.Fatalf("start a fresh container: %v", err)
	}
	if st, err := r.ContainerStatus(ctxT(t), id); err != nil || st.State == runtime.StateCreated || st.Started.IsZero() {
		t.Errorf("fresh container after start was not started: %+v, %v", st, err)
	}
	gone := create(t, r, testSpec(r, "ds-fresh2", "c"))
	if err := engine.cli.ContainerRemove(ctxT(t), gone, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.StartContainer(ctxT(t), gone); !runtime.IsNotFound(err) {
		t.Errorf("start of a fresh container removed meanwhile: %v, want NotFound", err)
	}
}
