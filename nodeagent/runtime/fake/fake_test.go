package fake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent/runtime"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestPull(t *testing.T) {
	ctx := context.Background()
	f := New(Config{Images: []string{"busybox"}, Unpullable: "registry.invalid/*"})
	tests := []struct {
		ref      string
		wantKind runtime.Kind
		wantErr  bool
	}{
		{ref: "busybox:latest"},
		{ref: "app:v2"},
		{ref: "registry.invalid/app:v1", wantErr: true, wantKind: runtime.PullFailed},
	}
	for _, tt := range tests {
		id, err := f.PullImage(ctx, tt.ref)
		if tt.wantErr {
			if runtime.KindOf(err) != tt.wantKind {
				t.Errorf("PullImage(%q) = %v, want kind %v", tt.ref, err, tt.wantKind)
			}
			if _, err := f.ImageStatus(ctx, tt.ref); !runtime.IsImageNotFound(err) {
				t.Errorf("ImageStatus(%q) after failed pull = %v, want ImageNotFound", tt.ref, err)
			}
			continue
		}
		if err != nil || !strings.HasPrefix(id, "sha256:") {
			t.Errorf("PullImage(%q) = %q, %v", tt.ref, id, err)
		}
		img, err := f.ImageStatus(ctx, tt.ref)
		if err != nil || img.ID != id {
			t.Errorf("ImageStatus(%q) = %+v, %v; want ID %s", tt.ref, img, err, id)
		}
	}
	if _, err := f.ImageStatus(ctx, "nginx"); !runtime.IsImageNotFound(err) {
		t.Errorf("ImageStatus(nginx) = %v, want ImageNotFound", err)
	}
	if _, err := f.CreateContainer(ctx, runtime.ContainerSpec{Name: "c", Image: "nginx"}); !runtime.IsImageNotFound(err) {
		t.Errorf("CreateContainer with absent image = %v, want ImageNotFound", err)
	}
}

func spec(ann map[string]string) runtime.ContainerSpec {
	return runtime.ContainerSpec{
		Name: "app", Image: "busybox", Command: []string{"sleep"}, Args: []string{"3600"},
		Labels:      map[string]string{runtime.LabelNode: "n1", runtime.LabelPodUID: "u1"},
		Annotations: ann,
	}
}

func TestLifecycleAndExitAfter(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(t0)
	f := New(Config{Clock: clk, Images: []string{"busybox"}, IP: "10.0.0.7"})

	forever, err := f.CreateContainer(ctx, spec(nil))
	if err != nil {
		t.Fatal(err)
	}
	crash, err := f.CreateContainer(ctx, spec(map[string]string{AnnotationExitAfter: "30s", AnnotationExitCode: "3"}))
	if err != nil {
		t.Fatal(err)
	}
	done, err := f.CreateContainer(ctx, spec(map[string]string{AnnotationExitAfter: "10s"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{forever, crash, done} {
		if st, _ := f.ContainerStatus(ctx, id); st.State != runtime.StateCreated {
			t.Fatalf("%s before start: state %s", id, st.State)
		}
		if err := f.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	clk.Step(29 * time.Second)
	want := map[string]runtime.State{forever: runtime.StateRunning, crash: runtime.StateRunning, done: runtime.StateExited}
	for id, s := range want {
		st, err := f.ContainerStatus(ctx, id)
		if err != nil || st.State != s {
			t.Errorf("at +29s %s: %s, %v; want %s", id, st.State, err, s)
		}
	}
	st, _ := f.ContainerStatus(ctx, done)
	if st.ExitCode != 0 || st.Reason != "Completed" || !st.Finished.Equal(t0.Add(10*time.Second)) {
		t.Errorf("done: %+v", st)
	}
	if st.IP != "10.0.0.7" {
		t.Errorf("IP %q", st.IP)
	}

	clk.Step(time.Second)
	list, err := f.ListContainers(ctx, runtime.Labels{runtime.LabelNode: "n1"})
	if err != nil || len(list) != 3 {
		t.Fatalf("list: %v, %v", list, err)
	}
	for _, c := range list {
		if c.ID == crash && c.State != runtime.StateExited {
			t.Errorf("crash at +30s listed as %s", c.State)
		}
	}
	st, _ = f.ContainerStatus(ctx, crash)
	if st.ExitCode != 3 || st.Reason != "Error" || !st.Finished.Equal(t0.Add(30*time.Second)) {
		t.Errorf("crash: %+v", st)
	}
	if l, _ := f.ListContainers(ctx, runtime.Labels{runtime.LabelNode: "n2"}); len(l) != 0 {
		t.Errorf("other node's filter listed %d", len(l))
	}

	if err := f.StopContainer(ctx, forever, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	st, _ = f.ContainerStatus(ctx, forever)
	if st.State != runtime.StateExited || st.ExitCode != StopExitCode {
		t.Errorf("stopped: %+v", st)
	}
	if err := f.RemoveContainer(ctx, forever); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ContainerStatus(ctx, forever); !runtime.IsNotFound(err) {
		t.Errorf("status after remove: %v", err)
	}
	if err := f.RemoveContainer(ctx, forever); err != nil {
		t.Errorf("second remove: %v", err)
	}
	perContainer, _ := f.CreateContainer(ctx, spec(map[string]string{
		AnnotationExitAfter: "1h", AnnotationExitAfter + ".app": "1s", AnnotationExitCode + ".other": "9"}))
	_ = f.StartContainer(ctx, perContainer)
	clk.Step(time.Second)
	if st, _ := f.ContainerStatus(ctx, perContainer); st.State != runtime.StateExited || st.ExitCode != 0 {
		t.Errorf("per-container annotation: %+v", st)
	}
	if _, err := f.CreateContainer(ctx, spec(map[string]string{AnnotationExitAfter: "soon"})); runtime.KindOf(err) != runtime.Invalid {
		t.Errorf("bad annotation: %v", err)
	}
}

func TestExec(t *testing.T) {
	ctx := context.Background()
	f := New(Config{Images: []string{"busybox"}})
	id, _ := f.CreateContainer(ctx, spec(nil))
	if _, _, err := f.Exec(ctx, id, []string{"true"}); runtime.KindOf(err) != runtime.NotRunning {
		t.Errorf("exec in created container: %v", err)
	}
	_ = f.StartContainer(ctx, id)
	tests := []struct {
		cmd  []string
		code int
	}{
		{[]string{"true"}, 0},
		{[]string{"false"}, 1},
		{[]string{"sh", "-c", "exit 4"}, 4},
		{[]string{"cat", "/tmp/healthy"}, 0},
	}
	for _, tt := range tests {
		code, _, err := f.Exec(ctx, id, tt.cmd)
		if err != nil || code != tt.code {
			t.Errorf("Exec(%q) = %d, %v; want %d", tt.cmd, code, err, tt.code)
		}
	}
	if _, _, err := f.Exec(ctx, "nope", []string{"true"}); !runtime.IsNotFound(err) {
		t.Errorf("exec in absent container: %v", err)
	}
}

func TestInjectErrorAndCalls(t *testing.T) {
	ctx := context.Background()
	f := New(Config{})
	boom := errors.New("boom")
	f.InjectError("PullImage", boom, nil)
	if _, err := f.PullImage(ctx, "a"); !errors.Is(err, boom) {
		t.Errorf("first pull: %v", err)
	}
	if _, err := f.PullImage(ctx, "a"); err != nil {
		t.Errorf("second pull: %v", err)
	}
	if _, err := f.PullImage(ctx, "a"); err != nil {
		t.Errorf("third pull: %v", err)
	}
	if n := f.CountCalls("PullImage"); n != 3 {
		t.Errorf("CountCalls = %d", n)
	}
	if c := f.Calls(); len(c) != 3 || c[0] != (Call{Method: "PullImage", Subject: "a"}) {
		t.Errorf("Calls = %v", c)
	}
}

func TestLogs(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(t0)
	f := New(Config{Clock: clk, Images: []string{"busybox"}})
	id, _ := f.CreateContainer(ctx, spec(map[string]string{AnnotationExitAfter: "1m", AnnotationExitCode: "2"}))
	_ = f.StartContainer(ctx, id)

	var buf bytes.Buffer
	if err := f.Logs(ctx, id, runtime.LogOptions{Timestamps: true}, &buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `pretending to run "sleep 3600" from image busybox`) ||
		!strings.HasPrefix(buf.String(), t0.Format(time.RFC3339Nano)+" ") {
		t.Errorf("logs:\n%s", buf.String())
	}

	// Follow blocks until the pretend process exits at +1m.
	out := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		err := f.Logs(ctx, id, runtime.LogOptions{Follow: true, TailLines: new(int64)}, &b)
		out <- fmt.Sprint(b.String(), err)
	}()
	testkit.EventuallyTrue(t, 5*time.Second, "the follower waits on the clock", clk.HasWaiters)
	clk.Step(time.Minute)
	select {
	case s := <-out:
		if !strings.Contains(s, "exited with code 2") || strings.Contains(s, "pretending") {
			t.Errorf("followed logs (tail 0):\n%s", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end when the container exited")
	}

	var tail bytes.Buffer
	one := int64(1)
	_ = f.Logs(ctx, id, runtime.LogOptions{TailLines: &one}, &tail)
	if got := strings.TrimSpace(tail.String()); got != "fake: exited with code 2" {
		t.Errorf("tail 1 = %q", got)
	}
	var since bytes.Buffer
	_ = f.Logs(ctx, id, runtime.LogOptions{Since: t0.Add(time.Second)}, &since)
	if strings.Count(since.String(), "\n") != 1 {
		t.Errorf("since +1s:\n%s", since.String())
	}
}

func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(t0)
	f := New(Config{Clock: clk, Images: []string{"busybox"}})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				id, err := f.CreateContainer(ctx, spec(map[string]string{AnnotationExitAfter: fmt.Sprintf("%ds", i)}))
				if err != nil {
					t.Error(err)
					return
				}
				_ = f.StartContainer(ctx, id)
				_, _ = f.ListContainers(ctx, runtime.Labels{runtime.LabelNode: "n1"})
				_, _ = f.ContainerStatus(ctx, id)
				_ = f.StopContainer(ctx, id, 0)
				_ = f.RemoveContainer(ctx, id)
			}
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); clk.Step(time.Second) }()
	wg.Wait()
	if l, _ := f.ListContainers(ctx, nil); len(l) != 0 {
		t.Errorf("%d containers left", len(l))
	}
}

// TestInitContainerExits: an init container without exit annotations
// succeeds at once (a published manifest's init command finishes); with
// them it does what they say; an app container runs on.
func TestInitContainerExits(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(t0)
	f := New(Config{Clock: clk, Images: []string{"busybox"}})
	initSpec := spec(nil)
	initSpec.Init = true
	held := spec(map[string]string{AnnotationExitAfter: "1h", AnnotationExitCode: "2"})
	held.Init = true
	ids := map[string]struct {
		state runtime.State
		code  int
	}{}
	for _, tc := range []struct {
		s     runtime.ContainerSpec
		state runtime.State
		code  int
	}{{initSpec, runtime.StateExited, 0}, {held, runtime.StateRunning, 0}, {spec(nil), runtime.StateRunning, 0}} {
		id, err := f.CreateContainer(ctx, tc.s)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		ids[id] = struct {
			state runtime.State
			code  int
		}{tc.state, tc.code}
	}
	clk.Step(time.Second)
	for id, want := range ids {
		st, err := f.ContainerStatus(ctx, id)
		if err != nil || st.State != want.state || st.ExitCode != want.code {
			t.Errorf("%s: %s exit %d, %v; want %s exit %d", id, st.State, st.ExitCode, err, want.state, want.code)
		}
	}
}

// TestNetworkProbes: the pretend processes listen on the ports their
// containers declare, while running.
func TestNetworkProbes(t *testing.T) {
	ctx := context.Background()
	f := New(Config{Images: []string{"busybox"}})
	s := spec(nil)
	s.Ports = []runtime.Port{{ContainerPort: 9808, Protocol: "TCP"}}
	id, err := f.CreateContainer(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	u := &url.URL{Scheme: "http", Host: "10.0.0.7:9808", Path: "/healthz"}
	if _, err := f.ProbeHTTP(ctx, u, nil); err == nil {
		t.Error("a created container answered")
	}
	if err := f.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if code, err := f.ProbeHTTP(ctx, u, nil); err != nil || code != 200 {
		t.Errorf("http probe: %d %v", code, err)
	}
	if err := f.ProbeTCP(ctx, "10.0.0.7:9808"); err != nil {
		t.Errorf("tcp probe: %v", err)
	}
	if err := f.ProbeTCP(ctx, "10.0.0.7:9809"); err == nil {
		t.Error("an undeclared port answered")
	}
}
