package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// fakeFleetAPI is a test stand-in for the API server: it lists a generated
// fleet of nodes × DaemonSets (one pod each, a few on an old revision or
// crash-looping) and holds watches open without events. It checks the
// bearer token the dashboard puts on every request.
type fakeFleetAPI struct {
	nodes, pods, dss []byte
}

const fakeToken = "bench-token"

func newFakeFleetAPI(nodes, daemonSets int) *fakeFleetAPI {
	list := func(kind string, items []any) []byte {
		b, _ := json.Marshal(map[string]any{"kind": kind, "apiVersion": "v1", "metadata": map[string]any{"resourceVersion": "1"}, "items": items})
		return b
	}
	ready := []any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}}
	var ns, ds, ps []any
	for i := range nodes {
		ns = append(ns, map[string]any{"metadata": map[string]any{"name": fmt.Sprintf("node-%04d", i),
			"labels": map[string]any{"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%4)}},
			"spec": map[string]any{}, "status": map[string]any{"conditions": ready}})
	}
	for d := range daemonSets {
		uid := fmt.Sprintf("uid-%d", d)
		ds = append(ds, map[string]any{"metadata": map[string]any{"name": fmt.Sprintf("daemon-%02d", d), "namespace": "default", "uid": uid,
			"generation": 2, "annotations": map[string]any{"deprecated.daemonset.template.generation": "2"}},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x"}}}},
				"updateStrategy": map[string]any{"type": "RollingUpdate"}},
			"status": map[string]any{"desiredNumberScheduled": nodes}})
		for i := range nodes {
			gen := "2"
			if i%7 == d%7 {
				gen = "1" // an old revision
			}
			st := map[string]any{"phase": "Running", "conditions": ready}
			if i%97 == d {
				st["containerStatuses"] = []any{map[string]any{"name": "c", "restartCount": 4,
					"state": map[string]any{"waiting": map[string]any{"reason": "CrashLoopBackOff"}}}}
			}
			ps = append(ps, map[string]any{"metadata": map[string]any{"name": fmt.Sprintf("daemon-%02d-%04d", d, i), "namespace": "default",
				"labels":          map[string]any{"pod-template-generation": gen},
				"ownerReferences": []any{map[string]any{"kind": "DaemonSet", "uid": uid, "controller": true, "name": fmt.Sprintf("daemon-%02d", d)}}},
				"spec": map[string]any{"nodeName": fmt.Sprintf("node-%04d", i)}, "status": st})
		}
	}
	return &fakeFleetAPI{nodes: list("NodeList", ns), dss: list("DaemonSetList", ds), pods: list("PodList", ps)}
}

func (f *fakeFleetAPI) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Header.Get("Authorization") != "Bearer "+fakeToken {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if req.URL.Query().Get("watch") != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-req.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch req.URL.Path {
	case "/api/v1/nodes":
		w.Write(f.nodes)
	case "/api/v1/pods":
		w.Write(f.pods)
	case "/apis/apps/v1/daemonsets":
		w.Write(f.dss)
	default:
		http.NotFound(w, req)
	}
}

// browserPath finds headless Chromium, or skips the benchmark.
func browserPath(tb testing.TB) string {
	for _, name := range []string{"chromium-headless-shell", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("EVERYNODE_REQUIRE_BROWSER") != "" {
		tb.Fatal("EVERYNODE_REQUIRE_BROWSER is set but no headless Chromium is installed: apt-get install chromium-headless-shell")
	}
	tb.Skip("SKIPPING: no headless Chromium (apt-get install chromium-headless-shell)")
	return ""
}

// BenchmarkDashboardLoad: from a page load with a session to the whole
// grid of 1,000 nodes × 10 DaemonSets computed and drawn (lists fetched
// and parsed, every cell's state computed, the rows in view rendered) in
// headless Chromium; docs/benchmarks.md reports it. ms/op is the time a
// user waits.
func BenchmarkDashboardLoad(b *testing.B) {
	for _, size := range []struct{ nodes, dss int }{{1000, 10}, {10000, 10}} {
		b.Run(fmt.Sprintf("nodes=%d/daemonsets=%d", size.nodes, size.dss), func(b *testing.B) {
			benchmarkLoad(b, size.nodes, size.dss)
		})
	}
}

func benchmarkLoad(b *testing.B, nodes, dss int) {
	h, err := New(Config{API: newFakeFleetAPI(nodes, dss), Authenticate: func(_ *http.Request, tok string) (string, bool) {
		return "bench", tok == fakeToken
	}})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewTLSServer(h)
	defer srv.Close()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browserPath(b)), chromedp.NoSandbox,
		chromedp.Flag("ignore-certificate-errors", true), chromedp.WindowSize(1280, 800))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/ui/")); err != nil {
		b.Fatal(err)
	}
	do := func(actions ...chromedp.Action[chromedp.Void]) {
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer tcancel()
		if err := chromedp.Do(tctx, actions...); err != nil {
			b.Fatal(err)
		}
	}
	do(chromedp.WaitVisible(chromedp.ID("token")), chromedp.SetValue(chromedp.ID("token"), fakeToken),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)))
	want := fmt.Sprintf("%d nodes × %d DaemonSets", nodes, dss)
	grid := fmt.Sprintf(`document.getElementById('counts').textContent.startsWith(%q) && document.querySelectorAll('.cell[data-r]').length > 0`, want)
	poll := func() {
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer tcancel()
		if _, err := chromedp.Run(tctx, chromedp.Poll[bool](grid, chromedp.WithPollingInterval(5*time.Millisecond))); err != nil {
			b.Fatal(err)
		}
	}
	poll()
	b.ResetTimer()
	for b.Loop() {
		do(chromedp.Reload())
		poll()
	}
	b.StopTimer()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('.cell[data-r]').length`))
	if err != nil {
		b.Fatal(err)
	}
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('counts').textContent`))
	b.ReportMetric(float64(n), "cells-in-DOM")
	if !strings.HasPrefix(text, want) {
		b.Fatalf("counts %q", text)
	}
}
