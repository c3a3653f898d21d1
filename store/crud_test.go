package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/resources"
)

func TestCreateGetUpdateDelete(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)

	in := newPod("default", "web", "node-1", map[string]string{"app": "web"})
	created := mustCreate(t, s, resources.Pods, in)
	if in.ResourceVersion != "" || in.Kind != "" {
		t.Errorf("Create modified its input: rv=%q kind=%q", in.ResourceVersion, in.Kind)
	}
	if created.GetObjectKind().GroupVersionKind() != resources.Pods.GVK() {
		t.Errorf("created kind = %v", created.GetObjectKind().GroupVersionKind())
	}
	rv1 := rvOf(t, created)

	if _, err := s.Create(ctx, resources.Pods, newPod("default", "web", "", nil)); !IsAlreadyExists(err) {
		t.Fatalf("second Create: got %v, want AlreadyExists", err)
	}

	got, err := s.Get(ctx, resources.Pods, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if rvOf(t, got) != rv1 || got.(*corev1.Pod).Spec.NodeName != "node-1" || got.GetObjectKind().GroupVersionKind().Kind != "Pod" {
		t.Fatalf("Get = %+v", got)
	}

	// The value in etcd is kube-apiserver's: protobuf in an envelope naming
	// apiVersion and kind, without the resourceVersion.
	raw, err := s.Client().Get(ctx, "/registry/pods/default/web")
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("raw get: %v", err)
	}
	if env, pod := storedProto(t, raw.Kvs[0].Value, &corev1.Pod{}); env.APIVersion != "v1" || env.Kind != "Pod" ||
		pod.ResourceVersion != "" || pod.Spec.NodeName != "node-1" {
		t.Errorf("stored value = %q", raw.Kvs[0].Value)
	}

	upd := got.(*corev1.Pod).DeepCopy()
	upd.Labels["tier"] = "front"
	updated, err := s.Update(ctx, resources.Pods, upd)
	if err != nil {
		t.Fatal(err)
	}
	if rv2 := rvOf(t, updated); rv2 <= rv1 {
		t.Errorf("update rv %d not after %d", rv2, rv1)
	}
	if upd.ResourceVersion != got.GetResourceVersion() {
		t.Errorf("Update modified its input")
	}

	deleted, err := s.Delete(ctx, resources.Pods, "default", "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if deleted.GetLabels()["tier"] != "front" || rvOf(t, deleted) <= rvOf(t, updated) {
		t.Errorf("Delete returned %v rv=%s; want last state with the deletion's revision", deleted.GetLabels(), deleted.GetResourceVersion())
	}
	for name, err := range map[string]error{
		"Get":    second(s.Get(ctx, resources.Pods, "default", "web")),
		"Delete": second(s.Delete(ctx, resources.Pods, "default", "web", nil)),
		"Update": second(s.Update(ctx, resources.Pods, updated)),
		"GuaranteedUpdate": second(s.GuaranteedUpdate(ctx, resources.Pods, "default", "web",
			func(cur resources.Object) (resources.Object, error) { return cur, nil })),
	} {
		if !IsNotFound(err) {
			t.Errorf("%s after delete: got %v, want NotFound", name, err)
		}
	}

	// Cluster-scoped objects have no namespace segment.
	mustCreate(t, s, resources.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	if raw, err := s.Client().Get(ctx, "/registry/nodes/node-1"); err != nil || len(raw.Kvs) != 1 {
		t.Errorf("node key missing: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

func TestInvalidRequests(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	withRV := newPod("default", "p", "", nil)
	withRV.ResourceVersion = "5"
	tests := []struct {
		name string
		err  error
	}{
		{"create without name", second(s.Create(ctx, resources.Pods, newPod("default", "", "", nil)))},
		{"create without namespace", second(s.Create(ctx, resources.Pods, newPod("", "p", "", nil)))},
		{"create with slash in name", second(s.Create(ctx, resources.Pods, newPod("default", "a/b", "", nil)))},
		{"create namespaced node", second(s.Create(ctx, resources.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "x"}}))},
		{"create with resourceVersion", second(s.Create(ctx, resources.Pods, withRV))},
		{"create wrong type", second(s.Create(ctx, resources.Nodes, newPod("default", "p", "", nil)))},
		{"update without resourceVersion", second(s.Update(ctx, resources.Pods, newPod("default", "p", "", nil)))},
		{"get with dot-dot", second(s.Get(ctx, resources.Pods, "..", "p"))},
		{"unsupported field selector", second(s.Watch(ctx, resources.Pods, "", 0, Selector{Field: mustField(t, "spec.host=x")}))},
		{"unsupported list field", func() error {
			_, _, err := s.List(ctx, resources.Nodes, "", Selector{Field: mustField(t, "spec.nodeName=x")})
			return err
		}()},
		{"unserved resource", func() error {
			_, _, err := s.List(ctx, &resources.Resource{Name: "secrets"}, "", Selector{})
			return err
		}()},
	}
	for _, tc := range tests {
		if !IsInvalid(tc.err) {
			t.Errorf("%s: got %v, want Invalid", tc.name, tc.err)
		}
	}
}

func TestUpdateConflictOnStaleResourceVersion(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	v1 := mustCreate(t, s, resources.Pods, newPod("default", "p", "", nil)).(*corev1.Pod)

	a := v1.DeepCopy()
	a.Labels = map[string]string{"writer": "a"}
	if _, err := s.Update(ctx, resources.Pods, a); err != nil {
		t.Fatal(err)
	}
	b := v1.DeepCopy() // still at v1's resourceVersion
	b.Labels = map[string]string{"writer": "b"}
	_, err := s.Update(ctx, resources.Pods, b)
	if !IsConflict(err) {
		t.Fatalf("stale Update: got %v, want Conflict", err)
	}
	var se *Error
	if !errors.As(fmt.Errorf("wrapped: %w", err), &se) || se.Resource != resources.Pods || se.Name != "p" || !se.Kind.Retryable() {
		t.Errorf("error fields: %+v", se)
	}
	got, _ := s.Get(ctx, resources.Pods, "default", "p")
	if got.GetLabels()["writer"] != "a" {
		t.Errorf("stale write landed: %v", got.GetLabels())
	}
}

func TestGuaranteedUpdateConcurrentWriters(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	mustCreate(t, s, resources.Pods, newPod("default", "counter", "", map[string]string{"n": "0"}))

	const writers, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			for range each {
				_, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "counter", func(cur resources.Object) (resources.Object, error) {
					n, err := strconv.Atoi(cur.GetLabels()["n"])
					if err != nil {
						return nil, err
					}
					cur.GetLabels()["n"] = strconv.Itoa(n + 1)
					return cur, nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, resources.Pods, "default", "counter")
	if err != nil {
		t.Fatal(err)
	}
	if n := got.GetLabels()["n"]; n != strconv.Itoa(writers*each) {
		t.Fatalf("counter = %s, want %d", n, writers*each)
	}
}

func TestGuaranteedUpdateNoChangeKeepsResourceVersion(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	created := mustCreate(t, s, resources.Pods, newPod("default", "p", "", map[string]string{"a": "1"}))

	calls := 0
	out, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", func(cur resources.Object) (resources.Object, error) {
		calls++
		cur.GetLabels()["a"] = "1" // same value: no change
		return cur, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || out.GetResourceVersion() != created.GetResourceVersion() {
		t.Errorf("no-op update: calls=%d rv=%s, want 1 and %s", calls, out.GetResourceVersion(), created.GetResourceVersion())
	}
	rev, _ := s.currentRevision(ctx)
	if rev != rvOf(t, created) {
		t.Errorf("no-op update wrote to etcd: revision %d after create at %s", rev, created.GetResourceVersion())
	}

	// An error from try comes back as is, nothing written.
	boom := errors.New("boom")
	if _, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", func(resources.Object) (resources.Object, error) {
		return nil, boom
	}); err != boom {
		t.Errorf("try error: got %v, want it unchanged", err)
	}
	// The input handed to try is a copy: mutating it and failing leaves the store alone.
	_, _ = s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", func(cur resources.Object) (resources.Object, error) {
		cur.GetLabels()["a"] = "changed"
		return nil, boom
	})
	got, _ := s.Get(ctx, resources.Pods, "default", "p")
	if got.GetLabels()["a"] != "1" {
		t.Errorf("failed update changed the object: %v", got.GetLabels())
	}
}

func TestDeletePreconditions(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	p := newPod("default", "p", "", nil)
	p.UID = "uid-1"
	created := mustCreate(t, s, resources.Pods, p)

	for _, pre := range []*Preconditions{
		{UID: "other"},
		{ResourceVersion: "1"},
		{UID: "uid-1", ResourceVersion: "1"},
	} {
		if _, err := s.Delete(ctx, resources.Pods, "default", "p", pre); !IsConflict(err) {
			t.Errorf("Delete with %+v: got %v, want Conflict", pre, err)
		}
	}
	if _, err := s.Delete(ctx, resources.Pods, "default", "p", &Preconditions{UID: "uid-1", ResourceVersion: created.GetResourceVersion()}); err != nil {
		t.Fatalf("Delete with matching preconditions: %v", err)
	}
	if _, err := s.Get(ctx, resources.Pods, "default", "p"); !IsNotFound(err) {
		t.Errorf("Get after delete: %v", err)
	}
}

func TestErrorsThroughWrapping(t *testing.T) {
	tests := []struct {
		kind Kind
		is   func(error) bool
	}{
		{NotFound, IsNotFound}, {AlreadyExists, IsAlreadyExists}, {Conflict, IsConflict}, {Gone, IsGone}, {Invalid, IsInvalid},
	}
	for _, tc := range tests {
		err := fmt.Errorf("apiserver: %w", newError(tc.kind, resources.DaemonSets, "ns", "ds", nil))
		if !tc.is(err) || KindOf(err) != tc.kind {
			t.Errorf("%s not recognised through wrapping", tc.kind)
		}
		for _, other := range tests {
			if other.kind != tc.kind && other.is(err) {
				t.Errorf("%s recognised as %s", tc.kind, other.kind)
			}
		}
	}
	if got := newError(NotFound, resources.DaemonSets, "ns", "ds", nil).Error(); got != `daemonsets.apps "ns/ds" not found` {
		t.Errorf("message = %q", got)
	}
	if KindOf(context.Canceled) != Internal {
		t.Errorf("untyped error should be Internal")
	}
}
