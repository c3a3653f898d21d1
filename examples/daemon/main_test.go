package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRun serves the version, logs with the node name and stops with ctx.
func TestRun(t *testing.T) {
	t.Setenv("NODE_NAME", "n7")
	ctx, cancel := context.WithCancel(t.Context())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-version", "v9", "-listen", "127.0.0.1:0", "-every", "10ms"}, out) }()

	addr := regexp.MustCompile(`listen=(\S+)`)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "msg=alive") || !addr.MatchString(out.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("log %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	base := "http://" + addr.FindStringSubmatch(out.String())[1]
	for path, want := range map[string]string{"/version": "v9\n", "/healthz": "ok\n"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != want {
			t.Errorf("GET %s = %q, want %q", path, body, want)
		}
	}
	if !strings.Contains(out.String(), "node=n7 version=v9") {
		t.Errorf("log lacks node and version: %q", out.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop")
	}
}
