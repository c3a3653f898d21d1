package nodeagent

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/everynode/everynode/nodeagent/runtime"
	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

func TestContainerSpec(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	yes := true
	pod := newPod("spec", withAnnotations("a", "1"), func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "web"}
		p.Status.PodIP = "10.1.2.3"
		p.Spec.HostPID = true
		p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
		p.Spec.Volumes = []corev1.Volume{
			{Name: "logs", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log", Type: ptr(corev1.HostPathDirectoryOrCreate)}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		}
		c := &p.Spec.Containers[0]
		c.Command = []string{"/bin/app", "--node=$(NODE)"}
		c.Args = []string{"--pod=$(POD)", "$$(NODE)", "$(UNDEFINED)"}
		c.WorkingDir = "/work"
		c.Env = []corev1.EnvVar{
			{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
			{Name: "MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
			{Name: "CPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
			{Name: "GREETING", Value: "hello $(POD)"},
		}
		c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, HostPort: 80, Protocol: corev1.ProtocolTCP}}
		c.VolumeMounts = []corev1.VolumeMount{
			{Name: "logs", MountPath: "/host/log", ReadOnly: true, MountPropagation: ptr(corev1.MountPropagationHostToContainer)},
			{Name: "scratch", MountPath: "/scratch", SubPath: "x"},
			{Name: "mem", MountPath: "/dev/shm"},
		}
		c.Resources.Limits = corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("500m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		}
		c.SecurityContext = &corev1.SecurityContext{
			Privileged:   &yes,
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}},
		}
	})
	got, err := e.agent.containerSpec(t.Context(), pod, &pod.Spec.Containers[0], 3)
	if err != nil {
		t.Fatal(err)
	}
	want := runtime.ContainerSpec{
		Name: "app", Image: "busybox:1.36",
		Command:    []string{"/bin/app", "--node=n1"},
		Args:       []string{"--pod=spec", "$(NODE)", "$(UNDEFINED)"},
		WorkingDir: "/work",
		Hostname:   "spec",
		Env: []runtime.EnvVar{
			{Name: "NODE", Value: "n1"}, {Name: "POD", Value: "spec"}, {Name: "HOST_IP", Value: "192.0.2.10"},
			{Name: "POD_IP", Value: "10.1.2.3"}, {Name: "APP", Value: "web"}, {Name: "MEM", Value: "64"},
			{Name: "CPU", Value: "1"}, {Name: "GREETING", Value: "hello spec"},
		},
		Ports:   []runtime.Port{{Name: "http", ContainerPort: 8080, HostPort: 80, Protocol: "TCP"}},
		HostPID: true,
		Mounts: []runtime.Mount{
			{Type: runtime.MountBind, Source: "/var/log", Target: "/host/log", ReadOnly: true, Volume: "logs",
				HostPath: "/var/log", HostPathType: runtime.HostPathDirectoryOrCreate, Propagation: runtime.PropagationHostToContainer},
			{Type: runtime.MountEmptyDir, Source: filepath.Join(e.agent.cfg.DataDir, "pods", "uid-spec", "volumes", "scratch", "x"), Target: "/scratch", Volume: "scratch"},
			{Type: runtime.MountTmpfs, Target: "/dev/shm", Volume: "mem"},
		},
		Resources:  runtime.Resources{CPUMillis: 500, MemoryBytes: 64 << 20},
		Privileged: true,
		CapAdd:     []string{"NET_ADMIN"},
		CapDrop:    []string{"ALL"},
		Seccomp:    runtime.SeccompUnconfined,
		Labels: map[string]string{
			runtime.LabelNode: "n1", runtime.LabelPodNamespace: "default", runtime.LabelPodName: "spec",
			runtime.LabelPodUID: "uid-spec", runtime.LabelContainer: "app", runtime.LabelAttempt: "3",
		},
		Annotations: map[string]string{"a": "1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("containerSpec:\n got %+v\nwant %+v", got, want)
	}
}

func TestContainerSpecUnsupported(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*corev1.Pod)
		want string
	}{
		{"missing secret env", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}}}
		}, `secret "s" not found`},
		{"missing configMap envFrom", func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}}
		}, `configmap "c" not found`},
		{"missing configMap volume", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}}
		}, `MountVolume.SetUp failed for volume "cfg" : configmap "c" not found`},
		{"unsupported volume", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "nfs", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "x", Path: "/"}}}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "nfs", MountPath: "/nfs"}}
		}, "only hostPath, emptyDir, configMap, secret, downwardAPI and projected"},
		{"bad fieldPath", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nope"}}}}
		}, "unsupported fieldPath"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, rtfake.Config{})
			e.seed(newPod("bad", tt.mod))
			p, _ := e.sync("bad")
			s := cstatus(t, p)
			if waitingReason(s) != reasonCreateConfigError || !strings.Contains(s.State.Waiting.Message, tt.want) {
				t.Errorf("status %+v, want %s mentioning %q", s.State, reasonCreateConfigError, tt.want)
			}
			if n := e.rt.CountCalls("CreateContainer"); n != 0 {
				t.Errorf("%d creates", n)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "x", "B": "$(A)"}
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"$(A)", "x"},
		{"a$(A)b$(B)", "axb$(A)"},
		{"$$(A)", "$(A)"},
		{"$(C)", "$(C)"},
		{"$(A", "$(A"},
		{"cost $5", "cost $5"},
		{"end$", "end$"},
	}
	for _, tt := range tests {
		if got := expand(tt.in, vars); got != tt.want {
			t.Errorf("expand(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPullPolicyDefault(t *testing.T) {
	tests := map[string]corev1.PullPolicy{
		"busybox":                     corev1.PullAlways,
		"busybox:latest":              corev1.PullAlways,
		"busybox:1.36":                corev1.PullIfNotPresent,
		"localhost:5000/app":          corev1.PullAlways,
		"localhost:5000/app:v1":       corev1.PullIfNotPresent,
		"app@sha256:0123456789abcdef": corev1.PullIfNotPresent,
	}
	for image, want := range tests {
		if got := pullPolicy(&corev1.Container{Image: image}); got != want {
			t.Errorf("pullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}

// TestSubPathExprOfHostPathToCreate: a DirectoryOrCreate hostPath that does
// not exist yet, mounted with a subPathExpr, is made with its subPath before
// the container is created, as kubelet sets the volume up first.
func TestSubPathExprOfHostPathToCreate(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	host := filepath.Join(t.TempDir(), "not", "yet")
	pod := newPod("hp", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "logs", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: host, Type: ptr(corev1.HostPathDirectoryOrCreate)}}}}
		c := &p.Spec.Containers[0]
		c.Env = []corev1.EnvVar{{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "logs", MountPath: "/logs", SubPathExpr: "$(POD)"}}
	})
	got, err := e.agent.containerSpec(t.Context(), pod, &pod.Spec.Containers[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(host, "hp")
	if len(got.Mounts) == 0 || got.Mounts[0].Source != want {
		t.Fatalf("mounts %+v, want /logs from %s", got.Mounts, want)
	}
	if fi, err := os.Stat(want); err != nil || !fi.IsDir() {
		t.Errorf("subPath directory: %v %v", fi, err)
	}
}

// TestSubPathOfHostPath: a static subPath of a hostPath is prepared as any
// other (kubelet does it for every volume): a missing one is made, a file
// is bound as it is, and a link a container planted in the host directory
// cannot lead the bind outside it. The refusal's message is kubelet's and
// names no host path.
func TestSubPathOfHostPath(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	host, err := filepath.EvalSymlinks(t.TempDir()) // paths come back resolved
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "app.conf"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(host, "escape")); err != nil {
		t.Fatal(err)
	}
	spec := func(host, sub string) (runtime.ContainerSpec, error) {
		pod := newPod("hp", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data", SubPath: sub}}
		})
		return e.agent.containerSpec(t.Context(), pod, &pod.Spec.Containers[0], 0)
	}
	for sub, want := range map[string]string{"new/dir": filepath.Join(host, "new", "dir"), "app.conf": filepath.Join(host, "app.conf")} {
		got, err := spec(host, sub)
		if err != nil {
			t.Fatalf("subPath %q: %v", sub, err)
		}
		if len(got.Mounts) == 0 || got.Mounts[0].Source != want || got.Mounts[0].HostPath != host {
			t.Errorf("subPath %q: mounts %+v, want /data from %s", sub, got.Mounts, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(host, "new", "dir")); err != nil || !fi.IsDir() {
		t.Errorf("subPath directory: %v %v", fi, err)
	}
	for _, sub := range []string{"escape", "escape/x"} {
		got, err := spec(host, sub)
		if err == nil {
			t.Errorf("subPath %q through a link out of the hostPath: mounts %+v", sub, got.Mounts)
			continue
		}
		if want := `failed to prepare subPath for volumeMount "data" of container "app"`; err.Error() != want {
			t.Errorf("subPath %q: error %q, want %q", sub, err, want)
		}
	}
	if entries, err := os.ReadDir(outside); err != nil || len(entries) != 0 {
		t.Errorf("made outside the hostPath: %v %v", entries, err)
	}
	if _, err := spec(filepath.Join(t.TempDir(), "absent"), "x"); err == nil ||
		err.Error() != `failed to create subPath directory for volumeMount "data" of container "app"` {
		t.Errorf("subPath of a missing hostPath (no type): %v", err)
	}
}
