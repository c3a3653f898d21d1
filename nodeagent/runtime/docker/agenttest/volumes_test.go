package agenttest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	clientfake "github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/nodeagent/runtime"
	"github.com/everynode/everynode/resources"
)

// TestConfigMapVolumeOnDocker: on real Docker, a container reads its
// ConfigMap through a mounted volume; an edit of the ConfigMap shows up in
// the running container's file (not in a subPath mount, as with kubelet);
// then, after a power cut with the server unreachable, the restarted agent
// brings the pod back from its data dir with the same file contents and the
// Secret's env.
func TestConfigMapVolumeOnDocker(t *testing.T) {
	t.Parallel()
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cfg"},
		Data:       map[string]string{"k": "v1"},
	}
	sec := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sec"},
		Data:       map[string][]byte{"token": []byte("s3cret")},
	}
	api := &clientfake.Cuttable{Client: clientfake.New(cm, sec)}
	n := newNode(t, "volumes", api.Client)
	p := n.pod("reader", "-exit-after", "-1ns")
	p.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}
	c := &p.Spec.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}, {Name: "cfg", MountPath: "/pinned/k", SubPath: "k"}}
	c.Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "token"}}}}
	n.seed(p)
	dataDir := t.TempDir()
	start := func() func() {
		_, stop := n.run(nodeagent.Config{Client: api, DataDir: dataDir}, false)
		return stop
	}
	// cat reads a file from inside the pod's running container.
	cat := func(path string) (string, error) {
		l := n.containers(p)
		if len(l) != 1 {
			return "", fmt.Errorf("%d containers", len(l))
		}
		code, out, err := n.rt.Exec(context.Background(), l[0].ID, []string{"/testdaemon", "-cat", path})
		if err != nil || code != 0 {
			return "", fmt.Errorf("cat %s: exit %d, %v: %s", path, code, err, out)
		}
		return string(out), nil
	}
	expect := func(path, want string) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, func() error {
			got, err := cat(path)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s = %q, want %q", path, got, want)
			}
			return nil
		})
	}

	stop := start()
	n.wait("reader", "running", 30*time.Second, running)
	expect("/cfg/k", "v1")
	expect("/pinned/k", "v1")

	obj, err := api.Get(t.Context(), resources.ConfigMaps, "default", "cfg")
	if err != nil {
		t.Fatal(err)
	}
	edited := obj.(*corev1.ConfigMap)
	edited.Data["k"] = "v2"
	edit := time.Now()
	if _, err := api.Update(t.Context(), edited, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("/cfg/k", "v2")
	t.Logf("ConfigMap edit seen inside the running container after %s", time.Since(edit).Round(10*time.Millisecond))
	if got, err := cat("/pinned/k"); err != nil || got != "v1" {
		t.Errorf("subPath mount = %q (%v), want the content it was started with (v1)", got, err)
	}

	// Power cut: server unreachable, agent stopped, containers gone.
	api.Cut()
	stop()
	for _, c := range n.containers(p) {
		if err := n.rt.RemoveContainer(context.Background(), c.ID); err != nil {
			t.Fatal(err)
		}
	}
	start()
	expect("/cfg/k", "v2")
	l := n.containers(p)
	ins, err := engine.cli.ContainerInspect(t.Context(), l[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ins.Config.Env, "TOKEN=s3cret") {
		t.Errorf("env after restart offline lacks the Secret's value: %v", redact(ins.Config.Env))
	}
}

func redact(env []string) []string {
	out := make([]string, len(env))
	for i, e := range env {
		k, _, _ := strings.Cut(e, "=")
		out[i] = k + "=…"
	}
	return out
}

// TestEmptyDirWritableByAnyUserOnDocker: on real Docker, a container running
// as an unprivileged user (nobody, 65534) writes into its pod's emptyDir and
// into a subPath of it, as it can under kubelet, which makes both 0777; the
// file the init container wrote is mounted by itself into the app container
// with a subPath, as kubelet allows.
func TestEmptyDirWritableByAnyUserOnDocker(t *testing.T) {
	t.Parallel()
	n := newNode(t, "emptydir", clientfake.New())
	p := n.pod("writer", "-append", "/scratch/w=ok", "-exit-after", "-1ns")
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr(int64(65534)), RunAsGroup: ptr(int64(65534))}
	p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	p.Spec.InitContainers = []corev1.Container{{
		Name: "sub", Image: engine.image, ImagePullPolicy: corev1.PullIfNotPresent,
		Args:         []string{"-append", "/sub/w=init", "-exit-after", "0s"},
		VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/sub", SubPath: "a/b"}},
	}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"},
		{Name: "scratch", MountPath: "/conf/w", SubPath: "a/b/w"}}
	n.seed(p)
	n.start(nil)

	got := n.wait("writer", "running", 60*time.Second, running)
	if s := got.Status.InitContainerStatuses; len(s) != 1 || s[0].State.Terminated == nil || s[0].State.Terminated.ExitCode != 0 {
		t.Fatalf("init container writing to a subPath as uid 65534: %+v", s)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		l := n.containers(p)
		var app string
		for _, c := range l {
			if c.Labels[runtime.LabelContainer] == "app" && c.State == runtime.StateRunning {
				app = c.ID
			}
		}
		if app == "" {
			return fmt.Errorf("no app container among %d", len(l))
		}
		for path, want := range map[string]string{"/scratch/w": "ok\n", "/scratch/a/b/w": "init\n", "/conf/w": "init\n"} {
			code, out, err := n.rt.Exec(context.Background(), app, []string{"/testdaemon", "-cat", path})
			if err != nil || code != 0 || string(out) != want {
				return fmt.Errorf("cat %s: exit %d, %v: %q, want %q", path, code, err, out, want)
			}
		}
		return nil
	})
	if r := n.get("writer").Status.ContainerStatuses[0].RestartCount; r != 0 {
		t.Errorf("app container restarted %d times: its write to the emptyDir failed", r)
	}
}
