package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

// fakeTokens is a TokenRequester answering like the API server's
// TokenRequest, with numbered tokens.
type fakeTokens struct {
	clock clock.Clock
	mu    sync.Mutex
	paths []string
	reqs  []authenticationv1.TokenRequest
}

func (f *fakeTokens) RawPost(_ context.Context, path string, body []byte) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var tr authenticationv1.TokenRequest
	if err := json.Unmarshal(body, &tr); err != nil {
		return nil, err
	}
	f.paths = append(f.paths, path)
	f.reqs = append(f.reqs, tr)
	tr.Status.Token = fmt.Sprintf("token-%d", len(f.reqs))
	tr.Status.ExpirationTimestamp = metav1.NewTime(f.clock.Now().Add(time.Duration(*tr.Spec.ExpirationSeconds) * time.Second))
	return json.Marshal(tr)
}

func TestServiceAccountCredentials(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	tokens := &fakeTokens{clock: e.clock}
	e.agent.tokens.req = tokens
	e.agent.cfg.ClusterCA = []byte("CA PEM")
	e.agent.cfg.APIServer = "https://192.0.2.1:6443"
	pod := newPod("in-cluster", func(p *corev1.Pod) {
		p.Spec.ServiceAccountName = "robot"
		p.Spec.Volumes = []corev1.Volume{{Name: "vault", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "vault", Path: "t", ExpirationSeconds: ptr(int64(600))}}}}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "vault", MountPath: "/vault"}}
	})
	spec, err := e.agent.containerSpec(t.Context(), pod, &pod.Spec.Containers[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, v := range spec.Env {
		env[v.Name] = v.Value
	}
	if env["KUBERNETES_SERVICE_HOST"] != "192.0.2.1" || env["KUBERNETES_SERVICE_PORT"] != "6443" ||
		env["KUBERNETES_SERVICE_PORT_HTTPS"] != "6443" || env["KUBERNETES_PORT_6443_TCP_ADDR"] != "192.0.2.1" {
		t.Errorf("env %v", env)
	}
	var sa string
	for _, m := range spec.Mounts {
		if m.Target == serviceAccountMountPath && m.ReadOnly {
			sa = m.Source
		}
	}
	if sa == "" {
		t.Fatalf("no credentials mount in %+v", spec.Mounts)
	}
	read := func(dir, name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if read(sa, "ca.crt") != "CA PEM" || read(sa, "namespace") != "default" || read(sa, "token") == "" {
		t.Errorf("credentials: %q %q %q", read(sa, "ca.crt"), read(sa, "namespace"), read(sa, "token"))
	}
	if len(tokens.reqs) != 2 {
		t.Fatalf("%d token requests, want 2", len(tokens.reqs))
	}
	for i, r := range tokens.reqs {
		if tokens.paths[i] != "/api/v1/namespaces/default/serviceaccounts/robot/token" || r.Spec.BoundObjectRef == nil ||
			r.Spec.BoundObjectRef.Name != "in-cluster" || r.Spec.BoundObjectRef.UID != pod.UID {
			t.Errorf("request %d: %s %+v", i, tokens.paths[i], r.Spec)
		}
	}
	vault := read(e.agent.volumeDir(pod, "vault"), "t")
	// Refreshed at 80% of the lifetime (600 s), not before.
	e.clock.Step(479 * time.Second)
	e.agent.refreshVolumes(t.Context(), pod)
	if got := read(e.agent.volumeDir(pod, "vault"), "t"); got != vault {
		t.Errorf("token refreshed before 80%% of its lifetime")
	}
	e.clock.Step(2 * time.Second)
	e.agent.refreshVolumes(t.Context(), pod)
	if got := read(e.agent.volumeDir(pod, "vault"), "t"); got == vault {
		t.Errorf("token not refreshed after 80%% of its lifetime")
	}
	if fi, err := os.Stat(filepath.Join(e.agent.volumeDir(pod, "vault"), "t")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode: %v %v", fi, err)
	}
	kept, _ := filepath.Glob(filepath.Join(e.agent.cfg.DataDir, objectsDir, tokensDir, "*.json"))
	if len(kept) != 2 {
		t.Errorf("kept tokens %v", kept)
	}
	e.agent.forget(pod.UID)
	if kept, _ = filepath.Glob(filepath.Join(e.agent.cfg.DataDir, objectsDir, tokensDir, "*.json")); len(kept) != 0 {
		t.Errorf("tokens kept after the pod went: %v", kept)
	}

	// Opted out; and a loopback server is not handed to a bridge pod.
	e.agent.cfg.APIServer = "https://127.0.0.1:6443"
	off := newPod("off", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = ptr(false) })
	spec, err = e.agent.containerSpec(t.Context(), off, &off.Spec.Containers[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Mounts) != 0 || len(spec.Env) != 0 {
		t.Errorf("opted-out pod: mounts %+v env %+v", spec.Mounts, spec.Env)
	}
	off.Spec.HostNetwork = true
	if spec, err = e.agent.containerSpec(t.Context(), off, &off.Spec.Containers[0], 0); err != nil || len(spec.Env) == 0 || spec.Env[0].Value != "127.0.0.1" {
		t.Errorf("host-network pod env %+v (%v)", spec.Env, err)
	}
}
