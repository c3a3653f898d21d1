package apiserver

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/apiserver/strategy"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// TestLocalClientParity: the in-process client returns the same Status as
// HTTP for the same invalid object, and runs the same create rules.
func TestLocalClientParity(t *testing.T) {
	e := newEnv(t)
	c := NewLocalClient(e.s, "system:controller")
	ctx := testCtx(t)

	bad := newDS("bad")
	bad.Spec.Template.Labels = map[string]string{"app": "other"}
	r := e.do(req{method: "POST", path: dsPath, body: toJSON(t, bad)})
	httpSt := r.status(t)

	_, err := c.Create(ctx, bad, client.WriteOptions{})
	se, ok := err.(*apierrors.StatusError)
	if !ok {
		t.Fatalf("local error %T %v, want *StatusError", err, err)
	}
	localSt := se.ErrStatus
	if localSt.Code != httpSt.Code || localSt.Reason != httpSt.Reason || localSt.Message != httpSt.Message ||
		len(localSt.Details.Causes) != len(httpSt.Details.Causes) || localSt.Kind != "Status" {
		t.Errorf("local %+v\nhttp %+v", localSt, httpSt)
	}
	if !apierrors.IsInvalid(err) {
		t.Errorf("IsInvalid false for %v", err)
	}
	if bad.UID != "" || bad.Namespace != "" {
		t.Errorf("Create modified its argument: %+v", bad.ObjectMeta)
	}

	// Same defaults and server-set metadata; the result is the caller's copy.
	obj, err := c.Create(ctx, newDS("good"), client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var viaHTTP appsv1.DaemonSet
	e.get(dsPath+"/good").must(t, http.StatusOK, &viaHTTP)
	ds := obj.(*appsv1.DaemonSet)
	if ds.UID != viaHTTP.UID || ds.Generation != 1 || ds.Kind != "DaemonSet" || ds.Namespace != "default" ||
		ds.Spec.UpdateStrategy.Type != viaHTTP.Spec.UpdateStrategy.Type || ds.Spec.UpdateStrategy.Type == "" {
		t.Errorf("local create %+v vs http %+v", ds.ObjectMeta, viaHTTP.ObjectMeta)
	}

	// Not found, conflict.
	if _, err := c.Get(ctx, resources.DaemonSets, "default", "missing"); !apierrors.IsNotFound(err) {
		t.Errorf("Get missing: %v", err)
	}
	stale := ds.DeepCopy()
	stale.ResourceVersion = "1"
	stale.Labels["x"] = "y"
	if _, err := c.Update(ctx, stale, client.WriteOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("stale Update: %v", err)
	}

	// Update, UpdateStatus, Patch, List, Delete.
	upd := ds.DeepCopy()
	upd.Labels["x"] = "y"
	obj, err = c.Update(ctx, upd, client.WriteOptions{})
	if err != nil || obj.GetLabels()["x"] != "y" {
		t.Fatalf("Update: %v %v", err, obj)
	}
	st := obj.(*appsv1.DaemonSet).DeepCopy()
	st.Status.NumberReady = 4
	obj, err = c.UpdateStatus(ctx, st, client.WriteOptions{})
	if err != nil || obj.(*appsv1.DaemonSet).Status.NumberReady != 4 {
		t.Fatalf("UpdateStatus: %v", err)
	}
	obj, err = c.Patch(ctx, resources.DaemonSets, "default", "good", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"p":"q"}}}`), client.WriteOptions{}, "")
	if err != nil || obj.GetLabels()["p"] != "q" {
		t.Fatalf("Patch: %v", err)
	}
	if _, err := c.Patch(ctx, resources.DaemonSets, "default", "good", "text/plain", []byte(`{}`), client.WriteOptions{}, ""); err == nil ||
		err.(*apierrors.StatusError).ErrStatus.Code != http.StatusUnsupportedMediaType {
		t.Errorf("bad patch type: %v", err)
	}
	items, rv, err := c.List(ctx, resources.DaemonSets, "", client.ListOptions{LabelSelector: "p=q"})
	if err != nil || len(items) != 1 || rv == "" || items[0].GetObjectKind().GroupVersionKind().Kind != "DaemonSet" {
		t.Fatalf("List: %v %d %q", err, len(items), rv)
	}
	orphan := metav1.DeletePropagationOrphan
	obj, err = c.Delete(ctx, resources.DaemonSets, "default", "good", metav1.DeleteOptions{PropagationPolicy: &orphan})
	if err != nil || obj.GetDeletionTimestamp() == nil || obj.GetFinalizers()[0] != strategy.FinalizerOrphan {
		t.Fatalf("Delete orphan: %v %v", err, obj)
	}
}

// TestLocalClientWatch: the local watch from rv 0 starts with ADDED, events
// are private copies with apiVersion/kind, and the watch ends with Stop, its
// timeout and server stop.
func TestLocalClientWatch(t *testing.T) {
	e := newEnv(t)
	c := NewLocalClient(e.s, "system:controller")
	ctx := testCtx(t)
	if _, err := c.Create(ctx, newPod("p1", "n1"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, resources.Pods, "default", client.ListOptions{FieldSelector: "spec.nodeName=n1"})
	if err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, w)
	if ev.Type != watch.Added || ev.Object.(client.Object).GetName() != "p1" || ev.Object.GetObjectKind().GroupVersionKind().Kind != "Pod" {
		t.Fatalf("first event %s %v", ev.Type, ev.Object)
	}
	ev.Object.(client.Object).SetName("mutated") // must not touch the store's copy
	got, err := c.Get(ctx, resources.Pods, "default", "p1")
	if err != nil || got.GetName() != "p1" {
		t.Fatalf("Get after mutating an event: %v %v", err, got)
	}
	w.Stop()
	w.Stop()
	waitClosed(t, w)

	w, err = c.Watch(ctx, resources.Pods, "", client.ListOptions{TimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	nextEvent(t, w)
	waitClosed(t, w)

	w, err = c.Watch(ctx, resources.Pods, "", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nextEvent(t, w)
	e.s.Stop()
	waitClosed(t, w)
}

// TestLocalClientReadOnly: ListReadOnly and WatchReadOnly hand out the
// store's cached objects themselves (with apiVersion/kind), no copies, and
// authorize like List and Watch.
func TestLocalClientReadOnly(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Authorizer = authorizerFunc(func(a Attributes) error {
			if a.User.Name == "someone" {
				return errors.New("not allowed")
			}
			return nil
		})
	})
	ctx := testCtx(t)
	type readOnly interface {
		ListReadOnly(context.Context, *resources.Resource, string, client.ListOptions) ([]client.Object, string, error)
		WatchReadOnly(context.Context, *resources.Resource, string, client.ListOptions) (watch.Interface, error)
	}
	c := NewLocalClient(e.s, "system:controller", mastersGroup).(readOnly)
	if _, err := NewLocalClient(e.s, "system:controller").Create(ctx, newPod("p1", "n1"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	cached, _, err := e.st.List(ctx, resources.Pods, "default", store.Selector{})
	if err != nil || len(cached) != 1 {
		t.Fatalf("store List: %v %d", err, len(cached))
	}
	items, rv, err := c.ListReadOnly(ctx, resources.Pods, "", client.ListOptions{FieldSelector: "spec.nodeName=n1"})
	if err != nil || len(items) != 1 || rv == "" {
		t.Fatalf("ListReadOnly: %v %d %q", err, len(items), rv)
	}
	if items[0] != client.Object(cached[0]) || items[0].GetObjectKind().GroupVersionKind().Kind != "Pod" {
		t.Errorf("ListReadOnly item %p (%v), want the cached object %p", items[0], items[0].GetObjectKind().GroupVersionKind(), cached[0])
	}
	w, err := c.WatchReadOnly(ctx, resources.Pods, "", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ev := nextEvent(t, w); ev.Object != cached[0] {
		t.Errorf("WatchReadOnly event object %p, want the cached object %p", ev.Object, cached[0])
	}

	denied := NewLocalClient(e.s, "someone").(readOnly)
	if _, _, err := denied.ListReadOnly(ctx, resources.Pods, "", client.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("ListReadOnly as an unprivileged user: %v, want Forbidden", err)
	}
	if _, err := denied.WatchReadOnly(ctx, resources.Pods, "", client.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("WatchReadOnly as an unprivileged user: %v, want Forbidden", err)
	}
}

func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed, want an event")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return watch.Event{}
}

func waitClosed(t *testing.T, w watch.Interface) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-w.ResultChan():
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("watch not closed within 10s")
		}
	}
}

// TestEnsureNamespaces is idempotent.
func TestEnsureNamespaces(t *testing.T) {
	e := newEnv(t)
	if err := e.s.EnsureNamespaces(context.Background(), "default", "extra"); err != nil {
		t.Fatal(err)
	}
	e.get("/api/v1/namespaces/extra").must(t, http.StatusOK, nil)
}

// TestClientParity runs the same calls through the HTTP client and the local
// client and compares the Status of each failure and the shape of each result.
func TestClientParity(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	hc, err := client.NewHTTP(client.Config{Server: e.srv.URL, Token: adminToken, ResourceFor: resources.ForObject})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	clients := map[string]client.Interface{"http": hc, "local": NewLocalClient(e.s, "admin", mastersGroup)}

	type outcome struct {
		code    int32
		reason  metav1.StatusReason
		message string
	}
	results := map[string][]outcome{}
	for _, name := range []string{"http", "local"} {
		c := clients[name]
		record := func(err error) {
			o := outcome{}
			if err != nil {
				se, ok := err.(*apierrors.StatusError)
				if !ok {
					t.Fatalf("%s: error %T %v", name, err, err)
				}
				o = outcome{se.ErrStatus.Code, se.ErrStatus.Reason, se.ErrStatus.Message}
			}
			results[name] = append(results[name], o)
		}
		ds := newDS("parity-" + name)
		_, err := c.Create(ctx, ds, client.WriteOptions{})
		record(err)
		_, err = c.Create(ctx, ds, client.WriteOptions{})
		record(err) // AlreadyExists, with a name that differs per client: compare code and reason only
		bad := newDS("x")
		bad.Spec.Selector = nil
		_, err = c.Create(ctx, bad, client.WriteOptions{})
		record(err)
		inNowhere := newDS("y")
		inNowhere.Namespace = "nowhere"
		_, err = c.Create(ctx, inNowhere, client.WriteOptions{})
		record(err)
		_, err = c.Get(ctx, resources.DaemonSets, "default", "missing")
		record(err)
		_, err = c.Patch(ctx, resources.DaemonSets, "default", "missing", types.MergePatchType, []byte(`{}`), client.WriteOptions{}, "")
		record(err)
		_, err = c.Patch(ctx, resources.DaemonSets, "default", ds.Name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/nope"}]`), client.WriteOptions{}, "")
		record(err)
		_, _, err = c.List(ctx, resources.Pods, "", client.ListOptions{FieldSelector: "spec.bogus=1"})
		record(err)
		_, err = c.Delete(ctx, resources.Namespaces, "", "default", metav1.DeleteOptions{})
		record(err)
		w, err := c.Watch(ctx, resources.Pods, "", client.ListOptions{ResourceVersion: "999999999"})
		if err != nil {
			record(err)
		} else {
			ev := nextEvent(t, w)
			st, ok := ev.Object.(*metav1.Status)
			if ev.Type != watch.Error || !ok {
				t.Fatalf("%s: watch from a future RV: %s %T", name, ev.Type, ev.Object)
			}
			results[name] = append(results[name], outcome{st.Code, st.Reason, ""})
			w.Stop()
		}
	}
	h, l := results["http"], results["local"]
	for i := range h {
		hm, lm := h[i].message, l[i].message
		if i == 1 { // names differ
			hm, lm = "", ""
		}
		if h[i].code != l[i].code || h[i].reason != l[i].reason || hm != lm {
			t.Errorf("call %d: http %+v, local %+v", i, h[i], l[i])
		}
	}
	if h[0].code != 0 || h[1].code != 409 || h[2].code != 422 || h[3].code != 404 || h[4].code != 404 || h[9].code != 410 {
		t.Errorf("unexpected outcomes %+v", h)
	}
}
