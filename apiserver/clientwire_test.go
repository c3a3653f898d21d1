package apiserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// typeLog records the Content-Type each request sent and each answer had.
type typeLog struct {
	mu   sync.Mutex
	seen []string // "METHOD path: request type -> answer type"
}

func (l *typeLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Recorded when the answer's headers go out: a watch's handler
		// returns only when the watch ends.
		hw := &headerWriter{ResponseWriter: w}
		hw.record = sync.OnceFunc(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.seen = append(l.seen, r.Method+" "+r.URL.Path+": "+r.Header.Get("Content-Type")+" -> "+w.Header().Get("Content-Type"))
		})
		h.ServeHTTP(hw, r)
	})
}

// headerWriter calls record before the headers are written.
type headerWriter struct {
	http.ResponseWriter
	record func()
}

func (w *headerWriter) WriteHeader(code int) {
	w.record()
	w.ResponseWriter.WriteHeader(code)
}

func (w *headerWriter) Write(b []byte) (int, error) {
	w.record()
	return w.ResponseWriter.Write(b)
}

// Flush sends what is written (and the headers: a watch's come before its
// first event).
func (w *headerWriter) Flush() {
	w.record()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *headerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (l *typeLog) reset() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.seen
	l.seen = nil
	return out
}

// clientRun is what one client saw doing the same work: the kinds, names,
// labels, phases, event types and error reasons, without what differs
// between two runs (UIDs, resourceVersions, times).
type clientRun struct {
	Steps []string
}

func (r *clientRun) add(parts ...string) { r.Steps = append(r.Steps, strings.Join(parts, " ")) }

// exerciseClient runs every verb of client.Interface against the server.
func exerciseClient(t *testing.T, c *client.HTTP) clientRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var run clientRun
	kindOf := func(o runtime.Object) string {
		gvk := o.GetObjectKind().GroupVersionKind()
		return gvk.GroupVersion().String() + "/" + gvk.Kind
	}
	reasonOf := func(err error) string {
		if err == nil {
			return "no error"
		}
		if !apierrors.IsNotFound(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsInvalid(err) && !apierrors.IsConflict(err) && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("unexpected error: %v", err)
		}
		st := err.(apierrors.APIStatus).Status()
		return string(st.Reason) + "/" + string(rune('0'+st.Code/100)) + " " + st.Message
	}

	w, err := c.Watch(ctx, resources.Pods, "default", client.ListOptions{FieldSelector: "metadata.name=p"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	created, err := c.Create(ctx, newPod("p", ""), client.WriteOptions{FieldManager: "wire-test"})
	if err != nil {
		t.Fatal(err)
	}
	run.add("create", kindOf(created), created.GetName(), created.GetNamespace(), created.(*corev1.Pod).Spec.Containers[0].Image)
	if created.GetUID() == "" || created.GetResourceVersion() == "" || len(created.GetManagedFields()) != 1 {
		t.Fatalf("created %+v", created)
	}
	_, err = c.Create(ctx, newPod("p", ""), client.WriteOptions{})
	run.add("create again:", reasonOf(err))
	bad := newPod("bad", "")
	bad.Spec.Containers = nil
	_, err = c.Create(ctx, bad, client.WriteOptions{})
	run.add("create invalid:", reasonOf(err))

	got, err := c.Get(ctx, resources.Pods, "default", "p")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, created) {
		t.Errorf("Get %+v, Create returned %+v", got, created)
	}
	run.add("get", kindOf(got), strconv.FormatBool(got.GetResourceVersion() == created.GetResourceVersion()))
	_, err = c.Get(ctx, resources.Pods, "default", "missing")
	run.add("get missing:", reasonOf(err))

	upd := got.(*corev1.Pod).DeepCopy()
	upd.Labels["tier"] = "edge"
	updated, err := c.Update(ctx, upd, client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run.add("update", kindOf(updated), updated.GetLabels()["tier"])
	_, err = c.Update(ctx, upd, client.WriteOptions{}) // upd carries the old resourceVersion
	run.add("stale update:", reasonOf(err))

	st := updated.(*corev1.Pod).DeepCopy()
	st.Status.Phase = corev1.PodRunning
	st.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Unix(1700000000, 0)}}
	withStatus, err := c.UpdateStatus(ctx, st, client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run.add("status", kindOf(withStatus), string(withStatus.(*corev1.Pod).Status.Phase), withStatus.(*corev1.Pod).Status.Conditions[0].LastTransitionTime.UTC().String())

	patched, err := c.Patch(ctx, resources.Pods, "default", "p", types.MergePatchType, []byte(`{"metadata":{"labels":{"patched":"yes"}}}`), client.WriteOptions{}, "")
	if err != nil {
		t.Fatal(err)
	}
	run.add("patch", kindOf(patched), patched.GetLabels()["patched"], patched.GetLabels()["tier"])

	list, rv, err := c.List(ctx, resources.Pods, "default", client.ListOptions{LabelSelector: "patched=yes"})
	if err != nil || len(list) != 1 || rv == "" {
		t.Fatalf("List: %d items, rv %q, %v", len(list), rv, err)
	}
	run.add("list", kindOf(list[0]), list[0].GetName(), strconv.FormatBool(list[0].GetResourceVersion() == patched.GetResourceVersion()))

	ds, err := c.Create(ctx, newDS("wire"), client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run.add("create", kindOf(ds), ds.(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0].Image)

	del, err := c.Delete(ctx, resources.Pods, "default", "p", metav1.DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run.add("delete", kindOf(del), del.GetName())
	_, err = c.Delete(ctx, resources.Pods, "default", "p", metav1.DeleteOptions{})
	run.add("delete again:", reasonOf(err))

	for _, want := range []watch.EventType{watch.Added, watch.Modified, watch.Modified, watch.Modified, watch.Deleted} {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch ended early")
			}
			if ev.Type != want {
				t.Fatalf("watch event %s, want %s: %+v", ev.Type, want, ev.Object)
			}
			run.add("watch", string(ev.Type), kindOf(ev.Object))
		case <-ctx.Done():
			t.Fatalf("no %s event", want)
		}
	}

	// A resourceVersion the server cannot serve: an ERROR event with a 410 Status.
	gone, err := c.Watch(ctx, resources.Pods, "default", client.ListOptions{ResourceVersion: "999999999"})
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Stop()
	select {
	case ev := <-gone.ResultChan():
		s, ok := ev.Object.(*metav1.Status)
		if ev.Type != watch.Error || !ok {
			t.Fatalf("got %s %T, want an ERROR Status", ev.Type, ev.Object)
		}
		run.add("watch", string(ev.Type), kindOf(s), string(s.Reason), string(rune('0'+s.Code/100)))
	case <-ctx.Done():
		t.Fatal("no ERROR event")
	}
	return run
}

// TestClientProtobufSameAsJSON: the client in protobuf (the node agent's)
// and in JSON does the same work against the real API with the same
// results, errors and watch events included, and the protobuf client's
// requests and answers are protobuf on the wire.
func TestClientProtobufSameAsJSON(t *testing.T) {
	var runs [2]clientRun
	for i, proto := range []bool{false, true} {
		e := newEnv(t)
		var log typeLog
		srv := httptest.NewServer(log.wrap(e.s.Handler()))
		t.Cleanup(srv.Close)
		c, err := client.NewHTTP(client.Config{Server: srv.URL, Token: adminToken, ResourceFor: resources.ForObject, Protobuf: proto})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		runs[i] = exerciseClient(t, c)
		seen := log.reset()
		want := map[string]bool{
			"POST /api/v1/namespaces/default/pods: application/json -> application/json":                                                   !proto,
			"GET /api/v1/namespaces/default/pods:  -> application/json":                                                                    !proto,
			"POST /api/v1/namespaces/default/pods: application/vnd.kubernetes.protobuf -> application/vnd.kubernetes.protobuf":             proto,
			"PUT /api/v1/namespaces/default/pods/p/status: application/vnd.kubernetes.protobuf -> application/vnd.kubernetes.protobuf":     proto,
			"PATCH /api/v1/namespaces/default/pods/p: application/merge-patch+json -> application/vnd.kubernetes.protobuf":                 proto,
			"GET /api/v1/namespaces/default/pods:  -> application/vnd.kubernetes.protobuf;stream=watch":                                    proto,
			"GET /api/v1/namespaces/default/pods:  -> application/vnd.kubernetes.protobuf":                                                 proto,
			"POST /apis/apps/v1/namespaces/default/daemonsets: application/vnd.kubernetes.protobuf -> application/vnd.kubernetes.protobuf": proto,
		}
		for w, ok := range want {
			if ok && !slices.Contains(seen, w) {
				t.Errorf("protobuf %v: no %q among\n%s", proto, w, strings.Join(seen, "\n"))
			}
		}
		if proto {
			for _, s := range seen {
				if strings.HasSuffix(s, "-> application/json") {
					t.Errorf("protobuf client answered in JSON: %s", s)
				}
			}
		}
	}
	if !reflect.DeepEqual(runs[0], runs[1]) {
		t.Fatalf("JSON and protobuf clients differ:\nJSON:     %q\nprotobuf: %q", runs[0].Steps, runs[1].Steps)
	}
	t.Logf("%q", runs[0].Steps)
}
