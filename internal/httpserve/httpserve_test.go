package httpserve

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServeStopsLongRequests: a request that runs until stopping is called
// (a watch) does not hold the shutdown up; Serve returns nil.
func TestServeStopsLongRequests(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	started := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(started)
		<-stop
	})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, srv, ln, nil, 10*time.Second, func() { close(stop) }) }()
	resp, err := http.Get("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-started
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return: stopping was not called before the shutdown waited")
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Logf("body after shutdown: %v", err)
	}
}

// TestServeReportsServeFailure: a listener that fails makes Serve return a
// "serve ADDR" error and still call stopping.
func TestServeReportsServeFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	stopped := false
	err = Serve(context.Background(), &http.Server{}, ln, nil, time.Second, func() { stopped = true })
	if err == nil || !strings.HasPrefix(err.Error(), "serve 127.0.0.1:") {
		t.Fatalf("Serve = %v, want a serve error", err)
	}
	if !stopped {
		t.Error("stopping was not called")
	}
}

// TestNewServerLimits: NewServer applies the limits, sets no server-wide
// read or write timeout, and the defaults bound headers to 10 s.
func TestNewServerLimits(t *testing.T) {
	l := DefaultLimits()
	if l.ReadHeader <= 0 || l.ReadHeader > 10*time.Second || l.Idle <= 0 || l.MaxHeaderBytes <= 0 {
		t.Fatalf("DefaultLimits %+v", l)
	}
	srv := NewServer(http.NotFoundHandler(), l, nil)
	if srv.ReadHeaderTimeout != l.ReadHeader || srv.IdleTimeout != l.Idle || srv.MaxHeaderBytes != l.MaxHeaderBytes {
		t.Errorf("server %+v, limits %+v", srv, l)
	}
	if srv.ReadTimeout != 0 || srv.WriteTimeout != 0 {
		t.Errorf("ReadTimeout %s, WriteTimeout %s, want none", srv.ReadTimeout, srv.WriteTimeout)
	}
}

// TestSlowlorisCut: a client that never finishes its headers is cut at the
// header deadline; one idle between requests at the idle deadline.
func TestSlowlorisCut(t *testing.T) {
	const d = 200 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), Limits{ReadHeader: d, Idle: d, MaxHeaderBytes: 4096}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, srv, ln, nil, time.Second, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	for _, first := range []string{"GET / HTTP/1.1\r\nHost: x\r\n", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_ = c.SetReadDeadline(start.Add(5 * time.Second))
		if _, err := io.WriteString(c, first); err != nil {
			t.Fatal(err)
		}
		// Read the answer to a complete request, then wait: the server
		// closes either connection (EOF), not the 5 s read deadline.
		_, err = io.Copy(io.Discard, c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%q: connection open after 5 s", first)
		}
		if el := time.Since(start); el < d/2 {
			t.Errorf("%q: closed after %s, before the deadline", first, el)
		}
		c.Close()
	}
}
