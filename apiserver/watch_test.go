package apiserver

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// TestWatchFromZero: resourceVersion 0 (and absent) starts with synthetic
// ADDED events, then streams changes; framing is one JSON event per line.
func TestWatchFromZero(t *testing.T) {
	e := newEnv(t)
	e.createDS(newDS("a"))
	e.createDS(newDS("b"))

	for _, q := range []string{"?watch=true&resourceVersion=0", "?watch=1"} {
		w := e.watch(dsPath + q)
		if ct := w.res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		for _, name := range []string{"a", "b"} {
			ev := w.next()
			m := ev.meta(t)
			if ev.Type != "ADDED" || m.Metadata.Name != name || m.Kind != "DaemonSet" || m.APIVersion != "apps/v1" {
				t.Fatalf("%s: event %s %s %s/%s, want ADDED apps/v1 DaemonSet %s", q, ev.Type, m.Metadata.Name, m.APIVersion, m.Kind, name)
			}
		}
	}
	w := e.watch(dsPath + "?watch=true")
	w.next()
	w.next()
	e.do(req{method: "PATCH", path: dsPath + "/a", contentType: "application/merge-patch+json",
		body: `{"metadata":{"labels":{"x":"y"}}}`}).must(t, http.StatusOK, nil)
	if ev := w.next(); ev.Type != "MODIFIED" || ev.meta(t).Metadata.Labels["x"] != "y" {
		t.Fatalf("want MODIFIED with the label, got %s %s", ev.Type, ev.Object)
	}
	e.do(req{method: "DELETE", path: dsPath + "/b"}).must(t, http.StatusOK, nil)
	if ev := w.next(); ev.Type != "DELETED" || ev.meta(t).Metadata.Name != "b" {
		t.Fatalf("want DELETED b, got %s %s", ev.Type, ev.Object)
	}
}

// TestWatchFromListRV: a watch from a list's resourceVersion sees only later
// changes, as kubectl get -w does.
func TestWatchFromListRV(t *testing.T) {
	e := newEnv(t)
	e.createDS(newDS("a"))
	var list appsv1.DaemonSetList
	e.get(dsPath).must(t, http.StatusOK, &list)
	e.createDS(newDS("b"))
	w := e.watch(dsPath + "?watch=true&allowWatchBookmarks=true&resourceVersion=" + list.ResourceVersion)
	if ev := w.next(); ev.Type != "ADDED" || ev.meta(t).Metadata.Name != "b" {
		t.Fatalf("want ADDED b only, got %s %s", ev.Type, ev.Object)
	}
	// All-namespaces watch path.
	w2 := e.watch("/apis/apps/v1/daemonsets?watch=true&resourceVersion=" + list.ResourceVersion)
	if ev := w2.next(); ev.meta(t).Metadata.Name != "b" {
		t.Fatalf("all-namespaces watch: %s", ev.Object)
	}
}

// TestWatchFieldSelector: an agent's "pods on my node" watch.
func TestWatchFieldSelector(t *testing.T) {
	e := newEnv(t)
	e.createPod(newPod("on-n1", "n1"))
	e.createPod(newPod("on-n2", "n2"))
	w := e.watch(podsPath + "?watch=true&fieldSelector=spec.nodeName%3Dn1,status.phase!%3DFailed")
	if ev := w.next(); ev.Type != "ADDED" || ev.meta(t).Metadata.Name != "on-n1" {
		t.Fatalf("got %s %s", ev.Type, ev.Object)
	}
	e.createPod(newPod("later-n2", "n2"))
	e.createPod(newPod("later-n1", "n1"))
	if ev := w.next(); ev.Type != "ADDED" || ev.meta(t).Metadata.Name != "later-n1" {
		t.Fatalf("got %s %s", ev.Type, ev.Object)
	}
	// Across all namespaces, with the terms in another order.
	w2 := e.watch("/api/v1/pods?watch=true&fieldSelector=status.phase!%3DSucceeded,spec.nodeName%3D%3Dn2")
	names := map[string]bool{w2.next().meta(t).Metadata.Name: true, w2.next().meta(t).Metadata.Name: true}
	if !names["on-n2"] || !names["later-n2"] {
		t.Fatalf("all-namespaces n2 watch saw %v", names)
	}
}

// TestWatchTimeout: the stream ends after timeoutSeconds.
func TestWatchTimeout(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	w := e.watch(dsPath + "?watch=true&timeoutSeconds=1")
	w.waitEnd(10 * time.Second)
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("stream ended after %s, before its timeout", d)
	}
}

// TestWatchEndsOnShutdown: Run's context ending closes open watches and Run
// returns promptly.
func TestWatchEndsOnShutdown(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A second server on the same store, run for real.
	s, err := New(Config{Store: e.st, Authenticator: tokens{adminToken: {Name: "admin", Groups: []string{mastersGroup}}}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx, ln, nil) }()

	w := openStream(t, &http.Client{}, "http://"+ln.Addr().String()+podsPath+"?watch=true")
	e.createPod(newPod("p", ""))
	if ev := w.next(); ev.Type != "ADDED" {
		t.Fatalf("got %s", ev.Type)
	}
	cancel()
	w.waitEnd(5 * time.Second)
	select {
	case err := <-runErr:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestWatchSendInitialEvents: the watch-list protocol client-go may use.
func TestWatchSendInitialEvents(t *testing.T) {
	e := newEnv(t)
	e.createPod(newPod("p1", ""))
	w := e.watch(podsPath + "?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan")
	if ev := w.next(); ev.Type != "ADDED" || ev.meta(t).Metadata.Name != "p1" {
		t.Fatalf("got %s %s", ev.Type, ev.Object)
	}
	ev := w.next()
	if m := ev.meta(t); ev.Type != "BOOKMARK" || m.Metadata.Annotations[initialEventsEndAnnotation] != "true" || m.Metadata.ResourceVersion == "" {
		t.Fatalf("want the initial-events-end bookmark, got %s %s", ev.Type, ev.Object)
	}
	e.createPod(newPod("p2", ""))
	if ev := w.next(); ev.Type != "ADDED" || ev.meta(t).Metadata.Name != "p2" {
		t.Fatalf("got %s %s", ev.Type, ev.Object)
	}
}

// TestWatchGone: a resourceVersion the store cannot serve ends the stream
// with an ERROR event carrying a 410 Status, as Kubernetes does.
func TestWatchGone(t *testing.T) {
	e := newEnv(t)
	w := e.watch(podsPath + "?watch=true&resourceVersion=999999999")
	ev := w.next()
	if m := ev.meta(t); ev.Type != "ERROR" || m.Kind != "Status" || m.APIVersion != "v1" || m.Code != http.StatusGone {
		t.Fatalf("want ERROR with a 410 Status, got %s %s", ev.Type, ev.Object)
	}
	w.waitEnd(5 * time.Second)
}

// TestRunTLS: Run serves over TLS (HTTP/2 when negotiated) and streams watches.
func TestRunTLS(t *testing.T) {
	e := newEnv(t)
	certSrv := httptest.NewTLSServer(http.NotFoundHandler()) // borrowed certificate and trusting client
	defer certSrv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Store: e.st, Authenticator: tokens{adminToken: {Name: "admin"}}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx, ln, &tls.Config{Certificates: certSrv.TLS.Certificates}) }()
	defer func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	e.createPod(newPod("p", ""))
	tr := certSrv.Client().Transport.(*http.Transport).Clone()
	tr.ForceAttemptHTTP2 = true
	hc := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	w := openStream(t, hc, "https://"+ln.Addr().String()+podsPath+"?watch=true")
	if ev := w.next(); ev.Type != "ADDED" {
		t.Fatalf("got %s", ev.Type)
	}
	if w.res.ProtoMajor != 2 {
		t.Errorf("protocol %s, want HTTP/2", w.res.Proto)
	}
	e.createPod(newPod("p2", ""))
	if ev := w.next(); ev.Type != "ADDED" || ev.meta(t).Metadata.Name != "p2" {
		t.Fatalf("got %s %s", ev.Type, ev.Object)
	}
}
