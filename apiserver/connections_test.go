package apiserver

// Attacks on the connection hardening (docs/security.md §1): each
// test speaks to a server started with Run, most of them in raw HTTP/1.1 so
// that they control what is sent and when.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/everynode/everynode/internal/ctxtime"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// live is an env whose server also runs for real (Run) on a loopback
// listener, without TLS.
type live struct {
	*env
	addr string
}

// newLive starts an env's server with Run after tune adjusted it.
func newLive(t *testing.T, tune func(*Server), mods ...func(*Config)) *live {
	t.Helper()
	e := newEnv(t, mods...)
	if tune != nil {
		tune(e.s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.s.Run(ctx, ln, nil) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("Run did not return")
		}
	})
	return &live{env: e, addr: ln.Addr().String()}
}

// dial opens a raw connection to the live server.
func (l *live) dial(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// readAnswer reads one response within d and its body.
func readAnswer(t *testing.T, c net.Conn, br *bufio.Reader, d time.Duration) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within %s: %v", d, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("answer body: %v", err)
	}
	return resp, string(b)
}

// waitConnClosed fails unless the server closes c within d (EOF or a reset).
func waitConnClosed(t *testing.T, c net.Conn, br *bufio.Reader, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := io.Copy(io.Discard, br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %s (%d more bytes read)", d, n)
	}
	if n > 0 {
		t.Errorf("%d unexpected bytes before the close", n)
	}
}

// TestConnectionLimits: the servers Run makes have a header deadline of at
// most 10 s, an idle deadline, bounded headers, and no server-wide read or
// write timeout, which would cut watches and log follows.
func TestConnectionLimits(t *testing.T) {
	e := newEnv(t)
	srv := e.s.httpServer()
	if srv.ReadHeaderTimeout <= 0 || srv.ReadHeaderTimeout > 10*time.Second {
		t.Errorf("ReadHeaderTimeout %s, want (0, 10s]", srv.ReadHeaderTimeout)
	}
	if srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 || srv.MaxHeaderBytes > 1<<20 {
		t.Errorf("IdleTimeout %s, MaxHeaderBytes %d", srv.IdleTimeout, srv.MaxHeaderBytes)
	}
	if srv.ReadTimeout != 0 || srv.WriteTimeout != 0 {
		t.Errorf("ReadTimeout %s, WriteTimeout %s: would cut watches", srv.ReadTimeout, srv.WriteTimeout)
	}
	if e.s.requestTimeout != DefaultRequestTimeout || joinBodyTimeout > 10*time.Second || e.s.joinTimeout != joinBodyTimeout {
		t.Errorf("request timeout %s, join body timeout %s", e.s.requestTimeout, e.s.joinTimeout)
	}
}

// TestSlowlorisHeaders: a client that sends its headers a line at a time,
// never finishing them, is cut at the header deadline.
func TestSlowlorisHeaders(t *testing.T) {
	const deadline = 300 * time.Millisecond
	l := newLive(t, func(s *Server) { s.limits.ReadHeader = deadline })
	c, br := l.dial(t)
	closed := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := io.Copy(io.Discard, br)
		closed <- err
	}()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-closed:
			if el := time.Since(start); el < deadline/2 {
				t.Fatalf("closed after %s, before the deadline", el)
			}
			return
		case <-tick.C:
			if time.Since(start) > 10*time.Second {
				t.Fatal("a slowloris client kept its connection for 10 s")
			}
			// A write error is the server's close: the reader sees it too.
			_, _ = fmt.Fprintf(c, "X-Slow-%d: 1\r\n", i)
		}
	}
}

// TestAnonymousHugeBody: an anonymous 100 MB POST is answered 401 (not 413)
// as soon as its headers are in, without a byte of its body, and the
// connection is closed. The same for the join endpoint, whose body is its
// credential; an authenticated one is refused 413 unread.
func TestAnonymousHugeBody(t *testing.T) {
	l := newLive(t, nil, func(c *Config) { c.Join = &JoinConfig{Secrets: joinSecrets{}} })
	for _, tc := range []struct {
		name, path, auth string
		code             int
	}{
		{"no token", "/api/v1/namespaces/default/pods", "", 401},
		{"wrong token", "/api/v1/namespaces/default/pods", "Authorization: Bearer nope\r\n", 401},
		{"join", JoinPath, "", 401},
		{"admin", "/api/v1/namespaces/default/pods", "Authorization: Bearer " + adminToken + "\r\n", 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := l.dial(t)
			start := time.Now()
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n",
				tc.path, tc.auth, 100<<20)
			resp, body := readAnswer(t, c, br, 5*time.Second)
			if resp.StatusCode != tc.code {
				t.Fatalf("code %d, want %d: %s", resp.StatusCode, tc.code, body)
			}
			if !resp.Close {
				t.Error("no Connection: close")
			}
			waitConnClosed(t, c, br, 5*time.Second)
			t.Logf("answered and closed in %s, no body sent", time.Since(start))
		})
	}
}

// TestAnonymousSlowBody: an anonymous request whose body trickles in is
// answered 401 without waiting for it and its connection closed within
// seconds; a join's body (read, since it holds the join secret) is cut at
// the join deadline.
func TestAnonymousSlowBody(t *testing.T) {
	const joinDeadline = 300 * time.Millisecond
	l := newLive(t, func(s *Server) { s.joinTimeout = joinDeadline },
		func(c *Config) { c.Join = &JoinConfig{Secrets: joinSecrets{}} })
	for _, tc := range []struct {
		name, path string
		minWait    time.Duration
	}{
		{"api", "/api/v1/namespaces/default/pods", 0},
		{"join", JoinPath, joinDeadline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := l.dial(t)
			start := time.Now()
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n", tc.path)
			// Trickle a byte every 50 ms until the server closes.
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
						if _, err := io.WriteString(c, "1\r\n \r\n"); err != nil {
							return
						}
					}
				}
			}()
			defer wg.Wait()
			defer cancel()
			resp, body := readAnswer(t, c, br, 8*time.Second)
			answered := time.Since(start)
			if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
				t.Fatalf("code %d, Connection: close %v: %s", resp.StatusCode, resp.Close, body)
			}
			if answered < tc.minWait {
				t.Errorf("answered after %s, before the join deadline %s", answered, tc.minWait)
			}
			waitConnClosed(t, c, br, 5*time.Second)
			t.Logf("answered in %s, closed in %s", answered, time.Since(start))
		})
	}
}

// Test401ClosesConnection: after a 401 the server takes no further request
// on the connection; an authenticated client keeps its connection.
func Test401ClosesConnection(t *testing.T) {
	l := newLive(t, nil)
	for _, auth := range []string{"", "Authorization: Bearer nope\r\n"} {
		c, br := l.dial(t)
		fmt.Fprintf(c, "GET /api HTTP/1.1\r\nHost: x\r\n%s\r\n", auth)
		resp, _ := readAnswer(t, c, br, 5*time.Second)
		if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
			t.Fatalf("%q: code %d, Connection: close %v", auth, resp.StatusCode, resp.Close)
		}
		// A second request on the connection is not answered.
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		waitConnClosed(t, c, br, 5*time.Second)
	}
	c, br := l.dial(t)
	for range 2 {
		fmt.Fprintf(c, "GET /api HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", adminToken)
		if resp, body := readAnswer(t, c, br, 5*time.Second); resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("admin: code %d, close %v: %s", resp.StatusCode, resp.Close, body)
		}
	}
}

// TestFailedAuthSlowed: wrong tokens from one source are answered at once
// up to the throttle's burst, then slowed (still 401); a valid token from
// the same source is never delayed, even while wrong ones wait. Wrong join
// secrets count as failures too.
func TestFailedAuthSlowed(t *testing.T) {
	// Two failures at once, then one every 1.5 s.
	const every = 1500 * time.Millisecond
	var mu sync.Mutex
	var delays []time.Duration
	l := newLive(t, func(s *Server) {
		s.throttle.burst, s.throttle.every, s.throttle.maxDelay = 2, every, 5*time.Second
		s.throttle.sleep = func(ctx context.Context, d time.Duration) bool {
			mu.Lock()
			delays = append(delays, d)
			mu.Unlock()
			return ctxtime.Sleep(ctx, d)
		}
	}, func(c *Config) { c.Join = &JoinConfig{Secrets: joinSecrets{}} })
	recorded := func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Duration(nil), delays...)
	}
	hc := &http.Client{Timeout: 20 * time.Second}
	get := func(token string) (int, time.Duration) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+l.addr+"/api", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			t.Error(err)
			return 0, 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	for i := range 2 {
		if code, _ := get("wrong"); code != http.StatusUnauthorized {
			t.Fatalf("failure %d: code %d", i+1, code)
		}
	}
	if d := recorded(); len(d) != 0 {
		t.Fatalf("the burst was delayed: %v", d)
	}
	code, took := get("wrong")
	if code != http.StatusUnauthorized || took < every*9/10 {
		t.Fatalf("third failure: code %d after %s, want 401 after about %s", code, took, every)
	}
	// A fourth failure waits its turn too; a valid token meanwhile answers
	// at once.
	slow := make(chan time.Duration, 1)
	go func() {
		code, took := get("wrong")
		if code != http.StatusUnauthorized {
			t.Errorf("fourth failure: code %d", code)
		}
		slow <- took
	}()
	testkit.EventuallyTrue(t, 5*time.Second, "fourth failure waiting", func() bool { return len(recorded()) == 2 })
	for range 3 {
		if code, took := get(adminToken); code != http.StatusOK {
			t.Fatalf("valid token: code %d after %s", code, took)
		}
	}
	select {
	case took := <-slow:
		t.Fatalf("the fourth failure finished (after %s) before the valid requests", took)
	default:
	}
	if took := <-slow; took < every*9/10 {
		t.Errorf("fourth failure answered after %s, want about %s", took, every)
	}
	if d := recorded(); len(d) != 2 {
		t.Errorf("delays %v: a valid request was delayed", d)
	}
	// A wrong join secret from the same source is slowed as well.
	r := l.do(req{method: "POST", path: JoinPath, token: "-", body: `{"nodeName":"n","joinSecret":"guess"}`})
	if r.code != http.StatusUnauthorized {
		t.Fatalf("join: code %d", r.code)
	}
	if d := recorded(); len(d) != 3 || d[2] <= 0 {
		t.Errorf("delays %v: the wrong join secret was not slowed", d)
	}
}

// TestAnonymousErrorsNameNoPath: what an unauthenticated caller reads names
// no file or directory of the server: the join refusal, a failing readyz.
func TestAnonymousErrorsNameNoPath(t *testing.T) {
	const dataDir = "/var/lib/everynode-secret-place"
	e := newEnv(t, func(c *Config) { c.Join = &JoinConfig{Secrets: joinSecrets{}, DataDir: dataDir} })
	for _, body := range []string{`{"nodeName":"n","joinSecret":"nope"}`, `{"nodeName":"n"}`, ``, strings.Repeat(" ", maxJoinBody+1)} {
		r := e.do(req{method: "POST", path: JoinPath, token: "-", body: body})
		if r.code != http.StatusUnauthorized {
			t.Fatalf("join %.20q: code %d", body, r.code)
		}
		if strings.Contains(string(r.body), "/") || strings.Contains(string(r.body), "secret-place") {
			t.Errorf("join refusal names a path: %s", r.body)
		}
	}
	// readyz with the store gone: the reason is withheld.
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	r := e.do(req{method: "GET", path: "/readyz", token: "-"})
	if r.code != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "reason withheld") {
		t.Fatalf("readyz: %d %s", r.code, r.body)
	}
	if strings.Contains(string(r.body), "/") || strings.Contains(string(r.body), os.TempDir()) {
		t.Errorf("readyz names a path: %s", r.body)
	}
}

// anonymousRoutes is every route the server has, and some it has not, as
// method and path. The dashboard's /ui/ shell is open (TestAnonymousRouteTable
// checks it above) and its session API refuses on its own (TestDashboardAuth).
func anonymousRoutes() [][2]string {
	paths := []string{
		"/", "/metrics", "/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1",
		"/openapi/v2", "/openapi/v3", "/openapi/v3/api/v1", "/openapi/v3/apis/apps/v1",
		"/debug/pprof/", "/logs", "/healthz/ping", "/livez/etcd", "/readyz/etcd", "/version/",
		"/api/v1/namespaces/default/pods/p/log", "/api/v1/watch/pods", "/api/v1/pods?watch=true",
		JoinPath,
	}
	for _, r := range resources.All() {
		prefix := groupVersionPath(r.GroupVersion())
		coll := prefix + "/" + r.Name
		if r.Namespaced {
			paths = append(paths, coll)
			coll = prefix + "/namespaces/default/" + r.Name
		}
		paths = append(paths, coll, coll+"?watch=true", coll+"/x", coll+"/x/status")
	}
	var out [][2]string
	for _, p := range paths {
		for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
			if p == JoinPath && m == "POST" {
				continue // the join's own credential is its body (TestJoin)
			}
			out = append(out, [2]string{m, p})
		}
	}
	for _, p := range []string{"/healthz", "/livez", "/readyz", "/version"} {
		for _, m := range []string{"POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
			out = append(out, [2]string{m, p})
		}
	}
	return out
}

// TestAnonymousRouteTable: anonymous callers get /healthz, /livez, /readyz
// and /version, as kube-apiserver's default RBAC allows, and a 401 that
// closes the connection from every other route and method, whether it
// exists or not; with a token, the same routes are not 401.
func TestAnonymousRouteTable(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Join = &JoinConfig{Secrets: joinSecrets{}} })
	for _, p := range []string{"/healthz", "/livez", "/readyz", "/version"} {
		for _, m := range []string{"GET", "HEAD"} {
			if r := e.do(req{method: m, path: p, token: "-"}); r.code != http.StatusOK {
				t.Errorf("anonymous %s %s: %d %s", m, p, r.code, r.body)
			}
			// A wrong token is refused there too, as kube-apiserver does.
			if r := e.do(req{method: m, path: p, token: "not-a-token"}); r.code != http.StatusUnauthorized {
				t.Errorf("%s %s with a wrong token: %d, want 401", m, p, r.code)
			}
		}
	}
	// The dashboard's shell and assets are open and hold no cluster data;
	// its API, login aside, needs a session (TestDashboardAuth).
	for _, p := range []string{"/ui/", "/ui/index.html", "/ui/app.js"} {
		for _, m := range []string{"GET", "HEAD"} {
			if r := e.do(req{method: m, path: p, token: "-"}); r.code != http.StatusOK {
				t.Errorf("anonymous %s %s: %d %s", m, p, r.code, r.body)
			}
		}
	}
	for _, mp := range [][2]string{{"GET", "/ui/api/api/v1/pods"}, {"POST", "/ui/api/api/v1/namespaces/default/pods"},
		{"GET", "/ui/session"}, {"DELETE", "/ui/api/api/v1/nodes/n1"}, {"POST", "/ui/login"}} {
		if r := e.do(req{method: mp[0], path: mp[1], token: "-", body: "{}"}); r.code < 400 {
			t.Errorf("anonymous %s %s: %d, want a refusal", mp[0], mp[1], r.code)
		}
	}
	for _, mp := range anonymousRoutes() {
		r := e.do(req{method: mp[0], path: mp[1], token: "-", body: "{}"})
		if r.code != http.StatusUnauthorized {
			t.Errorf("anonymous %s %s: %d, want 401", mp[0], mp[1], r.code)
			continue
		}
		if !r.close {
			t.Errorf("anonymous %s %s: no Connection: close", mp[0], mp[1])
		}
		if strings.Contains(mp[1], "watch") {
			continue // an admin's watch would stream until the test ends
		}
		if a := e.do(req{method: mp[0], path: mp[1], body: "{}"}); a.code == http.StatusUnauthorized {
			t.Errorf("admin %s %s: 401", mp[0], mp[1])
		}
	}
}

// TestRequestDeadline: a request that is not long-running ends at its
// deadline — its context (504) and the reading of its body — while a watch
// outlives it.
func TestRequestDeadline(t *testing.T) {
	const timeout = 500 * time.Millisecond
	l := newLive(t, func(s *Server) { s.requestTimeout = timeout })

	// The context: ?timeout shortens the deadline to nothing, and the
	// handler answers 504; a malformed one is a 400.
	const nss = "/api/v1/namespaces"
	ns := `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"late"}}`
	if r := l.do(req{method: "POST", path: nss + "?timeout=1ns", contentType: "application/json", body: ns}); r.code != http.StatusGatewayTimeout {
		t.Errorf("create with timeout=1ns: %d %s", r.code, r.body)
	}
	// The deadline had passed before the write: the store never sent it.
	if r := l.get(nss + "/late"); r.code != http.StatusNotFound {
		t.Errorf("the timed-out create happened: %d %s", r.code, r.body)
	}
	if r := l.get(podsPath + "?timeout=soon"); r.code != http.StatusBadRequest {
		t.Errorf("list with timeout=soon: %d %s", r.code, r.body)
	}
	if r := l.get(podsPath + "?timeout=30s"); r.code != http.StatusOK {
		t.Errorf("list with timeout=30s: %d %s", r.code, r.body)
	}

	// The body: an authenticated body that stalls is cut at the deadline.
	c, br := l.dial(t)
	start := time.Now()
	fmt.Fprintf(c, "POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", adminToken)
	resp, body := readAnswer(t, c, br, 10*time.Second)
	if took := time.Since(start); resp.StatusCode < 400 || took < timeout {
		t.Errorf("stalled body: code %d after %s: %s", resp.StatusCode, took, body)
	}

	// A watch outlives the deadline and still delivers.
	w := openStream(t, &http.Client{}, "http://"+l.addr+podsPath+"?watch=true")
	testkit.Consistently(t, 3*timeout, func() error {
		select {
		case <-w.done:
			return errors.New("the watch ended at the request deadline")
		default:
			return nil
		}
	})
	l.createPod(newPod("late", ""))
	if ev := w.next(); ev.Type != "ADDED" {
		t.Fatalf("watch event %s", ev.Type)
	}
}

func TestLongRunning(t *testing.T) {
	for _, tc := range []struct {
		method, url string
		want        bool
	}{
		{"GET", "/api/v1/pods?watch=true", true},
		{"GET", "/api/v1/namespaces/default/pods?watch=1", true},
		{"GET", "/api/v1/namespaces/default/pods?watch=false", false},
		{"GET", "/api/v1/namespaces/default/pods/p/log", true},
		{"GET", "/api/v1/namespaces/default/pods/p/log?follow=true", true},
		{"GET", "/api/v1/namespaces/default/configmaps/log", false},
		{"GET", "/api/v1/namespaces/default/pods/p", false},
		{"POST", "/api/v1/namespaces/default/pods?watch=true", false},
	} {
		hr, _ := http.NewRequest(tc.method, tc.url, nil)
		if got := longRunning(hr); got != tc.want {
			t.Errorf("%s %s: longRunning %v, want %v", tc.method, tc.url, got, tc.want)
		}
	}
}

// TestFailureThrottle: the bucket's arithmetic with a fake clock.
func TestFailureThrottle(t *testing.T) {
	now := time.Unix(1000, 0)
	th := newFailureThrottle()
	th.burst, th.every, th.maxDelay = 3, time.Second, 2*time.Second
	th.now = func() time.Time { return now }
	var got []time.Duration
	for range 7 {
		got = append(got, th.fail("10.0.0.1"))
	}
	want := []time.Duration{0, 0, 0, time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("delays %v, want %v", got, want)
	}
	if d := th.fail("10.0.0.2"); d != 0 {
		t.Errorf("another source waits %s", d)
	}
	// Its debt is bounded: burst+maxDelay after it stops, it is forgiven.
	now = now.Add(5 * time.Second)
	if d := th.fail("10.0.0.1"); d != 0 {
		t.Errorf("after 5 s of quiet: %s", d)
	}
	// Memory is bounded.
	for i := range failureSources + 100 {
		th.fail(fmt.Sprintf("10.1.%d.%d", i/256, i%256))
	}
	if n := th.sources.Len(); n > failureSources {
		t.Errorf("%d sources remembered", n)
	}
}

func TestSourceOf(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1:5555":           "10.0.0.1",
		"[::ffff:10.0.0.1]:5555":  "10.0.0.1",
		"[2001:db8:1:2:3::4]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ff::1]:80": "2001:db8:1:2::/64",
		"[fe80::1%eth0]:80":       "fe80::/64",
		"@":                       "@",
	} {
		if got := sourceOf(in); got != want {
			t.Errorf("sourceOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// Test401ClosesHTTP2Connection: over HTTP/2, what kubectl speaks, a 401
// makes the server send GOAWAY, so the client's next request needs a new
// connection; an authenticated client keeps its connection.
func Test401ClosesHTTP2Connection(t *testing.T) {
	e := newEnv(t)
	certSrv := httptest.NewTLSServer(http.NotFoundHandler()) // borrowed certificate and trusting client
	defer certSrv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- e.s.Run(ctx, ln, &tls.Config{Certificates: certSrv.TLS.Certificates}) }()
	defer func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	tr := certSrv.Client().Transport.(*http.Transport).Clone()
	tr.ForceAttemptHTTP2 = true
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	// get sends one request and reports whether it reused a connection.
	get := func(token string) (int, bool) {
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
		hr, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", "https://"+ln.Addr().String()+"/api", nil)
		if token != "" {
			hr.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("protocol %s, want HTTP/2", resp.Proto)
		}
		return resp.StatusCode, reused
	}
	get(adminToken)
	for range 3 {
		if code, reused := get(adminToken); code != http.StatusOK || !reused {
			t.Fatalf("admin: code %d, reused %v", code, reused)
		}
	}
	// Each 401 ends its connection: once the client has read the GOAWAY,
	// its next request dials anew. Were the connection kept, every
	// request would reuse it.
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Fatalf("anonymous: code %d", code)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if code, reused := get(adminToken); code != http.StatusOK || reused {
			return fmt.Errorf("code %d, reused %v", code, reused)
		}
		return nil
	})
}
