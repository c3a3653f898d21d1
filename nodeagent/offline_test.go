package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	clientfake "github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent/runtime"
	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
	"github.com/everynode/everynode/resources"
)

// errUnreachable is what every call returns while the network is cut.
var errUnreachable = apierrors.NewServiceUnavailable("test: the API server is unreachable")

func clientWrite() client.WriteOptions { return client.WriteOptions{} }

// offlineEnv is an agent with a data dir behind a network that can be cut.
type offlineEnv struct {
	*env
	net         *clientfake.Cuttable
	dataDir     string
	manifestDir string // optional
}

func newOfflineEnv(t *testing.T, pods ...*corev1.Pod) *offlineEnv {
	t.Helper()
	e := newEnv(t, rtfake.Config{IP: "10.88.0.7"})
	for _, p := range pods {
		if err := e.api.Seed(p); err != nil {
			t.Fatal(err)
		}
	}
	o := &offlineEnv{env: e, net: &clientfake.Cuttable{Client: e.api.Client}, dataDir: t.TempDir()}
	o.restart()
	return o
}

// restart builds a new agent on the same API, runtime, clock and data dir,
// as a restarted agent process would be (call run to start it).
func (o *offlineEnv) restart() {
	o.reconfigure(func(c *Config) {
		c.Client = o.net
		c.DataDir = o.dataDir
		c.ManifestDir = o.manifestDir
	})
}

// running returns the running containers of a pod by name.
func (o *offlineEnv) running(pod string) []runtime.Container {
	var out []runtime.Container
	for _, c := range o.containers(runtime.Labels{runtime.LabelNode: testNode, runtime.LabelPodName: pod}) {
		if c.State == runtime.StateRunning {
			out = append(out, c)
		}
	}
	return out
}

func (o *offlineEnv) apiStatus(name string) (corev1.ContainerStatus, bool) {
	o.t.Helper()
	p, err := o.net.Client.Get(context.Background(), resources.Pods, "default", name)
	if err != nil {
		return corev1.ContainerStatus{}, false
	}
	s := p.(*corev1.Pod).Status.ContainerStatuses
	if len(s) != 1 {
		return corev1.ContainerStatus{}, false
	}
	return s[0], true
}

func (o *offlineEnv) storedPods() map[string]bool {
	b, err := os.ReadFile(filepath.Join(o.dataDir, "pods", assignedFile))
	if err != nil {
		return nil
	}
	var sp storedPods
	if err := json.Unmarshal(b, &sp); err != nil {
		o.t.Fatalf("stored pods: %v", err)
	}
	out := map[string]bool{}
	for _, p := range sp.Pods {
		out[p.Name] = true
	}
	return out
}

func TestOfflineCrashedContainerRestarted(t *testing.T) {
	o := newOfflineEnv(t, newPod("crashy", withAnnotations(rtfake.AnnotationExitAfter, "30s", rtfake.AnnotationExitCode, "1")))
	o.run()
	eventually(t, "pod running with its status written", func() bool {
		s, ok := o.apiStatus("crashy")
		return ok && s.State.Running != nil
	})

	o.net.Cut()
	o.stepUntil("the crashed container restarted while offline", time.Second, func() bool {
		r := o.running("crashy")
		return len(r) == 1 && r[0].Labels[runtime.LabelAttempt] == "1"
	})
	if s, _ := o.apiStatus("crashy"); s.RestartCount != 0 {
		t.Errorf("a status was written while offline: %+v", s)
	}

	o.net.Restore()
	o.stepUntil("the restart reported after reconnect", time.Second, func() bool {
		s, ok := o.apiStatus("crashy")
		return ok && s.RestartCount >= 1 && s.State.Running != nil
	})
	eventually(t, "the status showing the running container", func() bool {
		s, _ := o.apiStatus("crashy")
		r := o.running("crashy")
		return len(r) == 1 && s.ContainerID == "fake://"+r[0].ID
	})
}

func TestOfflineAgentRestartAndReconnect(t *testing.T) {
	o := newOfflineEnv(t,
		newPod("web"),
		newPod("gone"),
		newPod("crashy", withAnnotations(rtfake.AnnotationExitAfter, "60s", rtfake.AnnotationExitCode, "1")))
	stop := o.run()
	eventually(t, "three pods running with statuses written", func() bool {
		for _, name := range []string{"web", "gone", "crashy"} {
			if s, ok := o.apiStatus(name); !ok || s.State.Running == nil {
				return false
			}
		}
		return true
	})
	if kept := o.storedPods(); !kept["web"] || !kept["gone"] || !kept["crashy"] {
		t.Fatalf("pods kept on disk: %v", kept)
	}
	ids := map[string]string{}
	for _, name := range []string{"web", "gone", "crashy"} {
		ids[name] = o.running(name)[0].ID
	}

	// The server goes away, then the agent restarts.
	o.net.Cut()
	stop()
	// Meanwhile "gone" is deleted from the API (the agent cannot see it).
	o.net.Restore()
	zero := int64(0)
	if _, err := o.net.Client.Delete(context.Background(), resources.Pods, "default", "gone", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	o.net.Cut()
	o.rt.ResetCalls()
	o.restart()
	o.run()

	// The restarted agent re-adopts every container without recreating it.
	eventually(t, "the containers inspected by the restarted agent", func() bool {
		seen := map[string]bool{}
		for _, c := range o.rt.Calls() {
			if c.Method == "ContainerStatus" {
				seen[c.Subject] = true
			}
		}
		return seen[ids["web"]] && seen[ids["gone"]] && seen[ids["crashy"]]
	})
	for name, id := range ids {
		if r := o.running(name); len(r) != 1 || r[0].ID != id {
			t.Errorf("pod %s: running %+v, want only the adopted container %s", name, r, id)
		}
	}
	for _, m := range []string{"CreateContainer", "StartContainer", "StopContainer", "RemoveContainer"} {
		if n := o.rt.CountCalls(m); n != 0 {
			t.Errorf("the restarted agent called %s %d times while re-adopting", m, n)
		}
	}

	// Still offline, the crashing container is restarted.
	o.stepUntil("crashy restarted while offline", time.Second, func() bool {
		r := o.running("crashy")
		return len(r) == 1 && r[0].Labels[runtime.LabelAttempt] == "1"
	})

	// The server returns: statuses written, the deleted pod stopped, no
	// duplicates, and nothing restarted needlessly.
	o.net.Restore()
	o.stepUntil("the reconnect reconciled", time.Second, func() bool {
		s, ok := o.apiStatus("crashy")
		return ok && s.RestartCount == 1 && s.State.Running != nil &&
			len(o.containers(runtime.Labels{runtime.LabelPodName: "gone"})) == 0
	})
	if r := o.running("web"); len(r) != 1 || r[0].ID != ids["web"] {
		t.Errorf("web: running %+v, want the original container %s", r, ids["web"])
	}
	if s, _ := o.apiStatus("web"); s.RestartCount != 0 || s.ContainerID != "fake://"+ids["web"] {
		t.Errorf("web status %+v", s)
	}
	if r := o.running("crashy"); len(r) != 1 {
		t.Errorf("crashy: %d running containers", len(r))
	}
	if n := o.rt.CountCalls("CreateContainer"); n != 1 {
		t.Errorf("%d containers created since the agent restarted, want 1 (crashy's restart)", n)
	}
	eventually(t, "the deleted pod dropped from disk", func() bool {
		kept := o.storedPods()
		return kept["web"] && !kept["gone"]
	})
}

func TestOfflineStartWithoutDiskCopyTouchesNothing(t *testing.T) {
	o := newOfflineEnv(t)
	// A container of this node from an earlier run, with no pod known: with
	// the server down and nothing on disk, the agent cannot tell whether it
	// is still wanted, so it leaves it alone.
	ctx := context.Background()
	id, err := o.rt.CreateContainer(ctx, runtime.ContainerSpec{Name: "app", Image: "busybox:1.36", Labels: map[string]string{
		runtime.LabelNode: testNode, runtime.LabelPodUID: "uid-unknown", runtime.LabelContainer: "app", runtime.LabelAttempt: "0",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.rt.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	o.net.Cut()
	o.run()
	o.stepUntil("five offline relists", time.Second, func() bool { return o.rt.CountCalls("ListContainers") >= 5 })
	testkit.Consistently(t, 100*time.Millisecond, func() error {
		if n := o.rt.CountCalls("RemoveContainer"); n != 0 {
			return fmt.Errorf("removed %d containers without knowing the desired pods", n)
		}
		return nil
	})
	// Once the API answers (no such pod), the container is swept.
	o.net.Restore()
	o.stepUntil("the unknown container swept", time.Second, func() bool {
		return len(o.containers(runtime.Labels{runtime.LabelPodUID: "uid-unknown"})) == 0
	})
}

func TestPodStore(t *testing.T) {
	dir := t.TempDir()
	s := newPodStore(dir, testNode)
	if _, ok, err := s.load(); ok || err != nil {
		t.Fatalf("empty store: ok %v err %v", ok, err)
	}
	p := newPod("kept")
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
	if err := s.save(map[types.UID]*corev1.Pod{p.UID: p}); err != nil {
		t.Fatal(err)
	}
	pods, ok, err := s.load()
	if err != nil || !ok || len(pods) != 1 || pods[0].Name != "kept" || pods[0].Spec.Containers[0].Image != "busybox:1.36" {
		t.Fatalf("load: %v %v %+v", ok, err, pods)
	}
	if pods[0].ManagedFields != nil || p.ManagedFields == nil {
		t.Errorf("managedFields: stored %v, caller's %v", pods[0].ManagedFields, p.ManagedFields)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "pods"))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	// Another node's copy, or a torn file, is not used.
	if _, ok, err := newPodStore(dir, "other").load(); ok || err == nil {
		t.Errorf("another node's copy: ok %v err %v", ok, err)
	}
	if err := os.WriteFile(s.path, []byte(`{"node":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.load(); ok || err == nil {
		t.Errorf("torn file: ok %v err %v", ok, err)
	}
}

func TestOfflineRestartWithStaticAndAssignedPods(t *testing.T) {
	o := newOfflineEnv(t, newPod("web"))
	o.manifestDir = t.TempDir()
	writeManifest(t, o.manifestDir, "cache.yaml", strings.Replace(webManifest, "name: web", "name: cache", 1))
	o.restart()
	stop := o.run()
	o.stepUntil("the assigned and the static pod running, both reported", time.Second, func() bool {
		s, ok := o.apiStatus("web")
		m, mok := o.apiStatus("cache-n1")
		return ok && s.State.Running != nil && mok && m.State.Running != nil
	})
	ids := map[string]string{"web": o.running("web")[0].ID, "cache-n1": o.running("cache-n1")[0].ID}

	o.net.Cut()
	stop()
	o.rt.ResetCalls()
	o.restart()
	o.run()
	o.stepUntil("five offline relists", time.Second, func() bool { return o.rt.CountCalls("ListContainers") >= 5 })
	eventually(t, "both pods' containers inspected", func() bool {
		seen := map[string]bool{}
		for _, c := range o.rt.Calls() {
			seen[c.Subject] = true
		}
		return seen[ids["web"]] && seen[ids["cache-n1"]]
	})
	for name, id := range ids {
		if r := o.running(name); len(r) != 1 || r[0].ID != id {
			t.Errorf("%s: running %+v, want the adopted %s", name, r, id)
		}
	}
	testkit.Consistently(t, 100*time.Millisecond, func() error {
		if n := o.rt.CountCalls("CreateContainer") + o.rt.CountCalls("RemoveContainer"); n != 0 {
			return fmt.Errorf("%d containers created or removed after an offline restart", n)
		}
		return nil
	})
}
