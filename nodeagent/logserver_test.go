package nodeagent

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

// logServer starts ServeLogs for e's agent on loopback over TLS and returns
// its base URL and a client that skips verification, as the API server does.
func logServer(t *testing.T, e *env, nodeToken string) (string, *http.Client) {
	t.Helper()
	tlsCfg, err := SelfSignedTLS("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.agent.ServeLogs(ctx, ln, tlsCfg, LogAuthorizer(nodeToken)) }()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(func() {
		cancel()
		hc.CloseIdleConnections()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ServeLogs: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("ServeLogs did not stop")
		}
	})
	return "https://" + ln.Addr().String(), hc
}

func logGet(t *testing.T, hc *http.Client, url, token string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestLogServer(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.seed(newPod("talk", withAnnotations(rtfake.AnnotationExitAfter, "1m", rtfake.AnnotationExitCode, "3")))
	e.sync("talk")
	const nodeToken = "node:n1:secret"
	base, hc := logServer(t, e, nodeToken)
	good := LogToken(nodeToken)

	for _, tc := range []struct {
		name, path, token string
		code              int
		body              string
	}{
		{"no token", "/containerLogs/default/talk/app", "", 401, "Unauthorized"},
		{"node token itself", "/containerLogs/default/talk/app", nodeToken, 401, "Unauthorized"},
		{"other node's log token", "/containerLogs/default/talk/app", LogToken("node:n2:secret"), 401, "Unauthorized"},
		{"logs", "/containerLogs/default/talk/app", good, 200, `pretending to run "sleep infinity"`},
		{"one container, none named", "/containerLogs/default/talk", good, 200, "pretending"},
		{"timestamps", "/containerLogs/default/talk/app?timestamps=true", good, 200, t0.Format(time.RFC3339Nano) + " fake:"},
		{"tail 0", "/containerLogs/default/talk/app?tailLines=0", good, 200, ""},
		{"unknown pod", "/containerLogs/default/nope/app", good, 404, "pod default/nope is not on node n1"},
		{"unknown container", "/containerLogs/default/talk/sidecar", good, 404, `container "sidecar"`},
		{"no previous", "/containerLogs/default/talk/app?previous=true", good, 404, "previous terminated container"},
		{"bad tail", "/containerLogs/default/talk/app?tailLines=-1", good, 400, "invalid tailLines"},
		{"bad since", "/containerLogs/default/talk/app?sinceSeconds=0", good, 400, "invalid sinceSeconds"},
		{"both since", "/containerLogs/default/talk/app?sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z", good, 400, "at most one"},
		{"bad follow", "/containerLogs/default/talk/app?follow=maybe", good, 400, "invalid follow"},
		{"other path", "/pods", good, 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := logGet(t, hc, base+tc.path, tc.token)
			if resp.StatusCode != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("GET %s: %d %q, want %d containing %q", tc.path, resp.StatusCode, body, tc.code, tc.body)
			}
			if tc.code == 200 && tc.body == "" && body != "" {
				t.Errorf("GET %s: body %q, want none", tc.path, body)
			}
			if tc.code == 200 && resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Errorf("content type %q", resp.Header.Get("Content-Type"))
			}
		})
	}

	t.Run("follow", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, base+"/containerLogs/default/talk/app?follow=true", nil)
		req.Header.Set("Authorization", "Bearer "+good)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		lines := make(chan string)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		next := func() string {
			select {
			case l := <-lines:
				return l
			case <-time.After(10 * time.Second):
				t.Fatal("no line streamed")
				return ""
			}
		}
		// The current output arrives before the stream ends: it is flushed.
		if l := next(); !strings.Contains(l, "pretending") {
			t.Fatalf("first line %q", l)
		}
		eventually(t, "the follower to wait", e.clock.HasWaiters)
		e.clock.Step(time.Minute) // the pretend process exits, writing more
		var rest []string
		for l := range lines {
			rest = append(rest, l)
		}
		if got := strings.Join(rest, "\n"); !strings.Contains(got, "exited with code 3") {
			t.Errorf("followed after exit: %q", got)
		}
	})
}

func TestLogServerNeedsAuthorizer(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := e.agent.ServeLogs(context.Background(), ln, nil, nil); err == nil {
		t.Fatal("ServeLogs without authorize: no error")
	}
}

func TestParseLogQuery(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r, err := ParseLogQuery(map[string][]string{
		"follow": {"true"}, "previous": {"1"}, "timestamps": {"true"}, "tailLines": {"7"}, "sinceSeconds": {"60"},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Follow || !r.Previous || !r.Timestamps || r.TailLines == nil || *r.TailLines != 7 || !r.Since.Equal(now.Add(-time.Minute)) {
		t.Errorf("parsed %+v", r)
	}
	r, err = ParseLogQuery(map[string][]string{"sinceTime": {"2026-01-01T00:00:00Z"}}, now)
	if err != nil || !r.Since.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("sinceTime: %+v %v", r, err)
	}
}

func TestLogTokenPublishedPort(t *testing.T) {
	if LogToken("a") == LogToken("b") || LogToken("a") == "a" {
		t.Error("log tokens do not depend on the node token")
	}
	e := newEnv(t, rtfake.Config{})
	e.agent.cfg.LogPort = 10250
	n := e.agent.newNode()
	if n.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("published port %d", n.Status.DaemonEndpoints.KubeletEndpoint.Port)
	}
	if len(n.Status.Addresses) == 0 || n.Status.Addresses[0].Address != "192.0.2.10" || n.Status.Addresses[0].Type != "InternalIP" {
		t.Errorf("addresses %v", n.Status.Addresses)
	}
}

// TestLogServerRefusal: a request without the log token is answered 401
// whatever its path, before its body is read, and its connection is closed
// (docs/security.md §1).
func TestLogServerRefusal(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	base, hc := logServer(t, e, "node:n1:secret")
	for _, path := range []string{"/containerLogs/default/talk/app", "/pods", "/"} {
		resp, body := logGet(t, hc, base+path, "wrong")
		if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
			t.Errorf("GET %s with a wrong token: %d, close %v: %q", path, resp.StatusCode, resp.Close, body)
		}
	}
	c, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST /containerLogs/default/talk/app HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 100<<20)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer before the body: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Fatalf("anonymous 100 MB POST: %d, close %v", resp.StatusCode, resp.Close)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the connection stayed open after the 401")
		}
	}
}
