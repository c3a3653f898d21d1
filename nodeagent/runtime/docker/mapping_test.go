package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// These tests need no engine.

func TestContainerName(t *testing.T) {
	labels := func(ns, pod, c, attempt string) map[string]string {
		return map[string]string{runtime.LabelPodNamespace: ns, runtime.LabelPodName: pod, runtime.LabelContainer: c, runtime.LabelAttempt: attempt}
	}
	tests := []struct {
		node string
		spec runtime.ContainerSpec
		want string
	}{
		{"n1", runtime.ContainerSpec{Name: "app", Labels: labels("default", "web-x7", "app", "2")}, "everynode_n1_default_web-x7_app_2"},
		{"node_1.local", runtime.ContainerSpec{Name: "a/b", Labels: labels("kube-system", "p", "a/b", "")}, "everynode_node-1.local_kube-system_p_a-b_0"},
		{"n", runtime.ContainerSpec{Name: "solo"}, "everynode_n_solo_0"},
		{"n", runtime.ContainerSpec{Labels: labels("ns", "pod", "from-label", "1")}, "everynode_n_ns_pod_from-label_1"},
	}
	for _, tt := range tests {
		if got := containerName(tt.node, tt.spec); got != tt.want {
			t.Errorf("containerName(%q, %v) = %q, want %q", tt.node, tt.spec.Labels, got, tt.want)
		}
	}
	long := containerName("n", runtime.ContainerSpec{Name: strings.Repeat("x", 300)})
	if len(long) > 200 {
		t.Errorf("name of %d bytes", len(long))
	}
}

func TestConfigsInvalid(t *testing.T) {
	r := &Runtime{node: "n1"}
	base := func() runtime.ContainerSpec {
		return runtime.ContainerSpec{Name: "c", Image: "img:v1", Labels: map[string]string{runtime.LabelNode: "n1"}}
	}
	tests := []struct {
		name string
		edit func(*runtime.ContainerSpec)
		want string // a word the error must contain
	}{
		{"no image", func(s *runtime.ContainerSpec) { s.Image = "" }, "no image"},
		{"other node", func(s *runtime.ContainerSpec) { s.Labels[runtime.LabelNode] = "n2" }, "n2"},
		{"env name", func(s *runtime.ContainerSpec) { s.Env = []runtime.EnvVar{{Name: "A=B"}} }, "env"},
		{"relative bind", func(s *runtime.ContainerSpec) {
			s.Mounts = []runtime.Mount{{Type: runtime.MountBind, Source: "rel", Target: "/x"}}
		}, "rel"},
		{"relative target", func(s *runtime.ContainerSpec) {
			s.Mounts = []runtime.Mount{{Type: runtime.MountTmpfs, Target: "x"}}
		}, "target"},
		{"mount type", func(s *runtime.ContainerSpec) {
			s.Mounts = []runtime.Mount{{Type: "nfs", Source: "/a", Target: "/x"}}
		}, "nfs"},
		{"protocol", func(s *runtime.ContainerSpec) { s.Ports = []runtime.Port{{ContainerPort: 1, Protocol: "QUIC"}} }, "QUIC"},
		{"port range", func(s *runtime.ContainerSpec) { s.Ports = []runtime.Port{{ContainerPort: 70000}} }, "range"},
		{"host port with host network", func(s *runtime.ContainerSpec) {
			s.HostNetwork = true
			s.Ports = []runtime.Port{{ContainerPort: 80, HostPort: 81}}
		}, "hostNetwork"},
		{"negative limit", func(s *runtime.ContainerSpec) { s.Resources.MemoryBytes = -1 }, "negative"},
		{"propagation", func(s *runtime.ContainerSpec) {
			s.Mounts = []runtime.Mount{{Type: runtime.MountBind, Source: "/a", Target: "/x", Propagation: "slave"}}
		}, "propagation"},
		{"seccomp relative", func(s *runtime.ContainerSpec) { s.Seccomp = "profiles/x.json" }, "seccomp"},
		{"seccomp missing", func(s *runtime.ContainerSpec) { s.Seccomp = "/nonexistent/x.json" }, "seccomp"},
		{"negative user", func(s *runtime.ContainerSpec) { u := int64(-1); s.RunAsUser = &u }, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base()
			tt.edit(&s)
			_, _, err := r.configs(s, "")
			if runtime.KindOf(err) != runtime.Invalid || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("configs = %v; want kind Invalid mentioning %q", err, tt.want)
			}
		})
	}
	// The node label is added when absent; internal labels are set.
	s := base()
	delete(s.Labels, runtime.LabelNode)
	s.Annotations = map[string]string{"a": "1"}
	cfg, _, err := r.configs(s, "")
	if err != nil || cfg.Labels[runtime.LabelNode] != "n1" || cfg.Labels[labelImage] != "img:v1" || cfg.Labels[labelAnnotations] != `{"a":"1"}` {
		t.Errorf("configs labels = %v, %v", cfg.Labels, err)
	}
	if s.Labels[labelImage] != "" {
		t.Error("configs changed the caller's labels")
	}
}

func TestState(t *testing.T) {
	for in, want := range map[string]runtime.State{
		"created": runtime.StateCreated, "running": runtime.StateRunning, "paused": runtime.StateRunning,
		"restarting": runtime.StateRunning, "exited": runtime.StateExited, "dead": runtime.StateExited,
		"removing": runtime.StateExited, "": runtime.StateUnknown, "odd": runtime.StateUnknown,
	} {
		if got := state(in); got != want {
			t.Errorf("state(%q) = %s, want %s", in, got, want)
		}
	}
	if !parseTime("0001-01-01T00:00:00Z").IsZero() || !parseTime("junk").IsZero() {
		t.Error("parseTime of the zero time or junk is not zero")
	}
	if got := parseTime("2026-11-22T04:22:44.123456789Z"); got.Nanosecond() != 123456789 {
		t.Errorf("parseTime lost nanoseconds: %v", got)
	}
}

func TestPullErrorKinds(t *testing.T) {
	tests := []struct {
		msg  string
		want runtime.Kind
	}{
		{`Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host`, runtime.PullFailed},
		{`Get "http://localhost:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused`, runtime.PullFailed},
		{`manifest for 127.0.0.1:5000/x:v1 not found: manifest unknown: manifest unknown`, runtime.ImageNotFound},
		{`pull access denied for x, repository does not exist or may require 'docker login'`, runtime.ImageNotFound},
		{`unauthorized: authentication required`, runtime.PullFailed},
	}
	for _, tt := range tests {
		err := pullError(t.Context(), "x:v1", errors.New(tt.msg))
		if runtime.KindOf(err) != tt.want || !strings.Contains(err.Error(), "x:v1") {
			t.Errorf("pullError(%q) = %v (%s), want %s", tt.msg, err, runtime.KindOf(err), tt.want)
		}
	}
}

func TestPullProgressSummary(t *testing.T) {
	p := &pullProgress{layers: make(map[string]*layer)}
	for _, m := range []pullMessage{
		{Status: "Pulling from library/app", ID: "v1"},
		{Status: "Pulling fs layer", ID: "a"},
		{Status: "Pulling fs layer", ID: "b"},
		{Status: "Already exists", ID: "c"},
		{Status: "Downloading", ID: "a", Progress: &pullProgressDetail{Current: 50, Total: 100}},
		{Status: "Downloading", ID: "b", Progress: &pullProgressDetail{Current: 10, Total: 40}},
		{Status: "Pull complete", ID: "a"},
		{Status: "Digest: sha256:abc"},
	} {
		p.add(m)
	}
	done, total, cur, size := p.summary()
	if got := fmt.Sprintf("%d %d %d %d %s", done, total, cur, size, p.last); got != "2 3 110 140 Digest: sha256:abc" {
		t.Errorf("summary = %s", got)
	}
}

// TestPullMessageDecodesLikeJSONMessage decodes engine progress lines into
// pullMessage and into Docker's own jsonmessage.JSONMessage and compares the
// fields the agent reads.
func TestPullMessageDecodesLikeJSONMessage(t *testing.T) {
	lines := []string{
		`{"status":"Pulling from library/busybox","id":"1.36"}`,
		`{"status":"Downloading","progressDetail":{"current":50,"total":100},"progress":"[=====>     ]  50B/100B","id":"a1b2"}`,
		`{"status":"Pull complete","progressDetail":{},"id":"a1b2"}`,
		`{"status":"Digest: sha256:abc"}`,
		`{"errorDetail":{"message":"manifest unknown"},"error":"manifest unknown"}`,
	}
	for _, l := range lines {
		var ours pullMessage
		var ref jsonmessage.JSONMessage
		if err := json.Unmarshal([]byte(l), &ours); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		if err := json.Unmarshal([]byte(l), &ref); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		got := fmt.Sprintf("%q %q %v %v", ours.ID, ours.Status, ours.Progress != nil, ours.Error != nil)
		want := fmt.Sprintf("%q %q %v %v", ref.ID, ref.Status, ref.Progress != nil, ref.Error != nil)
		if ours.Progress != nil && ref.Progress != nil {
			got += fmt.Sprintf(" %d/%d", ours.Progress.Current, ours.Progress.Total)
			want += fmt.Sprintf(" %d/%d", ref.Progress.Current, ref.Progress.Total)
		}
		if ours.Error != nil && ref.Error != nil {
			got += " " + ours.Error.Message
			want += " " + ref.Error.Message
		}
		if got != want {
			t.Errorf("%s:\n pullMessage %s\n JSONMessage %s", l, got, want)
		}
	}
}

func TestBoundedBuffer(t *testing.T) {
	b := &boundedBuffer{max: 5}
	for _, s := range []string{"abc", "def", "ghi"} {
		if n, err := b.Write([]byte(s)); n != 3 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if string(b.bytes()) != "abcde" {
		t.Errorf("kept %q, want abcde", b.bytes())
	}
}

func TestNewNeedsNodeName(t *testing.T) {
	if _, err := New(t.Context(), Config{}); err == nil {
		t.Error("New without a node name succeeded")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := New(ctx, Config{NodeName: "n", Host: "unix:///nonexistent/docker.sock"}); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Errorf("New with an absent engine: %v", err)
	}
}

func TestConfigsSecurity(t *testing.T) {
	r := &Runtime{node: "n1"}
	uid, gid := int64(1000), int64(2000)
	tests := []struct {
		name     string
		spec     runtime.ContainerSpec
		user     string
		rofs     bool
		security []string
	}{
		{"none", runtime.ContainerSpec{}, "", false, nil},
		{"user", runtime.ContainerSpec{RunAsUser: &uid}, "1000", false, nil},
		{"user and group", runtime.ContainerSpec{RunAsUser: &uid, RunAsGroup: &gid}, "1000:2000", false, nil},
		{"read-only root, no new privileges", runtime.ContainerSpec{ReadOnlyRootFilesystem: true, NoNewPrivileges: true}, "", true, []string{"no-new-privileges"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Name, tt.spec.Image = "c", "img:v1"
			cfg, hc, err := r.configs(tt.spec, "")
			if err != nil {
				t.Fatal(err)
			}
			if cfg.User != tt.user || hc.ReadonlyRootfs != tt.rofs || fmt.Sprint(hc.SecurityOpt) != fmt.Sprint(tt.security) {
				t.Errorf("user %q rofs %v securityOpt %v; want %q %v %v", cfg.User, hc.ReadonlyRootfs, hc.SecurityOpt, tt.user, tt.rofs, tt.security)
			}
		})
	}
}

// TestConfigsPodSpec: the pod spec fields of published DaemonSets as the
// engine is asked for them.
func TestConfigsPodSpec(t *testing.T) {
	r := &Runtime{node: "n1"}
	profile := filepath.Join(t.TempDir(), "audit.json")
	if err := os.WriteFile(profile, []byte("{\n  \"defaultAction\": \"SCMP_ACT_LOG\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gid := int64(5)
	spec := runtime.ContainerSpec{
		Name: "c", Image: "img:v1", HostPID: true, Privileged: true, ReadOnlyRootFilesystem: true,
		CapAdd: []string{"NET_ADMIN", "SYS_TIME"}, CapDrop: []string{"ALL"}, RunAsGroup: &gid, Seccomp: profile,
		Mounts: []runtime.Mount{
			{Type: runtime.MountBind, Source: "/var/lib/kubelet", Target: "/var/lib/kubelet", Propagation: runtime.PropagationBidirectional},
			{Type: runtime.MountBind, Source: "/sys", Target: "/sys", ReadOnly: true, Propagation: runtime.PropagationHostToContainer},
			{Type: runtime.MountBind, Source: "/etc", Target: "/host/etc", ReadOnly: true},
			{Type: runtime.MountBind, Source: "/run", Target: "/run"},
		},
	}
	cfg, hc, err := r.configs(spec, "1000:1000")
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("user=%s pid=%s privileged=%v rofs=%v capAdd=%v capDrop=%v secopt=%v binds=%v",
		cfg.User, hc.PidMode, hc.Privileged, hc.ReadonlyRootfs, hc.CapAdd, hc.CapDrop, hc.SecurityOpt, hc.Binds)
	want := `user=1000:5 pid=host privileged=true rofs=true capAdd=[NET_ADMIN SYS_TIME] capDrop=[ALL] ` +
		`secopt=[seccomp={"defaultAction":"SCMP_ACT_LOG"}] ` +
		`binds=[/var/lib/kubelet:/var/lib/kubelet:rshared /sys:/sys:ro,rslave /etc:/host/etc:ro /run:/run]`
	if got != want {
		t.Errorf("configs:\n got %s\nwant %s", got, want)
	}

	for _, tt := range []struct{ seccomp, want string }{
		{"", "[]"}, {runtime.SeccompRuntimeDefault, "[]"}, {runtime.SeccompUnconfined, "[seccomp=unconfined]"},
	} {
		_, hc, err := r.configs(runtime.ContainerSpec{Name: "c", Image: "img:v1", Seccomp: tt.seccomp}, "")
		if err != nil || fmt.Sprint(hc.SecurityOpt) != tt.want {
			t.Errorf("seccomp %q: securityOpt %v, %v; want %s", tt.seccomp, hc.SecurityOpt, err, tt.want)
		}
	}
	for imageUser, want := range map[string]string{"": "0:5", "nobody": "nobody:5", "7": "7:5"} {
		cfg, _, err := r.configs(runtime.ContainerSpec{Name: "c", Image: "img:v1", RunAsGroup: &gid}, imageUser)
		if err != nil || cfg.User != want {
			t.Errorf("runAsGroup 5 on image user %q: User %q, %v; want %q", imageUser, cfg.User, err, want)
		}
	}
}
