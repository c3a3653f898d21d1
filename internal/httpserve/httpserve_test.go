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
