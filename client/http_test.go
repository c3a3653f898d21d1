package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/resources"
)

// fakeServer is an httptest TLS server answering canned Kubernetes JSON. It
// records every request it sees.
type fakeServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []fakeRequest
	routes   map[string]http.HandlerFunc // "METHOD /path" → handler
}

type fakeRequest struct {
	Method, Path, Query, ContentType, Auth, Body, Proto string
}

func newFakeServer(t *testing.T, routes map[string]http.HandlerFunc) (*fakeServer, *HTTP) {
	t.Helper()
	fs := &fakeServer{routes: routes}
	fs.Server = httptest.NewUnstartedServer(http.HandlerFunc(fs.serve))
	fs.EnableHTTP2 = true
	fs.StartTLS()
	t.Cleanup(fs.Close)
	caPEM := pemCert(fs.Certificate().Raw)
	c, err := NewHTTP(Config{Server: fs.URL, CAPEM: caPEM, Token: "secret-token", Timeout: 5 * time.Second, ResourceFor: resources.ForObject})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return fs, c
}

func (fs *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fs.mu.Lock()
	fs.requests = append(fs.requests, fakeRequest{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), string(body), r.Proto})
	h := fs.routes[r.Method+" "+r.URL.Path]
	fs.mu.Unlock()
	if h == nil {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Resource: "paths"}, r.URL.Path))
		return
	}
	h(w, r)
}

func (fs *fakeServer) last() fakeRequest {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.requests[len(fs.requests)-1]
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.ErrStatus
	st.Kind, st.APIVersion = "Status", "v1"
	writeJSON(w, int(st.Code), st)
}

func canned(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

const dsJSON = `{"kind":"DaemonSet","apiVersion":"apps/v1","metadata":{"name":"agent","namespace":"default","resourceVersion":"7","uid":"u1"},
"spec":{"selector":{"matchLabels":{"app":"agent"}},"template":{"metadata":{"labels":{"app":"agent"}},"spec":{"containers":[{"name":"agent","image":"busybox:1.36"}]}}}}`

func TestPath(t *testing.T) {
	tests := []struct {
		r                   *resources.Resource
		ns, name, sub, want string
	}{
		{resources.Nodes, "", "", "", "/api/v1/nodes"},
		{resources.Nodes, "ignored", "n1", "status", "/api/v1/nodes/n1/status"},
		{resources.Pods, "", "", "", "/api/v1/pods"},
		{resources.Pods, "kube-system", "p", "log", "/api/v1/namespaces/kube-system/pods/p/log"},
		{resources.DaemonSets, "default", "", "", "/apis/apps/v1/namespaces/default/daemonsets"},
		{resources.DaemonSets, "", "", "", "/apis/apps/v1/daemonsets"},
		{resources.ControllerRevisions, "d", "x", "", "/apis/apps/v1/namespaces/d/controllerrevisions/x"},
		{resources.Namespaces, "", "default", "", "/api/v1/namespaces/default"},
	}
	for _, tt := range tests {
		if got := Path(tt.r, tt.ns, tt.name, tt.sub); got != tt.want {
			t.Errorf("Path(%s,%q,%q,%q) = %q, want %q", tt.r.Name, tt.ns, tt.name, tt.sub, got, tt.want)
		}
	}
}

func TestVerbs(t *testing.T) {
	fs, c := newFakeServer(t, map[string]http.HandlerFunc{
		"GET /apis/apps/v1/namespaces/default/daemonsets/agent": canned(200, dsJSON),
		"GET /api/v1/namespaces/default/pods": canned(200, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42"},
			"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}`),
		"POST /apis/apps/v1/namespaces/default/daemonsets":         canned(201, dsJSON),
		"PUT /apis/apps/v1/namespaces/default/daemonsets/agent":    canned(200, dsJSON),
		"PUT /api/v1/namespaces/default/pods/a/status":             canned(200, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a"}}`),
		"PATCH /apis/apps/v1/namespaces/default/daemonsets/agent":  canned(200, dsJSON),
		"DELETE /apis/apps/v1/namespaces/default/daemonsets/agent": canned(200, dsJSON),
		"DELETE /api/v1/nodes/n1":                                  canned(200, `{"kind":"Status","apiVersion":"v1","status":"Success"}`),
	})
	ctx := context.Background()

	obj, err := c.Get(ctx, resources.DaemonSets, "default", "agent")
	if err != nil {
		t.Fatal(err)
	}
	ds := obj.(*appsv1.DaemonSet)
	if ds.Name != "agent" || ds.ResourceVersion != "7" || ds.Spec.Template.Spec.Containers[0].Image != "busybox:1.36" || ds.Kind != "DaemonSet" {
		t.Fatalf("Get decoded %+v", ds)
	}
	if got := fs.last(); got.Auth != "Bearer secret-token" || got.Proto != "HTTP/2.0" {
		t.Errorf("Authorization = %q, protocol %s", got.Auth, got.Proto)
	}

	items, rv, err := c.List(ctx, resources.Pods, "default", ListOptions{LabelSelector: "app=x", FieldSelector: "spec.nodeName=n1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || rv != "42" || items[1].GetName() != "b" || items[0].GetObjectKind().GroupVersionKind().Kind != "Pod" {
		t.Fatalf("List = %d items rv %q", len(items), rv)
	}
	if q := fs.last().Query; q != "fieldSelector=spec.nodeName%3Dn1&labelSelector=app%3Dx" {
		t.Errorf("List query = %q", q)
	}

	in := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"}} // no namespace: default
	// A client without Config.ResourceFor writes the core/v1 kinds alone.
	coreOnly, err := NewHTTP(Config{Server: fs.URL, CAPEM: pemCert(fs.Certificate().Raw), Token: "secret-token"})
	if err != nil {
		t.Fatal(err)
	}
	defer coreOnly.Close()
	if _, err := coreOnly.Create(ctx, in, WriteOptions{}); err == nil || !strings.Contains(err.Error(), "*v1.DaemonSet is not a core/v1 kind, the only ones this client knows: set Config.ResourceFor to resources.ForObject") {
		t.Errorf("a DaemonSet created without Config.ResourceFor: %v", err)
	}
	if _, err := c.Create(ctx, in, WriteOptions{FieldManager: "everynode", DryRun: true}); err != nil {
		t.Fatal(err)
	}
	req := fs.last()
	if req.Query != "dryRun=All&fieldManager=everynode" || req.ContentType != "application/json" ||
		!strings.Contains(req.Body, `"kind":"DaemonSet"`) || !strings.Contains(req.Body, `"apiVersion":"apps/v1"`) {
		t.Errorf("Create sent %+v", req)
	}
	if in.Kind != "" {
		t.Error("Create modified its argument")
	}

	in.Namespace = "default"
	if _, err := c.Update(ctx, in, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateStatus(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default"}}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if fs.last().Path != "/api/v1/namespaces/default/pods/a/status" {
		t.Errorf("UpdateStatus path %q", fs.last().Path)
	}

	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"agent","image":"busybox:1.37"}]}}}}`)
	if _, err := c.Patch(ctx, resources.DaemonSets, "default", "agent", types.StrategicMergePatchType, patch, WriteOptions{}, ""); err != nil {
		t.Fatal(err)
	}
	if req := fs.last(); req.ContentType != "application/strategic-merge-patch+json" || req.Body != string(patch) {
		t.Errorf("Patch sent %+v", req)
	}

	bg := metav1.DeletePropagationBackground
	deleted, err := c.Delete(ctx, resources.DaemonSets, "default", "agent", metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil || deleted.GetName() != "agent" {
		t.Fatalf("Delete = %v, %v", deleted, err)
	}
	if body := fs.last().Body; !strings.Contains(body, `"propagationPolicy":"Background"`) || !strings.Contains(body, `"kind":"DeleteOptions"`) {
		t.Errorf("Delete body %s", body)
	}
	if deleted, err := c.Delete(ctx, resources.Nodes, "", "n1", metav1.DeleteOptions{}); err != nil || deleted != nil {
		t.Fatalf("Delete answered by Status = %v, %v; want nil, nil", deleted, err)
	}
}

func TestStatusErrors(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "daemonsets"}
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "DaemonSet"}, "bad", field.ErrorList{
		field.Invalid(field.NewPath("spec", "template", "metadata", "labels"), "x", "`selector` does not match template `labels`"),
	})
	_, c := newFakeServer(t, map[string]http.HandlerFunc{
		"GET /apis/apps/v1/namespaces/default/daemonsets/missing": func(w http.ResponseWriter, r *http.Request) {
			writeStatus(w, apierrors.NewNotFound(gr, "missing"))
		},
		"GET /apis/apps/v1/namespaces/default/daemonsets/exists": func(w http.ResponseWriter, r *http.Request) {
			writeStatus(w, apierrors.NewAlreadyExists(gr, "exists"))
		},
		"GET /apis/apps/v1/namespaces/default/daemonsets/stale": func(w http.ResponseWriter, r *http.Request) {
			writeStatus(w, apierrors.NewConflict(gr, "stale", fmt.Errorf("the object has been modified")))
		},
		"GET /apis/apps/v1/namespaces/default/daemonsets/bad": func(w http.ResponseWriter, r *http.Request) {
			writeStatus(w, invalid)
		},
		"GET /apis/apps/v1/namespaces/default/daemonsets/boom": func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "upstream exploded", http.StatusBadGateway)
		},
		"GET /apis/apps/v1/namespaces/default/daemonsets/noauth": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
		},
	})
	tests := []struct {
		name    string
		check   func(error) bool
		code    int32
		message string
	}{
		{"missing", apierrors.IsNotFound, 404, `daemonsets.apps "missing" not found`},
		{"exists", apierrors.IsAlreadyExists, 409, `daemonsets.apps "exists" already exists`},
		{"stale", apierrors.IsConflict, 409, "the object has been modified"},
		{"bad", apierrors.IsInvalid, 422, "selector` does not match template"},
		{"boom", func(error) bool { return true }, 502, "/apis/apps/v1/namespaces/default/daemonsets/boom: 502 Bad Gateway: upstream exploded"},
		{"noauth", apierrors.IsUnauthorized, 401, "daemonsets/noauth: 401 Unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Get(context.Background(), resources.DaemonSets, "default", tt.name)
			var se *apierrors.StatusError
			if !asStatus(err, &se) {
				t.Fatalf("err = %T %v, want *StatusError", err, err)
			}
			if !tt.check(err) || se.ErrStatus.Code != tt.code || !strings.Contains(se.ErrStatus.Message, tt.message) {
				t.Fatalf("err = %+v", se.ErrStatus)
			}
		})
	}
	_, err := c.Get(context.Background(), resources.DaemonSets, "default", "bad")
	causes := err.(*apierrors.StatusError).ErrStatus.Details.Causes
	if len(causes) != 1 || causes[0].Field != "spec.template.metadata.labels" {
		t.Fatalf("422 causes = %+v", causes)
	}
}

func asStatus(err error, out **apierrors.StatusError) bool {
	se, ok := err.(*apierrors.StatusError)
	*out = se
	return ok
}

func TestWatchStream(t *testing.T) {
	gone := apierrors.NewResourceExpired("too old resource version: 1 (5)").ErrStatus
	gone.Kind, gone.APIVersion = "Status", "v1"
	goneJSON, _ := json.Marshal(gone)
	_, c := newFakeServer(t, map[string]http.HandlerFunc{
		"GET /api/v1/pods": func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("watch") != "true" || r.URL.Query().Get("fieldSelector") != "spec.nodeName=n1" ||
				r.URL.Query().Get("resourceVersion") != "5" {
				http.Error(w, "bad query "+r.URL.RawQuery, 400)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p1","resourceVersion":"6"}}}`+"\n")
			fmt.Fprintf(w, `{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p1","resourceVersion":"7"},"spec":{"nodeName":"n1"}}}`+"\n")
			fmt.Fprintf(w, `{"type":"DELETED","object":{"metadata":{"name":"p1","resourceVersion":"8"}}}`)
			fmt.Fprintf(w, `{"type":"ERROR","object":%s}`+"\n", goneJSON)
		},
	})
	w, err := c.Watch(context.Background(), resources.Pods, "", ListOptions{FieldSelector: "spec.nodeName=n1", ResourceVersion: "5"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for ev := range w.ResultChan() {
		switch o := ev.Object.(type) {
		case *corev1.Pod:
			if o.Kind != "Pod" {
				t.Errorf("event object without kind: %+v", o.TypeMeta)
			}
			got = append(got, fmt.Sprintf("%s %s %s", ev.Type, o.Name, o.ResourceVersion))
		case *metav1.Status:
			got = append(got, fmt.Sprintf("%s %d %s", ev.Type, o.Code, o.Reason))
		default:
			t.Fatalf("unexpected object %T", o)
		}
	}
	want := []string{"ADDED p1 6", "MODIFIED p1 7", "DELETED p1 8", "ERROR 410 Expired"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events = %q, want %q", got, want)
	}
	w.Stop() // idempotent after the stream ended
}

func TestWatchStop(t *testing.T) {
	release := make(chan struct{})
	_, c := newFakeServer(t, map[string]http.HandlerFunc{
		"GET /apis/apps/v1/namespaces/default/daemonsets": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			fmt.Fprintf(w, `{"type":"ADDED","object":%s}`+"\n", strings.ReplaceAll(dsJSON, "\n", ""))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-release:
			}
		},
	})
	defer close(release)
	w, err := c.Watch(context.Background(), resources.DaemonSets, "default", ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev := <-w.ResultChan()
	if ev.Type != watch.Added || ev.Object.(*appsv1.DaemonSet).Name != "agent" {
		t.Fatalf("first event %+v", ev)
	}
	w.Stop()
	w.Stop()
	if _, open := <-w.ResultChan(); open {
		t.Fatal("result channel still open after Stop")
	}
}

func TestWatchContextCancel(t *testing.T) {
	_, c := newFakeServer(t, map[string]http.HandlerFunc{
		"GET /api/v1/nodes": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Watch(ctx, resources.Nodes, "", ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for ev := range w.ResultChan() {
		t.Errorf("event %s %v after the context ended, want the channel closed", ev.Type, ev.Object)
	}
	w.Stop()
}

// TestWatchMalformedEvent: an event that does not decode ends the stream
// with an ERROR event carrying a 500 Status, so the caller re-lists.
func TestWatchMalformedEvent(t *testing.T) {
	_, c := newFakeServer(t, map[string]http.HandlerFunc{
		"GET /api/v1/nodes": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(200)
			fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1"}}}`+"\n")
			fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"Node","apiVersion":"v1","metadata":{"name":7}}}`+"\n")
			fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"Node","apiVersion":"v1","metadata":{"name":"n3"}}}`+"\n")
		},
	})
	if got, want := nodeWatchEvents(t, c), "ADDED n1|ERROR 500"; got != want {
		t.Fatalf("events = %q, want %q", got, want)
	}
}

// nodeWatchEvents watches Nodes with c until the stream ends and returns
// its events, "|"-separated: "TYPE name" for a Node (which must carry its
// kind), "TYPE code" for a Status.
func nodeWatchEvents(t *testing.T, c *HTTP) string {
	t.Helper()
	w, err := c.Watch(context.Background(), resources.Nodes, "", ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for ev := range w.ResultChan() {
		switch o := ev.Object.(type) {
		case *corev1.Node:
			if o.Kind != "Node" || o.APIVersion != "v1" {
				t.Errorf("node without its kind: %+v", o.TypeMeta)
			}
			got = append(got, fmt.Sprintf("%s %s", ev.Type, o.Name))
		case *metav1.Status:
			got = append(got, fmt.Sprintf("%s %d", ev.Type, o.Code))
		default:
			t.Fatalf("unexpected object %T", o)
		}
	}
	return strings.Join(got, "|")
}

func TestWatchRefused(t *testing.T) {
	_, c := newFakeServer(t, map[string]http.HandlerFunc{
		"GET /api/v1/nodes": func(w http.ResponseWriter, r *http.Request) {
			writeStatus(w, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", fmt.Errorf("no")))
		},
	})
	if _, err := c.Watch(context.Background(), resources.Nodes, "", ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("err = %v, want Forbidden", err)
	}
}

func TestRejectsUnknownCA(t *testing.T) {
	fs, _ := newFakeServer(t, nil)
	c, err := NewHTTP(Config{Server: fs.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), resources.Nodes, "", "x"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("err = %v, want certificate error", err)
	}
}
