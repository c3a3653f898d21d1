package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/ui"
)

// uiClient is a browser session on the dashboard: its cookie and CSRF token.
type uiClient struct {
	e      *env
	cookie string
	csrf   string
}

// uiDo sends a request to the dashboard with the given headers (name,
// value pairs); origin "" sends none.
func (e *env) uiDo(method, path, body string, headers ...string) resp {
	e.t.Helper()
	hr, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] != "" {
			hr.Header.Set(headers[i], headers[i+1])
		}
	}
	res, err := e.srv.Client().Do(hr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{code: res.StatusCode, header: res.Header, body: b}
}

// uiLogin logs in with token from the server's own origin.
func (e *env) uiLogin(token string) *uiClient {
	e.t.Helper()
	body, _ := json.Marshal(map[string]string{"token": token})
	r := e.uiDo("POST", "/ui/login", string(body), "Origin", e.srv.URL, "Content-Type", "application/json")
	var s struct{ User, CSRF string }
	r.must(e.t, http.StatusOK, &s)
	set := r.header.Get("Set-Cookie")
	for _, attr := range []string{"HttpOnly", "Secure", "SameSite=Strict", "Path=/ui/"} {
		if !strings.Contains(set, attr) {
			e.t.Errorf("session cookie %q lacks %s", set, attr)
		}
	}
	if s.CSRF == "" || strings.Contains(set, token) {
		e.t.Fatalf("login: csrf %q, cookie %q (must be sealed, not the token)", s.CSRF, set)
	}
	return &uiClient{e: e, cookie: strings.SplitN(set, ";", 2)[0], csrf: s.CSRF}
}

// api calls the API through the dashboard as a page of its origin would.
func (c *uiClient) api(method, path, body string, headers ...string) resp {
	c.e.t.Helper()
	h := append([]string{"Cookie", c.cookie, "Origin", c.e.srv.URL, ui.CSRFHeader, c.csrf, "Content-Type", "application/merge-patch+json"}, headers...)
	return c.e.uiDo(method, "/ui/api"+path, body, h...)
}

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestDashboardAuth: the shell is open and holds no data; a login sets a
// sealed HttpOnly/Secure/SameSite=Strict cookie; API calls through /ui/api
// are authenticated and authorized as the API's own (a view-role user
// reads but is refused an action, 403); every write needs the session's
// CSRF token and the server's origin; a forged, expired or absent cookie,
// a wrong token and a cookie sent to the API itself are refused.
func TestDashboardAuth(t *testing.T) {
	clock := &testClock{t: time.Now()}
	e := newEnv(t, withRBAC, func(c *Config) { c.Now = clock.now })
	if err := e.s.EnsureBootstrapPolicy(testCtx(t)); err != nil {
		t.Fatalf("EnsureBootstrapPolicy: %v", err)
	}
	// A read-only role, as the view ClusterRole grants.
	e.grant("", "dashboard-viewer", rbacv1.Subject{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "someone"},
		rbacv1.PolicyRule{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"", "apps"}, Resources: []string{"daemonsets", "pods", "nodes", "events"}})
	e.post(dsPath, newDS("secret-fleet"))

	// The shell, to anyone, without cluster data, kept to its origin.
	for _, p := range []string{"/ui/", "/ui/app.js", "/ui/state.js", "/ui/style.css"} {
		r := e.uiDo("GET", p, "")
		if r.code != http.StatusOK || strings.Contains(string(r.body), "secret-fleet") {
			t.Fatalf("anonymous GET %s: %d %.200s", p, r.code, r.body)
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("GET %s: CSP %q", p, csp)
		}
	}
	if r := e.uiDo("GET", "/ui/app.js", ""); !strings.Contains(r.header.Get("Content-Type"), "javascript") {
		t.Errorf("app.js served as %q", r.header.Get("Content-Type"))
	}

	// Logins that fail.
	login := func(token, origin, ct string) resp {
		body, _ := json.Marshal(map[string]string{"token": token})
		return e.uiDo("POST", "/ui/login", string(body), "Origin", origin, "Content-Type", ct)
	}
	wantStatus(t, login("wrong", e.srv.URL, "application/json"), http.StatusUnauthorized, "token not accepted: it is wrong, expired or revoked")
	wantStatus(t, login(userToken, "", "application/json"), http.StatusForbidden, "request without an Origin header refused")
	wantStatus(t, login(userToken, "https://evil.example", "application/json"), http.StatusForbidden, "cross-origin request from https://evil.example refused")
	wantStatus(t, login(userToken, e.srv.URL, "application/x-www-form-urlencoded"), http.StatusBadRequest, "log in with a JSON body")

	viewer := e.uiLogin(userToken)
	admin := e.uiLogin(adminToken)
	var s struct{ User, CSRF string }
	e.uiDo("GET", "/ui/session", "", "Cookie", viewer.cookie).must(t, http.StatusOK, &s)
	if s.User != "someone" || s.CSRF != viewer.csrf {
		t.Errorf("session: %+v, want someone and the login's CSRF token", s)
	}

	// Reads carry the session's user through RBAC.
	var l appsv1.DaemonSetList
	viewer.api("GET", dsPath, "").must(t, http.StatusOK, &l)
	if len(l.Items) != 1 || l.Items[0].Name != "secret-fleet" {
		t.Fatalf("viewer's list: %+v", l.Items)
	}
	wantStatus(t, viewer.api("GET", "/api/v1/namespaces/default/secrets", ""), http.StatusForbidden, `User "someone" cannot list resource "secrets"`)

	// A read-only user's action: refused by RBAC, also when it tries to impersonate.
	pause := `{"metadata":{"annotations":{"rollout.everynode.io/paused":"true"}}}`
	wantStatus(t, viewer.api("PATCH", dsPath+"/secret-fleet", pause), http.StatusForbidden, `User "someone" cannot patch resource "daemonsets"`)
	wantStatus(t, viewer.api("PATCH", dsPath+"/secret-fleet", pause, "Impersonate-User", "admin", "Impersonate-Group", mastersGroup),
		http.StatusForbidden, `User "someone" cannot patch resource "daemonsets"`)

	// CSRF: the cookie alone never authorizes a write.
	noCSRF := e.uiDo("PATCH", "/ui/api"+dsPath+"/secret-fleet", pause, "Cookie", admin.cookie, "Origin", e.srv.URL, "Content-Type", "application/merge-patch+json")
	wantStatus(t, noCSRF, http.StatusForbidden, "missing or wrong X-Everynode-CSRF header")
	wantStatus(t, admin.api("PATCH", dsPath+"/secret-fleet", pause, ui.CSRFHeader, viewer.csrf), http.StatusForbidden, "missing or wrong X-Everynode-CSRF header")
	wantStatus(t, admin.api("PATCH", dsPath+"/secret-fleet", pause, "Origin", "https://evil.example"), http.StatusForbidden, "cross-origin request from https://evil.example refused")
	wantStatus(t, admin.api("DELETE", dsPath+"/secret-fleet", "", "Sec-Fetch-Site", "cross-site"), http.StatusForbidden, "cross-site request refused")
	noOrigin := e.uiDo("DELETE", "/ui/api"+dsPath+"/secret-fleet", "", "Cookie", admin.cookie, ui.CSRFHeader, admin.csrf)
	wantStatus(t, noOrigin, http.StatusForbidden, "request without an Origin header refused")
	// The cookie is not a credential on the API's own paths.
	if r := e.uiDo("GET", dsPath, "", "Cookie", admin.cookie); r.code != http.StatusUnauthorized {
		t.Errorf("API path with only the session cookie: %d", r.code)
	}
	var got appsv1.DaemonSet
	e.do(req{method: "GET", path: dsPath + "/secret-fleet"}).must(t, http.StatusOK, &got)
	if _, ok := got.Annotations["rollout.everynode.io/paused"]; ok {
		t.Fatal("a refused request paused the DaemonSet")
	}

	// With all of it, the action happens.
	admin.api("PATCH", dsPath+"/secret-fleet", pause).must(t, http.StatusOK, nil)
	e.do(req{method: "GET", path: dsPath + "/secret-fleet"}).must(t, http.StatusOK, &got)
	if got.Annotations["rollout.everynode.io/paused"] != "true" {
		t.Fatalf("pause through the dashboard did not reach the API: %v", got.Annotations)
	}

	// A forged, damaged or absent cookie.
	wantStatus(t, e.uiDo("GET", "/ui/api"+dsPath, "", "Cookie", ui.CookieName+"="+adminToken), http.StatusUnauthorized, "the session cookie is not valid")
	wantStatus(t, e.uiDo("GET", "/ui/api"+dsPath, "", "Cookie", admin.cookie+"A"), http.StatusUnauthorized, "the session cookie is not valid")
	wantStatus(t, e.uiDo("GET", "/ui/api"+dsPath, ""), http.StatusUnauthorized, "not logged in")

	// An expired session.
	clock.add(ui.DefaultSessionTTL + time.Second)
	wantStatus(t, admin.api("GET", dsPath, ""), http.StatusUnauthorized, "the session has expired: log in again")
	wantStatus(t, e.uiDo("GET", "/ui/session", "", "Cookie", admin.cookie), http.StatusUnauthorized, "the session has expired")
}

// TestDashboardRevokedToken: a session whose token the API no longer
// accepts (expired or revoked) is refused by the API on the next call.
func TestDashboardRevokedToken(t *testing.T) {
	auth := tokens{adminToken: {Name: "admin", Groups: []string{mastersGroup}}, "short-lived": {Name: "temp", Groups: []string{mastersGroup}}}
	e := newEnv(t, func(c *Config) { c.Authenticator = auth })
	c := e.uiLogin("short-lived")
	c.api("GET", dsPath, "").must(t, http.StatusOK, nil)
	delete(auth, "short-lived")
	if r := c.api("GET", dsPath, ""); r.code != http.StatusUnauthorized {
		t.Errorf("revoked token's session: %d %s", r.code, r.body)
	}
	wantStatus(t, e.uiDo("GET", "/ui/session", "", "Cookie", c.cookie), http.StatusUnauthorized, "no longer accepted")
}

// cookieTransport sends a dashboard session's cookie on every request.
type cookieTransport struct {
	cookie string
	rt     http.RoundTripper
}

func (c cookieTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Cookie", c.cookie)
	return c.rt.RoundTrip(r)
}

// BenchmarkDashboardWatchCost: the server's cost of connected dashboards.
// Each dashboard holds what the page holds — a watch of nodes, of
// DaemonSets and of every pod, through /ui/api with its session cookie —
// and each op creates a pod and waits until every dashboard has seen it
// (docs/benchmarks.md, "Dashboard").
func BenchmarkDashboardWatchCost(b *testing.B) {
	for _, n := range []int{0, 1, 10, 100} {
		b.Run(fmt.Sprintf("dashboards=%d", n), func(b *testing.B) {
			e := newEnv(b)
			c := e.uiLogin(adminToken)
			hc := &http.Client{Transport: cookieTransport{cookie: c.cookie, rt: e.srv.Client().Transport}}
			pods := make([]*stream, n)
			for i := range pods {
				openStream(b, hc, e.srv.URL+"/ui/api/api/v1/nodes?watch=1")
				openStream(b, hc, e.srv.URL+"/ui/api/apis/apps/v1/daemonsets?watch=1")
				pods[i] = openStream(b, hc, e.srv.URL+"/ui/api/api/v1/pods?watch=1")
			}
			lc := NewLocalClient(e.s, "bench", mastersGroup)
			var lat latencies
			b.ResetTimer()
			for i := range b.N {
				p := newPod("dash-"+strconv.Itoa(i), "node-"+strconv.Itoa(i%100))
				t0 := time.Now()
				if _, err := lc.Create(context.Background(), p, client.WriteOptions{}); err != nil {
					b.Fatal(err)
				}
				for _, s := range pods {
					if ev := s.next(); ev.meta(b).Metadata.Name != p.Name {
						b.Fatalf("a dashboard saw %s, want %s", ev.meta(b).Metadata.Name, p.Name)
					}
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			lat.report(b, "create-to-every-dashboard")
		})
	}
}
