package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestRequestRetriesLostDryRun: when the connection goes away under a
// request that changes nothing (here the server resets its HTTP/2 stream,
// as a connection closed for an unanswered ping does), the page sends it
// once more and shows the answer — the 403 — instead of "Failed to fetch";
// a request that changes something is not sent twice.
func TestRequestRetriesLostDryRun(t *testing.T) {
	path := browserPath(t)
	var mu sync.Mutex
	seen := map[string]int{}
	api := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		seen[req.URL.RawQuery]++
		n := seen[req.URL.RawQuery]
		mu.Unlock()
		if n == 1 {
			panic(http.ErrAbortHandler) // RST_STREAM: no answer
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden","code":403}`))
	})
	h, err := New(Config{API: api, Authenticate: func(*http.Request, string) (string, bool) { return "viewer", true }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("ignore-certificate-errors", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/ui/")); err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(ctx, time.Minute)
	defer tcancel()
	const expr = `import('/ui/api.js').then(async (api) => {
		await api.login('t');
		const out = [];
		for (const q of ['dryRun=All', 'fieldManager=x']) {
			try { await api.request('PATCH', '/api/v1/nodes/n?' + q, { spec: {} }); out.push('ok'); } catch (e) { out.push(e.message); }
		}
		return out.join(' | ');
	})`
	res, err := chromedp.Run(tctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(res, " | ")
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "403") {
		t.Fatalf("the dry run after a lost connection: %q, want its 403", res)
	}
	if strings.HasPrefix(parts[1], "403") {
		t.Errorf("the write after a lost connection was sent again: %q", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["dryRun=All"] != 2 || seen["fieldManager=x"] != 1 {
		t.Errorf("requests: %v, want the dry run twice and the write once", seen)
	}
}
