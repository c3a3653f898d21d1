package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/everynode/everynode/store"
)

const (
	adminToken = "admin-token"
	userToken  = "user-token"
	dsPath     = "/apis/apps/v1/namespaces/default/daemonsets"
	podsPath   = "/api/v1/namespaces/default/pods"
)

// tokens is the test Authenticator: a fixed token table.
type tokens map[string]UserInfo

func (t tokens) AuthenticateToken(token string) (string, []string, bool) {
	u, ok := t[token]
	return u.Name, u.Groups, ok
}

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// openStore opens a store on embedded etcd in a temp dir, closed at cleanup.
func openStore(t testing.TB) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{DataDir: t.TempDir(), CompactInterval: -1, Logger: testLogger()})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// env is one API server on a real store, served by httptest.
type env struct {
	t   testing.TB
	s   *Server
	st  *store.Store
	srv *httptest.Server
}

func newEnv(t testing.TB, mods ...func(*Config)) *env {
	t.Helper()
	st := openStore(t)
	cfg := Config{
		Store: st,
		Authenticator: tokens{
			adminToken: {Name: "admin", Groups: []string{mastersGroup}},
			userToken:  {Name: "someone"},
		},
		Logger: testLogger(),
	}
	for _, m := range mods {
		m(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.EnsureNamespaces(testCtx(t), "default", "kube-system", "kube-public"); err != nil {
		t.Fatalf("EnsureNamespaces: %v", err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		s.Stop()
		srv.Close()
	})
	return &env{t: t, s: s, st: st, srv: srv}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// resp is a finished HTTP response.
type resp struct {
	code   int
	header http.Header
	body   []byte
	close  bool // the answer said Connection: close
}

// req describes one request; the zero token means the admin token.
type req struct {
	method, path, contentType, body, token string
}

func (e *env) do(r req) resp {
	e.t.Helper()
	hr, err := http.NewRequest(r.method, e.srv.URL+r.path, strings.NewReader(r.body))
	if err != nil {
		e.t.Fatal(err)
	}
	switch r.token {
	case "":
		hr.Header.Set("Authorization", "Bearer "+adminToken)
	case "-":
	default:
		hr.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.contentType != "" {
		hr.Header.Set("Content-Type", r.contentType)
	} else if r.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	res, err := e.srv.Client().Do(hr)
	if err != nil {
		e.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{code: res.StatusCode, header: res.Header, body: b, close: res.Close}
}

func (e *env) get(path string) resp { return e.do(req{method: "GET", path: path}) }

// must checks the response code and decodes the body into out (when not nil).
func (r resp) must(t testing.TB, code int, out any) resp {
	t.Helper()
	if r.code != code {
		t.Fatalf("code %d, want %d: %s", r.code, code, r.body)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			t.Fatalf("decode %s: %v", r.body, err)
		}
	}
	return r
}

// status decodes a Status body.
func (r resp) status(t testing.TB) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatalf("decode Status %s: %v", r.body, err)
	}
	return st
}

func toJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// newDS is a valid DaemonSet.
func newDS(name string) *appsv1.DaemonSet {
	lbls := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: lbls},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbls},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
			},
		},
	}
}

// newPod is a valid pod, bound to node when node is not empty.
func newPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "p"}},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}},
		},
	}
}

func (e *env) createDS(ds *appsv1.DaemonSet) *appsv1.DaemonSet {
	e.t.Helper()
	var out appsv1.DaemonSet
	e.do(req{method: "POST", path: dsPath, body: toJSON(e.t, ds)}).must(e.t, http.StatusCreated, &out)
	return &out
}

func (e *env) createPod(p *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	var out corev1.Pod
	e.do(req{method: "POST", path: podsPath, body: toJSON(e.t, p)}).must(e.t, http.StatusCreated, &out)
	return &out
}

func intOrStr(s string) *intstr.IntOrString {
	v := intstr.Parse(s)
	return &v
}

// wireEvent is a decoded watch event.
type wireEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// eventMeta is what the tests read from an event's object.
type eventMeta struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Code       int               `json:"code"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
}

func (w wireEvent) meta(t testing.TB) eventMeta {
	t.Helper()
	var m eventMeta
	if err := json.Unmarshal(w.Object, &m); err != nil {
		t.Fatalf("decode event object %s: %v", w.Object, err)
	}
	return m
}

// stream is an open HTTP watch.
type stream struct {
	t      testing.TB
	res    *http.Response
	events chan wireEvent
	done   chan struct{} // closed when the server ends the stream
}

func (e *env) watch(path string) *stream {
	e.t.Helper()
	return openStream(e.t, e.srv.Client(), e.srv.URL+path)
}

func openStream(t testing.TB, c *http.Client, url string) *stream {
	t.Helper()
	hr, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := c.Do(hr)
	if err != nil {
		t.Fatalf("watch %s: %v", url, err)
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Fatalf("watch %s: code %d: %s", url, res.StatusCode, b)
	}
	s := &stream{t: t, res: res, events: make(chan wireEvent, 100), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			var ev wireEvent
			if err := json.Unmarshal(line, &ev); err != nil {
				t.Errorf("bad watch line %q: %v", line, err)
				return
			}
			s.events <- ev
		}
	}()
	t.Cleanup(func() { res.Body.Close() })
	return s
}

// next returns the next event, failing after a deadline.
func (s *stream) next() wireEvent {
	s.t.Helper()
	select {
	case ev := <-s.events:
		return ev
	case <-s.done:
		select {
		case ev := <-s.events:
			return ev
		default:
		}
		s.t.Fatal("watch stream ended, want an event")
	case <-time.After(10 * time.Second):
		s.t.Fatal("no watch event within 10s")
	}
	return wireEvent{}
}

// waitEnd waits for the server to end the stream.
func (s *stream) waitEnd(within time.Duration) {
	s.t.Helper()
	select {
	case <-s.done:
	case <-time.After(within):
		s.t.Fatalf("watch stream still open after %s", within)
	}
}
