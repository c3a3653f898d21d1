package store

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/resources"
)

// testLogger writes the store's warnings to stderr (not t.Log: etcd may log
// from its own goroutines after a test has finished).
func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// openTest opens a store on a fresh embedded etcd in a temp dir on free
// ports, closed when the test ends.
func openTest(t testing.TB, mods ...func(*Config)) *Store {
	t.Helper()
	cfg := Config{
		DataDir:         t.TempDir(),
		CompactInterval: -1,
		Logger:          testLogger(),
		unsafeNoFsync:   true,
	}
	for _, m := range mods {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newPod(ns, name, node string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}},
		},
	}
}

func mustCreate(t testing.TB, s *Store, r *resources.Resource, obj resources.Object) resources.Object {
	t.Helper()
	out, err := s.Create(testCtx(t), r, obj)
	if err != nil {
		t.Fatalf("Create %s/%s: %v", obj.GetNamespace(), obj.GetName(), err)
	}
	return out
}

func rvOf(t testing.TB, obj resources.Object) int64 {
	t.Helper()
	rv, err := parseRV(obj.GetResourceVersion())
	if err != nil || rv == 0 {
		t.Fatalf("bad resourceVersion %q on %s", obj.GetResourceVersion(), obj.GetName())
	}
	return rv
}

// next receives one event or fails after a deadline.
func next(t testing.TB, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case e, ok := <-w.ResultChan():
		if !ok {
			t.Fatalf("watch closed unexpectedly")
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("no watch event within 10s")
	}
	return watch.Event{}
}

// expectNone checks that no event is pending after the cache has caught up
// with etcd (a List waits for that), plus a short grace period for delivery.
func expectNone(t testing.TB, s *Store, r *resources.Resource, w watch.Interface) {
	t.Helper()
	if _, _, err := s.List(testCtx(t), r, "", Selector{}); err != nil {
		t.Fatalf("List: %v", err)
	}
	select {
	case e, ok := <-w.ResultChan():
		if ok {
			t.Fatalf("unexpected event %s %s rv=%s", e.Type, objName(e.Object), e.Object.(resources.Object).GetResourceVersion())
		}
		t.Fatalf("watch closed unexpectedly")
	case <-time.After(50 * time.Millisecond):
	}
}

func objName(o any) string {
	if m, ok := o.(metav1.Object); ok {
		return m.GetNamespace() + "/" + m.GetName()
	}
	return "?"
}

func mustField(t testing.TB, s string) fields.Selector {
	t.Helper()
	sel, err := fields.ParseSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func mustLabel(t testing.TB, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// appsDaemonSet returns a fresh DaemonSet kube-system/agent.
func appsDaemonSet() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "agent"}}
}
