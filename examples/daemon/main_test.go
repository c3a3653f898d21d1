package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/everynode/everynode/internal/testkit"
)

// TestRun serves the version, logs with the node name and stops with ctx.
func TestRun(t *testing.T) {
	t.Setenv("NODE_NAME", "n7")
	ctx, cancel := context.WithCancel(t.Context())
	out := &testkit.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-version", "v9", "-listen", "127.0.0.1:0", "-every", "10ms"}, out) }()

	addr := regexp.MustCompile(`listen=(\S+)`)
	testkit.Eventually(t, 5*time.Second, func() error {
		if !out.Contains("msg=alive") || !addr.MatchString(out.String()) {
			return fmt.Errorf("no alive line and address yet; log %q", out.String())
		}
		return nil
	})
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
