package fake

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/everynode/everynode/apiserver/strategy"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

func pod(ns, name, node string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "img"}}},
	}
}

func ds(name string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "v1"}}},
			},
		},
	}
}

func rvOf(t *testing.T, o client.Object) int64 {
	t.Helper()
	n, err := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", o.GetResourceVersion(), err)
	}
	return n
}

func TestCreateGetErrors(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := New()
	c.SetClock(clk)
	p1, err := c.Create(ctx, pod("default", "a", "", nil), client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p1.GetUID() == "" || p1.GetGeneration() != 1 || !p1.GetCreationTimestamp().Time.Equal(clk.Now()) {
		t.Errorf("create did not set uid/generation/creationTimestamp: %+v", p1)
	}
	if p1.GetObjectKind().GroupVersionKind().Kind != "Pod" {
		t.Errorf("kind not set")
	}
	if got := p1.(*corev1.Pod).Status.Phase; got != corev1.PodPending {
		t.Errorf("phase = %q, want Pending", got)
	}
	if _, err := c.Create(ctx, pod("default", "a", "", nil), client.WriteOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: %v, want AlreadyExists", err)
	}
	if _, err := c.Get(ctx, resources.Pods, "default", "nope"); !apierrors.IsNotFound(err) {
		t.Errorf("get missing: %v, want NotFound", err)
	}
	gen := pod("default", "", "", nil)
	gen.GenerateName = "x-"
	p2, err := c.Create(ctx, gen, client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p2.GetName()) != len("x-")+5 || p2.GetName()[:2] != "x-" {
		t.Errorf("generated name %q", p2.GetName())
	}
	if rvOf(t, p2) <= rvOf(t, p1) {
		t.Errorf("resourceVersions not increasing: %s then %s", p1.GetResourceVersion(), p2.GetResourceVersion())
	}
	if o, err := c.Create(ctx, pod("", "nons", "", nil), client.WriteOptions{}); err != nil || o.GetNamespace() != "default" {
		t.Errorf("create without namespace: %v, want it in namespace default as the clients send it", err)
	}
	// Returned objects are copies.
	p1.SetLabels(map[string]string{"mutated": "yes"})
	got, _ := c.Get(ctx, resources.Pods, "default", "a")
	if len(got.GetLabels()) != 0 {
		t.Errorf("store shares memory with returned object")
	}
}

func TestUpdateConflictAndStatus(t *testing.T) {
	ctx := context.Background()
	c := New()
	o, err := c.Create(ctx, ds("foo"), client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := o.(*appsv1.DaemonSet)
	if d.Annotations[strategy.TemplateGenerationAnnotation] != "1" {
		t.Errorf("template generation annotation = %q", d.Annotations[strategy.TemplateGenerationAnnotation])
	}

	// Status through Update is ignored.
	d.Status.NumberReady = 7
	d.Labels = map[string]string{"l": "1"}
	u, err := c.Update(ctx, d, client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ud := u.(*appsv1.DaemonSet)
	if ud.Status.NumberReady != 0 || ud.Labels["l"] != "1" || ud.Generation != 1 {
		t.Errorf("update: status %+v labels %v generation %d", ud.Status, ud.Labels, ud.Generation)
	}

	// Stale resourceVersion.
	if _, err := c.Update(ctx, d, client.WriteOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("stale update: %v, want Conflict", err)
	}

	// UpdateStatus changes only status.
	ud.Status.NumberReady = 3
	ud.Spec.MinReadySeconds = 99
	s, err := c.UpdateStatus(ctx, ud, client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sd := s.(*appsv1.DaemonSet)
	if sd.Status.NumberReady != 3 || sd.Spec.MinReadySeconds != 0 || sd.Generation != 1 {
		t.Errorf("updateStatus: status %+v minReady %d generation %d", sd.Status, sd.Spec.MinReadySeconds, sd.Generation)
	}

	// Spec change bumps generation; template change bumps the template generation.
	sd.Spec.MinReadySeconds = 5
	s2, err := c.Update(ctx, sd, client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g := s2.GetGeneration(); g != 2 || s2.GetAnnotations()[strategy.TemplateGenerationAnnotation] != "1" {
		t.Errorf("spec change: generation %d annotation %v", g, s2.GetAnnotations())
	}
	d3 := s2.(*appsv1.DaemonSet)
	d3.Spec.Template.Spec.Containers[0].Image = "v2"
	s3, err := c.Update(ctx, d3, client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g := s3.GetGeneration(); g != 3 || s3.GetAnnotations()[strategy.TemplateGenerationAnnotation] != "2" {
		t.Errorf("template change: generation %d annotation %v", g, s3.GetAnnotations())
	}
	// No-op update keeps the resourceVersion.
	s4, err := c.Update(ctx, s3, client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s4.GetResourceVersion() != s3.GetResourceVersion() {
		t.Errorf("no-op update moved resourceVersion %s -> %s", s3.GetResourceVersion(), s4.GetResourceVersion())
	}
	if _, err := c.Update(ctx, ds("missing"), client.WriteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("update missing: %v", err)
	}
}

func TestListSelectors(t *testing.T) {
	ctx := context.Background()
	running := pod("default", "b", "n2", map[string]string{"app": "x"})
	running.Status.Phase = corev1.PodRunning
	c := New(
		pod("default", "a", "n1", map[string]string{"app": "x"}),
		running,
		pod("default", "c", "n1", map[string]string{"app": "y"}),
		pod("other", "d", "n1", map[string]string{"app": "x"}),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
	)
	tests := []struct {
		name, ns, label, field string
		want                   []string
	}{
		{"all", "", "", "", []string{"a", "b", "c", "d"}},
		{"namespace", "default", "", "", []string{"a", "b", "c"}},
		{"label", "", "app=x", "", []string{"a", "b", "d"}},
		{"nodeName", "", "", "spec.nodeName=n1", []string{"a", "c", "d"}},
		{"label and field", "default", "app=x", "spec.nodeName=n1", []string{"a"}},
		{"phase", "", "", "status.phase!=Running", []string{"a", "c", "d"}},
		{"name", "", "", "metadata.name=b", []string{"b"}},
		{"namespace field", "", "", "metadata.namespace=other", []string{"d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, rv, err := c.List(ctx, resources.Pods, tt.ns, client.ListOptions{LabelSelector: tt.label, FieldSelector: tt.field})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range items {
				got = append(got, o.GetName())
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
			if rv != "5" {
				t.Errorf("list rv = %s, want 5", rv)
			}
		})
	}
	if _, _, err := c.List(ctx, resources.Pods, "", client.ListOptions{LabelSelector: "a in (("}); !apierrors.IsBadRequest(err) {
		t.Errorf("bad selector: %v", err)
	}
}

func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no watch event within 5s")
	}
	return watch.Event{}
}

func expectEvent(t *testing.T, w watch.Interface, typ watch.EventType, name string) watch.Event {
	t.Helper()
	ev := next(t, w)
	o, ok := ev.Object.(client.Object)
	if ev.Type != typ || !ok || o.GetName() != name {
		t.Fatalf("event %s %v, want %s %s", ev.Type, ev.Object, typ, name)
	}
	return ev
}

func TestWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	yes, no := map[string]string{"sel": "yes"}, map[string]string{"sel": "no"}
	c := New(pod("default", "a", "n1", yes), pod("default", "b", "n1", no), pod("default", "d", "n2", yes))
	w, err := c.Watch(ctx, resources.Pods, "default", client.ListOptions{LabelSelector: "sel=yes", FieldSelector: "spec.nodeName=n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	expectEvent(t, w, watch.Added, "a")

	// Live events.
	if _, err := c.Create(ctx, pod("default", "c", "n1", yes), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, w, watch.Added, "c")
	// b starts matching: ADDED; a stops: DELETED (a bound pod's nodeName is
	// immutable, so labels move them).
	b, _ := c.Get(ctx, resources.Pods, "default", "b")
	b.SetLabels(yes)
	if _, err := c.Update(ctx, b, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, w, watch.Added, "b")
	a, _ := c.Get(ctx, resources.Pods, "default", "a")
	a.SetLabels(no)
	if _, err := c.Update(ctx, a, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, w, watch.Deleted, "a")
	// A bound pod is removed at once only without a grace period.
	if _, err := c.Delete(ctx, resources.Pods, "default", "c", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, w, watch.Deleted, "c")

	w.Stop()
	w.Stop() // idempotent
	for range w.ResultChan() {
	}
	if n := c.Watchers(); n != 0 {
		t.Errorf("%d watchers left after Stop", n)
	}
}

func TestWatchFromResourceVersion(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := New(pod("default", "a", "", nil))
	items, rv, err := c.List(ctx, resources.Pods, "", client.ListOptions{})
	if err != nil || len(items) != 1 {
		t.Fatal(items, err)
	}
	// A change between list and watch is replayed.
	if _, err := c.Create(ctx, pod("default", "b", "", nil), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, resources.Pods, "", client.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	ev := expectEvent(t, w, watch.Added, "b")
	if got := ev.Object.(client.Object).GetResourceVersion(); got != "2" {
		t.Errorf("replayed rv %s, want 2", got)
	}
	// The context ends the watch.
	cancel()
	for range w.ResultChan() {
	}
	if n := c.Watchers(); n != 0 {
		t.Errorf("%d watchers left after cancel", n)
	}
}

func TestWatchGone(t *testing.T) {
	c := New()
	ctx := context.Background()
	for i := 0; i < historyLimit+1; i++ { // Seed: the history fills without the write rules' cost
		if err := c.Seed(pod("default", "p"+strconv.Itoa(i), "", nil)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := c.Watch(ctx, resources.Pods, "", client.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	ev := next(t, w)
	st, ok := ev.Object.(*metav1.Status)
	if ev.Type != watch.Error || !ok || st.Code != 410 {
		t.Fatalf("got %v %v, want Error 410", ev.Type, ev.Object)
	}
	if _, ok := <-w.ResultChan(); ok {
		t.Error("watch not closed after Gone")
	}
}

func TestPatch(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		pt   types.PatchType
		data string
		sub  string
		want func(*corev1.Pod) bool
	}{
		{"strategic", types.StrategicMergePatchType, `{"metadata":{"labels":{"k":"v"}}}`, "",
			func(p *corev1.Pod) bool { return p.Labels["k"] == "v" && p.Labels["app"] == "x" }},
		{"merge", types.MergePatchType, `{"metadata":{"labels":{"app":null}}}`, "",
			func(p *corev1.Pod) bool { return len(p.Labels) == 0 }},
		{"json", types.JSONPatchType, `[{"op":"replace","path":"/spec/containers/0/image","value":"img2"}]`, "",
			func(p *corev1.Pod) bool { return p.Spec.Containers[0].Image == "img2" }},
		{"status only", types.MergePatchType, `{"status":{"phase":"Running"},"spec":{"nodeName":"zz"}}`, "status",
			func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == "n1" }},
		{"status ignored on main resource", types.MergePatchType, `{"status":{"phase":"Running"}}`, "",
			func(p *corev1.Pod) bool { return p.Status.Phase == "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(pod("default", "a", "n1", map[string]string{"app": "x"}))
			o, err := c.Patch(ctx, resources.Pods, "default", "a", tt.pt, []byte(tt.data), client.WriteOptions{}, tt.sub)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(o.(*corev1.Pod)) {
				t.Errorf("unexpected result %+v", o)
			}
		})
	}
	c := New()
	if _, err := c.Patch(ctx, resources.Pods, "default", "a", types.MergePatchType, []byte(`{}`), client.WriteOptions{}, ""); !apierrors.IsNotFound(err) {
		t.Errorf("patch missing: %v", err)
	}
	c = New(pod("default", "a", "", nil))
	if _, err := c.Patch(ctx, resources.Pods, "default", "a", types.JSONPatchType, []byte(`[{"op":"bogus"}]`), client.WriteOptions{}, ""); !apierrors.IsInvalid(err) {
		t.Errorf("bad patch: %v", err)
	}
}

func TestDeleteFinalizers(t *testing.T) {
	ctx := context.Background()
	p := pod("default", "a", "", nil)
	p.Finalizers = []string{"example.com/hold"}
	c := New(p, pod("default", "b", "", nil))

	o, err := c.Delete(ctx, resources.Pods, "default", "a", metav1.DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o.GetDeletionTimestamp() == nil {
		t.Fatal("deletionTimestamp not set")
	}
	if _, err := c.Get(ctx, resources.Pods, "default", "a"); err != nil {
		t.Fatalf("object with finalizer gone: %v", err)
	}
	// Removing the finalizer completes the deletion.
	o.SetFinalizers(nil)
	if _, err := c.Update(ctx, o, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, resources.Pods, "default", "a"); !apierrors.IsNotFound(err) {
		t.Errorf("after finalizer removal: %v, want NotFound", err)
	}

	// Orphan propagation adds the orphan finalizer.
	orphan := metav1.DeletePropagationOrphan
	o, err = c.Delete(ctx, resources.Pods, "default", "b", metav1.DeleteOptions{PropagationPolicy: &orphan})
	if err != nil {
		t.Fatal(err)
	}
	if fin := o.GetFinalizers(); len(fin) != 1 || fin[0] != metav1.FinalizerOrphanDependents {
		t.Errorf("finalizers %v", fin)
	}

	// Preconditions.
	c = New(pod("default", "c", "", nil))
	uid := types.UID("other")
	if _, err := c.Delete(ctx, resources.Pods, "default", "c", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); !apierrors.IsConflict(err) {
		t.Errorf("uid precondition: %v, want Conflict", err)
	}
	if _, err := c.Delete(ctx, resources.Pods, "default", "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, resources.Pods, "default", "c", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("second delete: %v, want NotFound", err)
	}
}

func TestActionsAndFail(t *testing.T) {
	ctx := context.Background()
	c := New(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	boom := apierrors.NewInternalError(errors.New("boom"))
	c.Fail(VerbCreate, "pods", boom)
	if _, err := c.Create(ctx, pod("default", "a", "", nil), client.WriteOptions{}); !errors.Is(err, boom) {
		t.Errorf("create: %v, want injected error", err)
	}
	if _, err := c.Get(ctx, resources.Pods, "default", "a"); !apierrors.IsNotFound(err) {
		t.Errorf("failed create stored something: %v", err)
	}
	c.Fail(VerbCreate, "pods", nil)
	if _, err := c.Create(ctx, pod("default", "a", "", nil), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Subresource-specific failure.
	c.Fail(VerbUpdate, "nodes/status", boom)
	n, _ := c.Get(ctx, resources.Nodes, "", "n1")
	if _, err := c.Update(ctx, n, client.WriteOptions{}); err != nil {
		t.Errorf("plain update hit status failure: %v", err)
	}
	if _, err := c.UpdateStatus(ctx, n, client.WriteOptions{}); !errors.Is(err, boom) {
		t.Errorf("status update: %v", err)
	}
	// Counting failure: the second call fails.
	calls := 0
	c.FailFunc(VerbDelete, "*", func(Action) error {
		calls++
		if calls == 2 {
			return boom
		}
		return nil
	})
	c.Create(ctx, pod("default", "b", "", nil), client.WriteOptions{})
	if _, err := c.Delete(ctx, resources.Pods, "default", "a", metav1.DeleteOptions{}); err != nil {
		t.Errorf("first delete: %v", err)
	}
	if _, err := c.Delete(ctx, resources.Pods, "default", "b", metav1.DeleteOptions{}); !errors.Is(err, boom) {
		t.Errorf("second delete: %v", err)
	}

	want := []Action{
		{Verb: VerbCreate, Resource: "pods", Namespace: "default", Name: "a"},
		{Verb: VerbGet, Resource: "pods", Namespace: "default", Name: "a"},
		{Verb: VerbCreate, Resource: "pods", Namespace: "default", Name: "a"},
		{Verb: VerbGet, Resource: "nodes", Name: "n1"},
		{Verb: VerbUpdate, Resource: "nodes", Name: "n1"},
		{Verb: VerbUpdate, Resource: "nodes", Subresource: "status", Name: "n1"},
		{Verb: VerbCreate, Resource: "pods", Namespace: "default", Name: "b"},
		{Verb: VerbDelete, Resource: "pods", Namespace: "default", Name: "a"},
		{Verb: VerbDelete, Resource: "pods", Namespace: "default", Name: "b"},
	}
	got := c.Actions()
	if len(got) != len(want) {
		t.Fatalf("actions %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("action %d = %v, want %v", i, got[i], want[i])
		}
	}
	c.ClearActions()
	if len(c.Actions()) != 0 {
		t.Error("ClearActions left actions")
	}
}

func TestConcurrentUse(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := New()
	w, err := c.Watch(ctx, resources.Pods, "", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func(g int) {
			defer func() { done <- struct{}{} }()
			for i := 0; i < n; i++ {
				name := "p" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
				c.Create(ctx, pod("default", name, "", nil), client.WriteOptions{})
				c.List(ctx, resources.Pods, "", client.ListOptions{})
			}
		}(g)
	}
	for g := 0; g < 4; g++ {
		<-done
	}
	last := int64(0)
	for i := 0; i < 4*n; i++ {
		ev := next(t, w)
		rv := rvOf(t, ev.Object.(client.Object))
		if rv <= last {
			t.Fatalf("watch events out of order: %d after %d", rv, last)
		}
		last = rv
	}
	w.Stop()
}
