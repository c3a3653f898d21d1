package apiserver

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/resources"
)

// fakeAgent is a node agent's log endpoint on loopback (self-signed TLS, as
// the real one): it answers token-checked /containerLogs requests with the
// path and query, and a follow with one line per value sent on more.
type fakeAgent struct {
	srv  *httptest.Server
	more chan string
	seen chan string // the request URIs, in order
}

func newFakeAgent(t *testing.T, token string) *fakeAgent {
	t.Helper()
	a := &fakeAgent{more: make(chan string), seen: make(chan string, 16)}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		a.seen <- r.URL.RequestURI()
		if strings.HasSuffix(r.URL.Path, "/gone") {
			http.Error(w, `container "gone" in pod default/p is waiting to start`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "log of %s\n", r.URL.RequestURI())
		if r.URL.Query().Get("follow") != "true" {
			return
		}
		w.(http.Flusher).Flush()
		for {
			select {
			case l, ok := <-a.more:
				if !ok {
					return
				}
				fmt.Fprintln(w, l)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// hostPort is the agent's loopback address and port.
func (a *fakeAgent) hostPort(t *testing.T) (string, int32) {
	host, port, err := net.SplitHostPort(a.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return host, int32(p)
}

// seedNode stores a Node publishing addr and port, as an agent registers it.
func (e *env) seedNode(name string, addrs []corev1.NodeAddress, port int32) {
	e.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	resources.Nodes.SetTypeMeta(n)
	n.Status.Addresses = addrs
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = port
	if _, err := e.st.Create(testCtx(e.t), resources.Nodes, n); err != nil {
		e.t.Fatal(err)
	}
}

func TestPodLog(t *testing.T) {
	agent := newFakeAgent(t, "cred-n1")
	e := newEnv(t, func(c *Config) {
		c.NodeCredential = func(node string) string { return "cred-" + node }
	})
	host, port := agent.hostPort(t)
	e.seedNode("n1", []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "n1.invalid"}, {Type: corev1.NodeInternalIP, Address: host}}, port)
	e.seedNode("n2", []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host}}, port) // the agent refuses n2's credential
	e.seedNode("n3", []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host}}, 0)    // publishes no port
	e.createPod(newPod("p", "n1"))
	two := newPod("two", "n1")
	two.Spec.Containers = append(two.Spec.Containers, corev1.Container{Name: "side", Image: "busybox:1.36"})
	two.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox:1.36"}}
	e.createPod(two)
	e.createPod(newPod("unbound", ""))
	e.createPod(newPod("refused", "n2"))
	e.createPod(newPod("noport", "n3"))
	e.createPod(newPod("ghost", "n9"))

	logPath := func(pod, query string) string { return podsPath + "/" + pod + "/log" + query }
	for _, tc := range []struct {
		name, path, token string
		code              int
		body              string
	}{
		{"one container", logPath("p", ""), "", 200, "log of /containerLogs/default/p/c\n"},
		{"options passed on", logPath("p", "?container=c&tailLines=3&timestamps=true&sinceSeconds=10&previous=true"), "", 200,
			"log of /containerLogs/default/p/c?previous=true&sinceSeconds=10&tailLines=3&timestamps=true\n"},
		{"limitBytes", logPath("p", "?limitBytes=6"), "", 200, "log of"},
		{"named container", logPath("two", "?container=side"), "", 200, "log of /containerLogs/default/two/side\n"},
		{"init container", logPath("two", "?container=init"), "", 200, "log of /containerLogs/default/two/init\n"},
		{"two containers, none named", logPath("two", ""), "", 400, "a container name must be specified for pod two, choose one of: [c side]"},
		{"bad container", logPath("p", "?container=nope"), "", 400, "container nope is not valid for pod p"},
		{"no such pod", logPath("nope", ""), "", 404, `pods \"nope\" not found`},
		{"unbound", logPath("unbound", ""), "", 400, "pod unbound does not have a host assigned"},
		{"unregistered node", logPath("ghost", ""), "", 400, "node n9 of pod ghost is not registered"},
		{"no port", logPath("noport", ""), "", 400, "node n3 publishes no log endpoint"},
		{"agent refuses", logPath("refused", ""), "", 500, "refused the server's credentials"},
		{"bad tail", logPath("p", "?tailLines=-2"), "", 400, "invalid tailLines"},
		{"bad follow", logPath("p", "?follow=often"), "", 400, "invalid follow"},
		{"both since", logPath("p", "?sinceSeconds=1&sinceTime=2026-01-01T00:00:00Z"), "", 400, "at most one of sinceTime or sinceSeconds"},
		{"anonymous", logPath("p", ""), "-", 401, "Unauthorized"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for len(agent.seen) > 0 {
				<-agent.seen
			}
			r := e.do(req{method: "GET", path: tc.path, token: tc.token})
			if r.code != tc.code || !strings.Contains(string(r.body), tc.body) {
				t.Fatalf("GET %s: %d %s\nwant %d containing %q", tc.path, r.code, r.body, tc.code, tc.body)
			}
			if tc.code == 200 && !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
				t.Errorf("content type %q", r.header.Get("Content-Type"))
			}
			if tc.name == "limitBytes" && string(r.body) != "log of" {
				t.Errorf("limitBytes=6: %q", r.body)
			}
		})
	}

	t.Run("container waiting", func(t *testing.T) {
		bad := newPod("waits", "n1")
		bad.Spec.Containers[0].Name = "gone"
		e.createPod(bad)
		r := e.do(req{method: "GET", path: logPath("waits", "")})
		if st := r.status(t); r.code != 400 || !strings.Contains(st.Message, "waiting to start") || st.Reason != metav1.StatusReasonBadRequest {
			t.Errorf("%d %s", r.code, r.body)
		}
	})

	t.Run("follow streams", func(t *testing.T) {
		hr, _ := http.NewRequest(http.MethodGet, e.srv.URL+logPath("p", "?follow=true"), nil)
		hr.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := e.srv.Client().Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("follow: %d", resp.StatusCode)
		}
		sc := bufio.NewScanner(resp.Body)
		lines := make(chan string)
		go func() {
			defer close(lines)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		next := func() string {
			t.Helper()
			select {
			case l := <-lines:
				return l
			case <-time.After(10 * time.Second):
				t.Fatal("no line arrived: the stream is not flushed")
				return ""
			}
		}
		if l := next(); l != "log of /containerLogs/default/p/c?follow=true" {
			t.Fatalf("first line %q", l)
		}
		for i := range 3 {
			agent.more <- fmt.Sprintf("line %d", i)
			if l := next(); l != fmt.Sprintf("line %d", i) {
				t.Fatalf("streamed %q", l)
			}
		}
		close(agent.more) // the container stops: the stream ends
		select {
		case _, open := <-lines:
			if open {
				t.Error("more lines after the end")
			}
		case <-time.After(10 * time.Second):
			t.Error("the stream did not end with the agent's")
		}
	})
}

func TestPodLogWithoutCredentials(t *testing.T) {
	e := newEnv(t)
	e.seedNode("n1", []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}, 1)
	e.createPod(newPod("p", "n1"))
	r := e.do(req{method: "GET", path: podsPath + "/p/log"})
	if r.code != http.StatusServiceUnavailable {
		t.Errorf("without NodeCredential: %d %s", r.code, r.body)
	}
}

func TestPodLogAgentUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	e := newEnv(t, func(c *Config) { c.NodeCredential = func(string) string { return "x" } })
	e.seedNode("n1", []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}, int32(port))
	e.createPod(newPod("p", "n1"))
	r := e.do(req{method: "GET", path: podsPath + "/p/log"})
	if r.code != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "cannot reach the agent of node n1") {
		t.Errorf("unreachable agent: %d %s", r.code, r.body)
	}
}
