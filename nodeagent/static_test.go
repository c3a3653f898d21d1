package nodeagent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	clientfake "github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/nodeagent/runtime"
	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
	"github.com/everynode/everynode/resources"
)

const webManifest = `# a static pod
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: app
    image: busybox:1.36
    command: ["sleep", "infinity"]
`

const multiManifest = `apiVersion: v1
kind: Pod
metadata: {name: db, namespace: kube-system}
spec:
  containers: [{name: db, image: busybox:1.36}]
---
apiVersion: v1
kind: Service
metadata: {name: skipped}
---
# nothing here
---
apiVersion: v1
kind: Pod
metadata: {name: cache}
spec:
  containers: [{name: cache, image: busybox:1.36}]
`

func writeManifest(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// withManifests reconfigures e's agent with a manifest directory.
func (e *env) withManifests(dir string) {
	e.reconfigure(func(c *Config) { c.ManifestDir = dir; c.DataDir = e.t.TempDir() })
}

// staticRunning returns the running containers of a static pod by its
// (node-suffixed) name.
func (e *env) staticRunning(name string) []runtime.Container {
	var out []runtime.Container
	for _, c := range e.containers(runtime.Labels{runtime.LabelNode: testNode, runtime.LabelPodName: name}) {
		if c.State == runtime.StateRunning {
			out = append(out, c)
		}
	}
	return out
}

func (e *env) mirror(name string) *corev1.Pod {
	o, err := e.api.Client.Get(context.Background(), resources.Pods, "default", name)
	if err != nil {
		return nil
	}
	return o.(*corev1.Pod)
}

func TestStaticPodsRunWithoutAPI(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	dir := t.TempDir()
	writeManifest(t, dir, "web.yaml", webManifest)
	writeManifest(t, dir, "multi.yml", multiManifest)
	writeManifest(t, dir, "notes.txt", "not a manifest")
	e.api.Fail("*", "*", errUnreachable) // no API at all, ever
	e.withManifests(dir)
	e.run()
	eventually(t, "three static pods running", func() bool {
		return len(e.staticRunning("web-n1")) == 1 && len(e.staticRunning("db-n1")) == 1 && len(e.staticRunning("cache-n1")) == 1
	})
	db := e.staticRunning("db-n1")[0]
	if db.Labels[runtime.LabelPodNamespace] != "kube-system" || db.Labels[runtime.LabelContainer] != "db" {
		t.Errorf("db labels %v", db.Labels)
	}
	// Removing the file stops its pods, even with no API.
	if err := os.Remove(filepath.Join(dir, "multi.yml")); err != nil {
		t.Fatal(err)
	}
	e.stepUntil("the removed file's pods stopped", time.Second, func() bool {
		return len(e.containers(runtime.Labels{runtime.LabelPodName: "db-n1"})) == 0 &&
			len(e.containers(runtime.Labels{runtime.LabelPodName: "cache-n1"})) == 0
	})
	if len(e.staticRunning("web-n1")) != 1 {
		t.Error("web stopped with the other file")
	}
}

func TestStaticPodMirrorLifecycle(t *testing.T) {
	e := newEnv(t, rtfake.Config{IP: "10.88.0.3"})
	dir := t.TempDir()
	writeManifest(t, dir, "web.yaml", webManifest)
	e.withManifests(dir)
	e.run()

	var mirror *corev1.Pod
	e.stepUntil("the mirror pod with a running status", time.Second, func() bool {
		mirror = e.mirror("web-n1")
		return mirror != nil && len(mirror.Status.ContainerStatuses) == 1 && mirror.Status.ContainerStatuses[0].State.Running != nil
	})
	c := e.staticRunning("web-n1")
	if len(c) != 1 {
		t.Fatalf("static pod containers %+v", c)
	}
	staticUID := c[0].Labels[runtime.LabelPodUID]
	if mirror.Annotations[AnnotationConfigMirror] != staticUID || mirror.Annotations[AnnotationConfigSource] != "file" ||
		mirror.Spec.NodeName != testNode || mirror.Labels["app"] != "web" {
		t.Errorf("mirror pod meta %+v spec.nodeName %q", mirror.ObjectMeta, mirror.Spec.NodeName)
	}
	node := e.node()
	if refs := mirror.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].Name != testNode || refs[0].UID != node.UID {
		t.Errorf("mirror owner references %+v", refs)
	}
	if mirror.UID == types.UID(staticUID) {
		t.Error("the mirror pod has the static pod's UID")
	}
	if s := mirror.Status; s.Phase != corev1.PodRunning || s.PodIP != "10.88.0.3" || s.ContainerStatuses[0].ContainerID != "fake://"+c[0].ID {
		t.Errorf("mirror status %+v", s)
	}

	// Deleting the mirror through the API does not stop the static pod: the
	// mirror comes back.
	if _, err := e.api.Delete(context.Background(), resources.Pods, "default", "web-n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.stepUntil("the mirror pod re-created", time.Second, func() bool {
		m := e.mirror("web-n1")
		return m != nil && m.UID != mirror.UID && len(m.Status.ContainerStatuses) == 1
	})
	if now := e.staticRunning("web-n1"); len(now) != 1 || now[0].ID != c[0].ID {
		t.Errorf("static pod restarted by the mirror's deletion: %+v", now)
	}

	// An edit restarts the pod under a new UID, and the mirror follows.
	writeManifest(t, dir, "web.yaml", strings.Replace(webManifest, `["sleep", "infinity"]`, `["sleep", "3600"]`, 1))
	e.stepUntil("the edited static pod running", time.Second, func() bool {
		now := e.staticRunning("web-n1")
		return len(now) == 1 && now[0].ID != c[0].ID &&
			len(e.containers(runtime.Labels{runtime.LabelPodUID: staticUID})) == 0
	})
	newUID := e.staticRunning("web-n1")[0].Labels[runtime.LabelPodUID]
	if newUID == staticUID {
		t.Fatal("the edit kept the UID")
	}
	e.stepUntil("the mirror of the edited pod", time.Second, func() bool {
		m := e.mirror("web-n1")
		return m != nil && m.Annotations[AnnotationConfigMirror] == newUID && len(m.Status.ContainerStatuses) == 1 &&
			m.Status.ContainerStatuses[0].State.Running != nil && m.Spec.Containers[0].Command[1] == "3600"
	})

	// Removing the file stops the pod and deletes the mirror.
	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	e.stepUntil("the static pod stopped and its mirror deleted", time.Second, func() bool {
		return len(e.containers(runtime.Labels{runtime.LabelPodName: "web-n1"})) == 0 && e.mirror("web-n1") == nil
	})
}

func TestStaticPodMirrorAfterAPIReturns(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	dir := t.TempDir()
	writeManifest(t, dir, "web.yaml", webManifest)
	// A stale mirror of a static pod whose file is gone, from an earlier run.
	stale := newPod("old-n1", withAnnotations(AnnotationConfigMirror, "0000"))
	if err := e.api.Seed(stale); err != nil {
		t.Fatal(err)
	}
	e.api.Fail("*", "*", errUnreachable)
	e.withManifests(dir)
	e.run()
	eventually(t, "the static pod running offline", func() bool { return len(e.staticRunning("web-n1")) == 1 })
	e.api.Fail("*", "*", nil)
	e.stepUntil("the mirror published and the stale one removed", time.Second, func() bool {
		m := e.mirror("web-n1")
		return m != nil && len(m.Status.ContainerStatuses) == 1 && e.mirror("old-n1") == nil
	})
	// The stale mirror was never run as a pod.
	if n := len(e.containers(runtime.Labels{runtime.LabelPodName: "old-n1"})); n != 0 {
		t.Errorf("a mirror pod was run: %d containers", n)
	}
}

func TestStaticManifestParsing(t *testing.T) {
	pods, warnings, err := parseManifest("/m/multi.yaml", []byte(multiManifest), testNode)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 2 || len(warnings) != 1 || !strings.Contains(warnings[0], "Service") {
		t.Fatalf("pods %d warnings %v", len(pods), warnings)
	}
	db := pods[0]
	if db.Name != "db-n1" || db.Namespace != "kube-system" || db.Spec.NodeName != testNode ||
		db.Annotations[AnnotationConfigSource] != "file" || db.Annotations[AnnotationConfigHash] != string(db.UID) {
		t.Errorf("db %+v", db.ObjectMeta)
	}
	if db.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("restartPolicy %q, want the API default Always", db.Spec.RestartPolicy)
	}
	if pods[1].Namespace != "default" {
		t.Errorf("default namespace not applied: %q", pods[1].Namespace)
	}

	uid := func(path, content, node string) types.UID {
		t.Helper()
		pods, _, err := parseManifest(path, []byte(content), node)
		if err != nil || len(pods) != 1 {
			t.Fatalf("parse: %v %d", err, len(pods))
		}
		return pods[0].UID
	}
	base := uid("/m/web.yaml", webManifest, testNode)
	if uid("/m/web.yaml", webManifest, testNode) != base {
		t.Error("UID not stable")
	}
	if uid("/m/web.yaml", "# comment only change\n"+webManifest, testNode) != base {
		t.Error("a comment changed the UID")
	}
	for what, other := range map[string]types.UID{
		"node":    uid("/m/web.yaml", webManifest, "n2"),
		"file":    uid("/m/other.yaml", webManifest, testNode),
		"content": uid("/m/web.yaml", strings.Replace(webManifest, "1.36", "1.37", 1), testNode),
	} {
		if other == base {
			t.Errorf("another %s gave the same UID", what)
		}
	}

	for _, tc := range []struct{ name, doc, wantErr string }{
		{"no name", "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: a, image: b}]}\n", "metadata.name"},
		{"no containers", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", "at least one container"},
		{"no image", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: a}]}\n", "no image"},
		{"duplicate container", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: a, image: b}, {name: a, image: b}]}\n", "used twice"},
		{"bad name", "apiVersion: v1\nkind: Pod\nmetadata: {name: X_Y}\nspec: {containers: [{name: a, image: b}]}\n", "pod name"},
		{"bad yaml", "apiVersion: v1\nkind: Pod\nmetadata: [\n", "document 1"},
		{"bad field type", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: 3}\n", "document 1"},
	} {
		if _, _, err := parseManifest("/m/x.yaml", []byte(tc.doc), testNode); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestStaticScanKeepsLastGoodVersion(t *testing.T) {
	dir := t.TempDir()
	s := newStaticPods(dir, testNode, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError + 1})))
	writeManifest(t, dir, "web.yaml", webManifest)
	pods, changed := s.scan()
	if !changed || len(pods) != 1 {
		t.Fatalf("first scan: %d pods, changed %v", len(pods), changed)
	}
	uid := pods[0].UID
	if _, changed := s.scan(); changed {
		t.Error("an unchanged directory reported a change")
	}
	writeManifest(t, dir, "web.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [half written")
	pods, _ = s.scan()
	if len(pods) != 1 || pods[0].UID != uid {
		t.Errorf("a broken edit dropped the pod: %+v", pods)
	}
	// Two files naming the same pod: the first (by file name) runs.
	writeManifest(t, dir, "web.yaml", webManifest)
	writeManifest(t, dir, "z-web.yaml", strings.Replace(webManifest, "1.36", "1.37", 1))
	pods, _ = s.scan()
	if len(pods) != 1 || pods[0].UID != uid {
		t.Errorf("duplicate names: %d pods", len(pods))
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if pods, changed := s.scan(); !changed || len(pods) != 0 {
		t.Errorf("directory removed: %d pods, changed %v", len(pods), changed)
	}
}

// boundPodDeleter deletes pods as the API server does for pods bound to a
// node: a delete with a grace period only marks the pod (deletionTimestamp)
// and the node's agent finishes it with grace 0.
type boundPodDeleter struct{ *clientfake.Client }

const holdFinalizer = "test.everynode.io/graceful"

func (c boundPodDeleter) Delete(ctx context.Context, r *resources.Resource, ns, name string, opts metav1.DeleteOptions) (client.Object, error) {
	if r != resources.Pods {
		return c.Client.Delete(ctx, r, ns, name, opts)
	}
	obj, err := c.Client.Get(ctx, r, ns, name)
	if err != nil {
		return nil, err
	}
	p := obj.(*corev1.Pod)
	if pre := opts.Preconditions; pre != nil && pre.UID != nil && *pre.UID != p.UID {
		return nil, apierrors.NewConflict(r.GroupResource(), name, errors.New("precondition failed: UID"))
	}
	if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds > 0 {
		p.Finalizers = append(p.Finalizers, holdFinalizer)
		if _, err := c.Client.Update(ctx, p, client.WriteOptions{}); err != nil {
			return nil, err
		}
		return c.Client.Delete(ctx, r, ns, name, opts)
	}
	if p.DeletionTimestamp != nil && slices.Contains(p.Finalizers, holdFinalizer) {
		p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == holdFinalizer })
		return c.Client.Update(ctx, p, client.WriteOptions{})
	}
	return c.Client.Delete(ctx, r, ns, name, opts)
}

func TestStaticMirrorGracefulDeletionRecreates(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	dir := t.TempDir()
	writeManifest(t, dir, "web.yaml", webManifest)
	api := boundPodDeleter{Client: e.api.Client}
	e.reconfigure(func(c *Config) { c.ManifestDir = dir; c.Client = api })
	e.run()
	var mirror *corev1.Pod
	e.stepUntil("the mirror pod", time.Second, func() bool {
		mirror = e.mirror("web-n1")
		return mirror != nil && len(mirror.Status.ContainerStatuses) == 1
	})
	id := e.staticRunning("web-n1")[0].ID
	if _, err := api.Delete(context.Background(), resources.Pods, "default", "web-n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The marked mirror only goes away when the agent deletes it with
	// grace 0 (boundPodDeleter never finishes a graceful delete itself).
	e.stepUntil("the marked mirror replaced by a fresh one", time.Second, func() bool {
		m := e.mirror("web-n1")
		return m != nil && m.UID != mirror.UID && m.DeletionTimestamp == nil && len(m.Status.ContainerStatuses) == 1
	})
	if now := e.staticRunning("web-n1"); len(now) != 1 || now[0].ID != id {
		t.Errorf("static pod restarted: %+v", now)
	}
}
