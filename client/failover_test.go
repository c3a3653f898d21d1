package client

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestFailover: requests go to the configured server while it answers,
// move to another when it cannot be reached (a POST's body is sent again,
// whole) and stay there; an answer with an error status is not retried.
func TestFailover(t *testing.T) {
	var hits []string
	handler := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			hits = append(hits, name+":"+string(b))
			if r.URL.Path == "/fail" {
				http.Error(w, "no", http.StatusInternalServerError)
				return
			}
			io.WriteString(w, name)
		})
	}
	dead := httptest.NewServer(handler("dead"))
	deadURL := dead.URL
	alive := httptest.NewServer(handler("alive"))
	defer alive.Close()
	fo, err := NewFailover(http.DefaultTransport, deadURL, func() []string { return []string{alive.URL} }, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: fo}
	post := func(path string) (int, string) {
		t.Helper()
		res, err := c.Post(deadURL+path, "text/plain", strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if _, got := post("/"); got != "dead" {
		t.Fatalf("first answer from %q", got)
	}
	dead.Close()
	if _, got := post("/"); got != "alive" {
		t.Fatalf("after the stop: answer from %q", got)
	}
	if fo.Current() != alive.URL {
		t.Fatalf("current %s, want %s", fo.Current(), alive.URL)
	}
	if code, _ := post("/fail"); code != http.StatusInternalServerError {
		t.Fatalf("status %d", code)
	}
	want := []string{"dead:body", "alive:body", "alive:body"}
	if strings.Join(hits, ",") != strings.Join(want, ",") {
		t.Fatalf("requests %v, want %v", hits, want)
	}
}

// TestFailoverDown: a server known to be dead is not sent a request while
// another can be reached, even when it is the current one; when every
// server is known dead they are all still tried, in order.
func TestFailoverDown(t *testing.T) {
	var hits []string
	handler := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			hits = append(hits, name+":"+string(b))
			io.WriteString(w, name)
		})
	}
	a := httptest.NewServer(handler("a"))
	defer a.Close()
	b := httptest.NewServer(handler("b"))
	defer b.Close()
	var down []string
	fo, err := NewFailover(http.DefaultTransport, a.URL, func() []string { return []string{b.URL} }, func() []string { return down })
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: fo}
	post := func() string {
		t.Helper()
		// No GetBody: the body can be sent once, and is, to the live server.
		res, err := c.Post(a.URL+"/", "text/plain", io.NopCloser(strings.NewReader("body")))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		got, _ := io.ReadAll(res.Body)
		return string(got)
	}
	down = []string{a.URL + "/ignored/path"}
	if got := post(); got != "b" {
		t.Fatalf("with a known dead: answer from %q", got)
	}
	if fo.Current() != b.URL {
		t.Fatalf("current %s, want %s", fo.Current(), b.URL)
	}
	down = []string{b.URL, a.URL}
	if got := post(); got != "b" {
		t.Fatalf("with every server known dead: answer from %q, want the current one", got)
	}
	want := []string{"b:body", "b:body"}
	if strings.Join(hits, ",") != strings.Join(want, ",") {
		t.Fatalf("requests %v, want %v", hits, want)
	}
}
