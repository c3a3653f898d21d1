package apiserver

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apidiscoveryv2beta1 "k8s.io/api/apidiscovery/v2beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/resources"
)

// wireLog records the Content-Type of every request a client sends and of
// every response it gets, by path.
type wireLog struct {
	mu        sync.Mutex
	requests  []string // "METHOD path content-type"
	responses []string // "METHOD path code content-type"
}

func (l *wireLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		res, err := rt.RoundTrip(req)
		l.mu.Lock()
		defer l.mu.Unlock()
		if req.Body != nil {
			l.requests = append(l.requests, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type"))
		}
		if err == nil {
			l.responses = append(l.responses, req.Method+" "+req.URL.Path+" "+http.StatusText(res.StatusCode)+" "+res.Header.Get("Content-Type"))
		}
		return res, err
	})
}

func (l *wireLog) snapshot() (requests, responses []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.requests...), append([]string(nil), l.responses...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// serveTLS runs a server on a real store over TLS with the cluster CA, as
// `everynode server` does, and returns a client-go config for it that speaks
// protobuf (as kubectl's typed clients do) and records its traffic.
func serveTLS(t *testing.T) (*Server, *rest.Config, *wireLog) {
	t.Helper()
	cluster, err := pki.Load(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatalf("pki.Load: %v", err)
	}
	s, err := New(Config{Store: openStore(t), Authenticator: cluster, Logger: testLogger()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.EnsureNamespaces(testCtx(t), "default"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln, cluster.TLSConfig()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	log := &wireLog{}
	cfg := &rest.Config{
		Host:            "https://" + ln.Addr().String(),
		BearerToken:     cluster.AdminToken(),
		TLSClientConfig: rest.TLSClientConfig{CAData: cluster.CAPEM()},
		ContentConfig: rest.ContentConfig{
			ContentType:        runtime.ContentTypeProtobuf,
			AcceptContentTypes: runtime.ContentTypeProtobuf + ", " + runtime.ContentTypeJSON,
		},
		WrapTransport: log.wrap,
	}
	return s, cfg, log
}

// nextWatchEvent reads one watch event or fails after a deadline.
func nextWatchEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch ended, want an event")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event within 10s")
	}
	return watch.Event{}
}

// TestClientGoProtobuf drives client-go's typed clientset, configured for
// protobuf, through every verb on Namespaces, Nodes, Pods and DaemonSets, and
// checks that both directions were protobuf on the wire.
func TestClientGoProtobuf(t *testing.T) {
	_, cfg, log := serveTLS(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	merge := []byte(`{"metadata":{"labels":{"patched":"yes"}}}`)

	t.Run("namespaces", func(t *testing.T) {
		c := cs.CoreV1().Namespaces()
		w, err := c.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=proto"})
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		defer w.Stop()
		ns, err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "proto"}}, metav1.CreateOptions{})
		if err != nil || ns.UID == "" || ns.Status.Phase != corev1.NamespaceActive {
			t.Fatalf("create: %+v %v", ns, err)
		}
		if ev := nextWatchEvent(t, w); ev.Type != watch.Added || ev.Object.(*corev1.Namespace).Name != "proto" {
			t.Fatalf("watch event %s %#v", ev.Type, ev.Object)
		}
		ns.Labels = map[string]string{"updated": "yes"}
		if ns, err = c.Update(ctx, ns, metav1.UpdateOptions{}); err != nil || ns.Labels["updated"] != "yes" {
			t.Fatalf("update: %+v %v", ns, err)
		}
		if ev := nextWatchEvent(t, w); ev.Type != watch.Modified || ev.Object.(*corev1.Namespace).Labels["updated"] != "yes" {
			t.Fatalf("watch event %s %#v", ev.Type, ev.Object)
		}
		if ns, err = c.Patch(ctx, "proto", types.MergePatchType, merge, metav1.PatchOptions{}); err != nil || ns.Labels["patched"] != "yes" {
			t.Fatalf("patch: %+v %v", ns, err)
		}
		list, err := c.List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 2 || list.ResourceVersion == "" {
			t.Fatalf("list: %+v %v", list, err)
		}
		if err := c.Delete(ctx, "proto", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := c.Get(ctx, "proto", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("get after delete: %v, want NotFound", err)
		}
	})

	t.Run("nodes", func(t *testing.T) {
		c := cs.CoreV1().Nodes()
		n, err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"a": "b"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if n, err = c.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil || len(n.Status.Conditions) != 1 {
			t.Fatalf("update status: %+v %v", n, err)
		}
		if n, err = c.Patch(ctx, "n1", types.StrategicMergePatchType, merge, metav1.PatchOptions{}); err != nil || n.Labels["patched"] != "yes" || n.Labels["a"] != "b" {
			t.Fatalf("patch: %+v %v", n, err)
		}
		got, err := c.Get(ctx, "n1", metav1.GetOptions{})
		if err != nil || got.ResourceVersion != n.ResourceVersion || got.Status.Conditions[0].Type != corev1.NodeReady {
			t.Fatalf("get: %+v %v", got, err)
		}
		list, err := c.List(ctx, metav1.ListOptions{LabelSelector: "a=b"})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("list: %+v %v", list, err)
		}
		if err := c.Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete: %v", err)
		}
	})

	t.Run("pods", func(t *testing.T) {
		c := cs.CoreV1().Pods("default")
		w, err := c.Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		defer w.Stop()
		p := newPod("p1", "")
		p.TypeMeta = metav1.TypeMeta{}
		p, err = c.Create(ctx, p, metav1.CreateOptions{})
		if err != nil || p.Spec.RestartPolicy != corev1.RestartPolicyAlways || p.Spec.Containers[0].TerminationMessagePath == "" {
			t.Fatalf("create (defaults applied?): %+v %v", p, err)
		}
		if ev := nextWatchEvent(t, w); ev.Type != watch.Added || ev.Object.(*corev1.Pod).Name != "p1" {
			t.Fatalf("watch event %s %#v", ev.Type, ev.Object)
		}
		p.Labels["x"] = "y"
		if p, err = c.Update(ctx, p, metav1.UpdateOptions{}); err != nil || p.Labels["x"] != "y" {
			t.Fatalf("update: %v", err)
		}
		if p, err = c.Patch(ctx, "p1", types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/labels/j","value":"k"}]`), metav1.PatchOptions{}); err != nil || p.Labels["j"] != "k" {
			t.Fatalf("patch: %v", err)
		}
		list, err := c.List(ctx, metav1.ListOptions{LabelSelector: "x=y"})
		if err != nil || len(list.Items) != 1 || list.Items[0].Name != "p1" {
			t.Fatalf("list: %+v %v", list, err)
		}
		if _, err := c.Update(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", ResourceVersion: "1"}, Spec: p.Spec}, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Fatalf("stale update: %v, want a Conflict Status", err)
		}
		if err := c.Delete(ctx, "p1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		for {
			ev := nextWatchEvent(t, w)
			if ev.Type == watch.Deleted {
				break
			}
		}
	})

	t.Run("daemonsets", func(t *testing.T) {
		c := cs.AppsV1().DaemonSets("default")
		ds := newDS("agent")
		ds.TypeMeta = metav1.TypeMeta{}
		ds, err := c.Create(ctx, ds, metav1.CreateOptions{})
		if err != nil || ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ds.Generation != 1 {
			t.Fatalf("create: %+v %v", ds, err)
		}
		ds.Spec.Template.Spec.Containers[0].Image = "busybox:1.37"
		if ds, err = c.Update(ctx, ds, metav1.UpdateOptions{}); err != nil || ds.Generation != 2 {
			t.Fatalf("update: %+v %v", ds, err)
		}
		ds.Status.DesiredNumberScheduled = 3
		if ds, err = c.UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil || ds.Status.DesiredNumberScheduled != 3 {
			t.Fatalf("update status: %v", err)
		}
		if ds, err = c.Patch(ctx, "agent", types.MergePatchType, merge, metav1.PatchOptions{}); err != nil || ds.Labels["patched"] != "yes" {
			t.Fatalf("patch: %v", err)
		}
		w, err := c.Watch(ctx, metav1.ListOptions{ResourceVersion: ds.ResourceVersion})
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		defer w.Stop()
		if err := c.Delete(ctx, "agent", metav1.DeleteOptions{PropagationPolicy: ptrTo(metav1.DeletePropagationBackground)}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if ev := nextWatchEvent(t, w); ev.Type != watch.Deleted || ev.Object.(*appsv1.DaemonSet).Name != "agent" {
			t.Fatalf("watch event %s %#v", ev.Type, ev.Object)
		}
		list, err := c.List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 0 {
			t.Fatalf("list: %+v %v", list, err)
		}
	})

	requests, responses := log.snapshot()
	if len(requests) == 0 || len(responses) == 0 {
		t.Fatal("no traffic recorded")
	}
	for _, r := range requests {
		if strings.Contains(r, " PATCH ") || strings.HasPrefix(r, "PATCH ") {
			continue // patches are JSON by definition
		}
		if !strings.HasSuffix(r, " "+runtime.ContentTypeProtobuf) {
			t.Errorf("request body not protobuf: %s", r)
		}
	}
	for _, r := range responses {
		if !strings.HasSuffix(r, " "+runtime.ContentTypeProtobuf) && !strings.HasSuffix(r, " "+runtime.ContentTypeProtobuf+";stream=watch") {
			t.Errorf("response not protobuf: %s", r)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// doWire sends one request with raw bytes and the given Content-Type and
// Accept headers (empty: not sent) as the admin.
func (e *env) doWire(method, path, contentType, accept string, body []byte) resp {
	e.t.Helper()
	hr, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+adminToken)
	if contentType != "" {
		hr.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		hr.Header.Set("Accept", accept)
	}
	res, err := e.srv.Client().Do(hr)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{code: res.StatusCode, header: res.Header, body: b}
}

// protoBytes encodes obj as a protobuf request body.
func protoBytes(t *testing.T, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(nil, nil).Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// decodeProto decodes a protobuf response body into into.
func decodeProto(t *testing.T, e *env, r resp, into runtime.Object) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != runtime.ContentTypeProtobuf {
		t.Fatalf("Content-Type %q, want protobuf: %q", ct, r.body)
	}
	if _, _, err := e.s.wire.proto.Serializer.Decode(r.body, nil, into); err != nil {
		t.Fatalf("decode protobuf %q: %v", r.body, err)
	}
}

// TestNegotiation: Accept decides the response encoding with q-values and
// fallbacks, Tables stay JSON, and what the server cannot write is a 406.
func TestNegotiation(t *testing.T) {
	e := newEnv(t)
	const proto, jsonT, yamlT = runtime.ContentTypeProtobuf, runtime.ContentTypeJSON, runtime.ContentTypeYAML
	const table = "application/json;as=Table;v=v1;g=meta.k8s.io"
	const notAcceptable = "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
	cases := []struct {
		accept, wantType string
		wantCode         int
		table            bool
	}{
		{"", jsonT, 200, false},
		{"application/json", jsonT, 200, false},
		{"*/*", jsonT, 200, false},
		{"application/*", jsonT, 200, false},
		{"application/vnd.kubernetes.protobuf, application/json", proto, 200, false},
		{"application/vnd.kubernetes.protobuf,application/json", proto, 200, false},
		{"application/json;q=0.5, application/vnd.kubernetes.protobuf;q=0.9", proto, 200, false},
		{"application/vnd.kubernetes.protobuf;q=0.1, application/json", jsonT, 200, false},
		{"text/html, application/yaml", yamlT, 200, false},
		{table + ",application/json", jsonT, 200, true},
		{"application/yaml;as=Table;v=v1;g=meta.k8s.io", yamlT, 200, true},
		{"application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json", jsonT, 200, false},
		{"application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io, application/vnd.kubernetes.protobuf", proto, 200, false},
		{"application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io", jsonT, 406, false},
		{"text/html", jsonT, 406, false},
		{"application/json;stream=bogus", jsonT, 406, false},
	}
	for _, tc := range cases {
		for _, path := range []string{"/api/v1/namespaces/default", "/api/v1/namespaces"} {
			r := e.doWire("GET", path, "", tc.accept, nil)
			if r.code != tc.wantCode || r.header.Get("Content-Type") != tc.wantType {
				t.Errorf("GET %s Accept %q: %d %q, want %d %q: %.200q", path, tc.accept, r.code, r.header.Get("Content-Type"),
					tc.wantCode, tc.wantType, r.body)
				continue
			}
			if r.code == 406 {
				if st := r.status(t); st.Reason != metav1.StatusReasonNotAcceptable || st.Message != notAcceptable {
					t.Errorf("Accept %q: Status %+v", tc.accept, st)
				}
				continue
			}
			var tm metav1.TypeMeta
			switch tc.wantType {
			case proto:
				u := &runtime.Unknown{}
				decodeProto(t, e, r, u)
				tm = metav1.TypeMeta{APIVersion: u.APIVersion, Kind: u.Kind}
			case yamlT:
				if err := yaml.Unmarshal(r.body, &tm); err != nil {
					t.Fatal(err)
				}
			default:
				r.must(t, 200, &tm)
			}
			wantKind := "Namespace"
			if strings.HasSuffix(path, "namespaces") {
				wantKind = "NamespaceList"
			}
			if tc.table {
				wantKind = "Table"
			}
			if tm.Kind != wantKind {
				t.Errorf("GET %s Accept %q: kind %q, want %q", path, tc.accept, tm.Kind, wantKind)
			}
		}
	}

	// A watch needs a stream encoding: YAML has none.
	// The 406 Status itself is YAML, as kube-apiserver's ErrorNegotiated
	// writes it.
	r := e.doWire("GET", "/api/v1/namespaces?watch=true", "", "application/yaml", nil)
	var yst metav1.Status
	if err := yaml.Unmarshal(r.body, &yst); err != nil {
		t.Fatal(err)
	}
	if st := yst; r.code != 406 || r.header.Get("Content-Type") != yamlT || st.Message != "only the following media types are accepted: application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch" {
		t.Errorf("YAML watch: %d %+v", r.code, st)
	}

	// Errors come back in protobuf when the client asked for it.
	r = e.doWire("GET", "/api/v1/namespaces/missing", "", "application/vnd.kubernetes.protobuf, application/json", nil)
	var st metav1.Status
	decodeProto(t, e, r, &st)
	if r.code != 404 || st.Code != 404 || st.Reason != metav1.StatusReasonNotFound || st.Message != `namespaces "missing" not found` {
		t.Errorf("404 in protobuf: %d %+v", r.code, st)
	}

	// Discovery documents in protobuf, legacy and aggregated.
	r = e.doWire("GET", "/api", "", proto, nil)
	var versions metav1.APIVersions
	decodeProto(t, e, r, &versions)
	if len(versions.Versions) != 1 || versions.Versions[0] != "v1" {
		t.Errorf("/api in protobuf: %+v", versions)
	}
	r = e.doWire("GET", "/apis/apps/v1", "", proto+", application/json", nil)
	var rl metav1.APIResourceList
	decodeProto(t, e, r, &rl)
	if rl.GroupVersion != "apps/v1" || len(rl.APIResources) == 0 {
		t.Errorf("/apis/apps/v1 in protobuf: %+v", rl)
	}
	r = e.doWire("GET", "/apis", "", proto+";g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json", nil)
	if ct := r.header.Get("Content-Type"); r.code != 200 || ct != proto+";g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList" {
		t.Fatalf("aggregated /apis in protobuf: %d %q", r.code, ct)
	}
	r.header.Set("Content-Type", proto)
	var agg apidiscoveryv2.APIGroupDiscoveryList
	decodeProto(t, e, r, &agg)
	if len(agg.Items) != len(servedGroups()) || agg.Items[0].Name != "apps" || len(agg.Items[0].Versions[0].Resources) == 0 {
		t.Errorf("aggregated /apis: %+v", agg)
	}
	r = e.doWire("GET", "/api", "", "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList", nil)
	var beta apidiscoveryv2beta1.APIGroupDiscoveryList
	r.must(t, 200, &beta)
	if beta.APIVersion != "apidiscovery.k8s.io/v2beta1" || len(beta.Items) != 1 || len(beta.Items[0].Versions[0].Resources) == 0 {
		t.Errorf("aggregated v2beta1 /api: %+v", beta)
	}
}

// TestProtobufWrites: create, update and delete with protobuf bodies and
// answers; unknown fields cannot exist in a protobuf body, so fieldValidation=
// Strict changes nothing and no warning is sent.
func TestProtobufWrites(t *testing.T) {
	e := newEnv(t)
	const proto = runtime.ContentTypeProtobuf
	ds := newDS("agent")
	r := e.doWire("POST", dsPath+"?fieldValidation=Strict", proto, proto, protoBytes(t, ds))
	var created appsv1.DaemonSet
	decodeProto(t, e, r, &created)
	if r.code != 201 || created.UID == "" || created.Kind != "DaemonSet" || created.APIVersion != "apps/v1" || r.header.Get("Warning") != "" {
		t.Fatalf("create: %d %+v %q", r.code, created.ObjectMeta, r.header.Get("Warning"))
	}
	// A body without apiVersion and kind takes the endpoint's.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}
	if r := e.doWire("POST", "/api/v1/namespaces", proto, "", protoBytes(t, ns)); r.code != 201 {
		t.Fatalf("create without TypeMeta: %d %s", r.code, r.body)
	}
	created.Spec.Template.Spec.Containers[0].Image = "busybox:1.37"
	r = e.doWire("PUT", dsPath+"/agent", proto, "", protoBytes(t, &created))
	var updated appsv1.DaemonSet
	r.must(t, 200, &updated)
	if updated.Generation != 2 {
		t.Fatalf("update: %+v", updated.ObjectMeta)
	}
	opts := &metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DeleteOptions"},
		Preconditions: &metav1.Preconditions{UID: &created.UID}}
	r = e.doWire("DELETE", dsPath+"/agent", proto, proto, protoBytes(t, opts))
	var deleted appsv1.DaemonSet
	decodeProto(t, e, r, &deleted)
	if r.code != 200 || deleted.Name != "agent" {
		t.Fatalf("delete: %d %+v", r.code, deleted.ObjectMeta)
	}
	// A Table answer to a write, as kube-apiserver gives.
	r = e.doWire("POST", "/api/v1/namespaces", proto, "application/json;as=Table;v=v1;g=meta.k8s.io", protoBytes(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t"}}))
	var tbl metav1.Table
	r.must(t, 201, &tbl)
	if tbl.Kind != "Table" || len(tbl.Rows) != 1 {
		t.Fatalf("Table answer: %+v", tbl)
	}
}

// TestProtobufBadInput: each bad protobuf body gets kube-apiserver's Status
// (in protobuf when asked), and nothing stored changes.
func TestProtobufBadInput(t *testing.T) {
	e := newEnv(t)
	const proto = runtime.ContentTypeProtobuf
	const nsPath = "/api/v1/namespaces"
	e.createPod(newPod("keep", ""))
	good := protoBytes(t, &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "x"}})
	pod := newPod("x", "")
	pod.Namespace = "default"
	huge := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: "huge", Annotations: map[string]string{"a": strings.Repeat("x", DefaultMaxBodyBytes)}}}
	jsonBody := []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}`)
	rawPod, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	truncatedRaw := protoBytes(t, &runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "Pod"}, Raw: rawPod[:len(rawPod)/2]})
	cases := []struct {
		name, method, path string
		body               []byte
		code               int32
		reason             metav1.StatusReason
		msg                string // exact, or a prefix when it ends in "…"
	}{
		{"truncated", "POST", nsPath, good[:len(good)/2], 400, metav1.StatusReasonBadRequest,
			"the object provided is unrecognized (must be of type Namespace): unexpected EOF (" + summarizeData(good[:len(good)/2], 30) + ")"},
		{"truncated object", "POST", podsPath, truncatedRaw, 400, metav1.StatusReasonBadRequest,
			`Pod in version "v1" cannot be handled as a Pod: unexpected EOF`},
		{"wrong kind", "POST", nsPath, protoBytes(t, pod), 400, metav1.StatusReasonBadRequest,
			`Pod in version "v1" cannot be handled as a Namespace: converting (v1.Pod) to (core.Namespace): unknown conversion`},
		{"wrong kind on update", "PUT", dsPath + "/x", protoBytes(t, pod), 400, metav1.StatusReasonBadRequest,
			`Pod in version "v1" cannot be handled as a DaemonSet: converting (v1.Pod) to (apps.DaemonSet): unknown conversion`},
		{"missing magic", "POST", nsPath, jsonBody, 400, metav1.StatusReasonBadRequest,
			`the object provided is unrecognized (must be of type Namespace): provided data does not appear to be a protobuf message, expected prefix [107 56 115 0] ({"apiVersion":"v1","kind":"Nam ...)`},
		{"empty", "POST", nsPath, nil, 400, metav1.StatusReasonBadRequest,
			"the object provided is unrecognized (must be of type Namespace): empty data (<empty>)"},
		{"unknown kind", "POST", nsPath, protoBytes(t, &runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "Bogus"}, Raw: []byte{}}),
			400, metav1.StatusReasonBadRequest, `Bogus in version "v1" cannot be handled as a Namespace: no kind "Bogus" is registered for version "v1"…`},
		{"oversized", "POST", nsPath, protoBytes(t, huge), 413, metav1.StatusReasonRequestEntityTooLarge,
			"Request entity too large: limit is 3145728"},
		{"bad delete options", "DELETE", podsPath + "/keep", good[:len(good)/2], 400, metav1.StatusReasonBadRequest, "unexpected EOF"},
	}
	rvBefore := listRV(t, e)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, accept := range []string{"", proto + ", application/json"} {
				r := e.doWire(tc.method, tc.path, proto, accept, tc.body)
				var st metav1.Status
				if accept == "" {
					st = r.status(t)
				} else {
					decodeProto(t, e, r, &st)
				}
				if int32(r.code) != tc.code || st.Code != tc.code || st.Reason != tc.reason || st.Kind != "Status" {
					t.Errorf("Accept %q: %d %+v, want %d %s", accept, r.code, st, tc.code, tc.reason)
				}
				if exact := !strings.HasSuffix(tc.msg, "…"); exact && st.Message != tc.msg || !exact && !strings.HasPrefix(st.Message, strings.TrimSuffix(tc.msg, "…")) {
					t.Errorf("Accept %q: message\n%q\nwant\n%q", accept, st.Message, tc.msg)
				}
			}
		})
	}
	if rv := listRV(t, e); rv != rvBefore {
		t.Errorf("store revision moved from %s to %s: something was written", rvBefore, rv)
	}

	// Other media types are a 415 naming the three accepted ones.
	r := e.doWire("POST", nsPath, "application/cbor", "", good)
	if st := r.status(t); r.code != 415 || st.Reason != metav1.StatusReasonUnsupportedMediaType ||
		st.Message != "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf" {
		t.Errorf("CBOR body: %d %+v", r.code, st)
	}
	// A patch cannot be protobuf.
	r = e.doWire("PATCH", podsPath+"/keep", proto, "", good)
	if st := r.status(t); r.code != 415 || !strings.HasSuffix(st.Message, "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml") {
		t.Errorf("protobuf patch: %d %+v", r.code, st)
	}
	if rv := listRV(t, e); rv != rvBefore {
		t.Errorf("store revision moved from %s to %s: something was written", rvBefore, rv)
	}
}

// listRV is the store's revision, as a list reports it.
func listRV(t *testing.T, e *env) string {
	t.Helper()
	var l corev1.NamespaceList
	e.get("/api/v1/namespaces").must(t, 200, &l)
	return l.ResourceVersion
}

// TestKubectlCreateNamespace: kubectl's typed clients send protobuf bodies
// (`kubectl create namespace` used to fail with 415); the other kubectl
// commands keep working beside them.
func TestKubectlCreateNamespace(t *testing.T) {
	k := newKubectlEnv(t)
	r := k.run("", nil, "create", "namespace", "logging", "-v=8")
	if r.code != 0 {
		t.Fatalf("kubectl create namespace: exit %d\n%s", r.code, r.err)
	}
	wantContains(t, r.out, "namespace/logging created")
	wantContains(t, r.err, "Content-Type: application/vnd.kubernetes.protobuf")
	ns := k.get(resources.Namespaces, "", "logging").(*corev1.Namespace)
	if ns.Status.Phase != corev1.NamespaceActive {
		t.Errorf("namespace %+v", ns.Status)
	}
	wantContains(t, k.ok("get", "namespace", "logging"), "logging", "Active")
	out := k.okIn("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: fromfile\n", "create", "-f", "-")
	wantContains(t, out, "namespace/fromfile created")
	wantContains(t, k.ok("delete", "namespace", "logging", "fromfile"), `namespace "logging" deleted`, `namespace "fromfile" deleted`)
	if r := k.run("", nil, "get", "namespace", "logging"); r.code == 0 || !strings.Contains(r.err, `namespaces "logging" not found`) {
		t.Errorf("get after delete: exit %d %s", r.code, r.err)
	}
}

// BenchmarkNegotiate measures Accept negotiation, which runs on every
// request: the everynode client's plain JSON, kubectl get's Table list and a
// protobuf client's.
func BenchmarkNegotiate(b *testing.B) {
	wr, err := newWire()
	if err != nil {
		b.Fatal(err)
	}
	for _, accept := range []string{
		"application/json",
		"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
		"application/vnd.kubernetes.protobuf, application/json",
	} {
		b.Run(strings.SplitN(accept, ";", 2)[0], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := wr.negotiate(accept, resourceRestrictions{}); !ok {
					b.Fatal("not negotiated")
				}
			}
		})
	}
}
