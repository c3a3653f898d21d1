package nodeagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

// upstream is a TCP server for the forwarder tests: for each connection it
// reads until EOF, then answers the upper-cased bytes and closes. It
// records "accept N" and "eof N" in order.
type upstream struct {
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	events []string
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{ln: ln}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.record(fmt.Sprintf("accept %d", n))
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				b, _ := io.ReadAll(c)
				u.record(fmt.Sprintf("eof %d", n))
				_, _ = c.Write(bytes.ToUpper(b))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		u.wg.Wait()
	})
	return u
}

func (u *upstream) record(e string) {
	u.mu.Lock()
	u.events = append(u.events, e)
	u.mu.Unlock()
}

func (u *upstream) log() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.events...)
}

// runForwarder starts f.Run and returns its stop, which cancels and waits.
func runForwarder(t *testing.T, f *tcpForwarder) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// roundTrip sends msg on a new connection to addr, half-closes, and returns
// the answer read to EOF.
func roundTrip(addr, msg string) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := io.WriteString(c, msg); err != nil {
		return "", err
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

func TestForwarderRefusesWildcardAddresses(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "localhost:0", "127.0.0.1"} {
		f, err := listenForwarder(addr, "127.0.0.1:1", 0, nil)
		if err == nil {
			f.Close()
			t.Errorf("listenForwarder(%q) listened on %v, want an error", addr, f.Addr())
		}
	}
}

func TestForwarderCopiesBothWays(t *testing.T) {
	up := newUpstream(t)
	f, err := listenForwarder("127.0.0.1:0", up.ln.Addr().String(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	runForwarder(t, f)
	// The client's half close reaches the server, whose answer and close
	// come back.
	got, err := roundTrip(f.Addr().String(), "hello, api")
	if err != nil || got != "HELLO, API" {
		t.Fatalf("round trip: %q, %v; want %q", got, err, "HELLO, API")
	}
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB each way
	got, err = roundTrip(f.Addr().String(), big)
	if err != nil || got != strings.ToUpper(big) {
		t.Fatalf("1 MiB round trip: %d bytes, %v", len(got), err)
	}
}

func TestForwarderBoundsConnections(t *testing.T) {
	up := newUpstream(t)
	f, err := listenForwarder("127.0.0.1:0", up.ln.Addr().String(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	runForwarder(t, f)
	first, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if _, err := io.WriteString(first, "one"); err != nil {
		t.Fatal(err)
	}
	// The second client connects and sends (the kernel's backlog takes
	// it) while the first is carried; the forwarder takes it on only once
	// the first has ended.
	sc, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if _, err := io.WriteString(sc, "two"); err != nil {
		t.Fatal(err)
	}
	if err := sc.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	second := make(chan string, 1)
	go func() {
		b, err := io.ReadAll(sc)
		if err != nil {
			b = []byte(err.Error())
		}
		second <- string(b)
	}()
	if err := first.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(first); err != nil || string(b) != "ONE" {
		t.Fatalf("first: %q, %v", b, err)
	}
	if got := <-second; got != "TWO" {
		t.Fatalf("second: %q", got)
	}
	// With one connection at a time, the server saw the first end before
	// the second began.
	if log := strings.Join(up.log(), ", "); log != "accept 1, eof 1, accept 2, eof 2" {
		t.Errorf("server saw %s", log)
	}
}

func TestForwarderStopClosesEverything(t *testing.T) {
	up := newUpstream(t)
	f, err := listenForwarder("127.0.0.1:0", up.ln.Addr().String(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := runForwarder(t, f)
	c, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "pending"); err != nil {
		t.Fatal(err)
	}
	stop() // returns once every goroutine of the forwarder has
	// The carried connection was closed without an answer (the server
	// had not seen EOF, so it wrote nothing).
	if b, err := io.ReadAll(c); len(b) != 0 {
		t.Errorf("after stop read %q, %v; want nothing", b, err)
	}
	if c2, err := net.Dial("tcp", f.Addr().String()); err == nil {
		c2.Close()
		t.Error("the listener still accepts after stop")
	}
}

// bridgeRuntime is the fake runtime with a bridge at gw.
type bridgeRuntime struct {
	*rtfake.Fake
	gw net.IP
}

func (b bridgeRuntime) BridgeGateway(context.Context) (net.IP, error) { return b.gw, nil }

// TestBridgeAPIForwarder: an agent whose API server is on loopback, on a
// runtime with a bridge at 127.0.0.2 (standing in for 172.17.0.1), forwards
// the server there; pods without hostNetwork get that address, and a TLS
// client verifying the cluster CA gets through to the server. The server's
// certificate does not cover 127.0.0.2, which the agent says once, naming
// the fix.
func TestBridgeAPIForwarder(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "api")
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the certificate check's refused handshake
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	e := newEnv(t, rtfake.Config{})
	var logs syncBuffer
	e.agent.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e.agent.rt = bridgeRuntime{Fake: e.rt, gw: net.ParseIP("127.0.0.2")}
	e.agent.cfg.APIServer = srv.URL
	e.agent.cfg.ClusterCA = ca

	f := e.agent.bridgeAPIForwarder(t.Context())
	if f == nil {
		t.Fatalf("no forwarder; logs:\n%s", logs.String())
	}
	runForwarder(t, f)
	want := net.JoinHostPort("127.0.0.2", port)
	if e.agent.bridgeAPI != want || f.Addr().String() != want {
		t.Fatalf("bridgeAPI %q, forwarder on %v; want %s", e.agent.bridgeAPI, f.Addr(), want)
	}

	env := func(hostNetwork bool) map[string]string {
		pod := newPod("p")
		pod.Spec.HostNetwork = hostNetwork
		m := map[string]string{}
		for _, v := range e.agent.serviceEnv(pod) {
			m[v.Name] = v.Value
		}
		return m
	}
	if got := env(false); got["KUBERNETES_SERVICE_HOST"] != "127.0.0.2" || got["KUBERNETES_SERVICE_PORT"] != port ||
		got["KUBERNETES_PORT"] != "tcp://"+want {
		t.Errorf("bridge pod env %v", got)
	}
	if got := env(true); got["KUBERNETES_SERVICE_HOST"] != "127.0.0.1" || got["KUBERNETES_SERVICE_PORT"] != port {
		t.Errorf("host network pod env %v", got)
	}

	// TLS end to end through the forwarder, verified against the CA.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + want + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "api" {
		t.Errorf("through the forwarder: %q", b)
	}

	e.agent.checkServingCert(t.Context())
	if !strings.Contains(logs.String(), "restart the server with --tls-san 127.0.0.2") {
		t.Errorf("no actionable line about the certificate; logs:\n%s", logs.String())
	}

	// A second agent of the same server finds the address served (by the
	// first one's forwarder) and hands it out without a forwarder.
	e2 := newEnv(t, rtfake.Config{})
	e2.agent.rt = bridgeRuntime{Fake: e2.rt, gw: net.ParseIP("127.0.0.2")}
	e2.agent.cfg.APIServer = srv.URL
	e2.agent.cfg.ClusterCA = ca
	if f2 := e2.agent.bridgeAPIForwarder(t.Context()); f2 != nil {
		f2.Close()
		t.Fatal("a second forwarder on the same address")
	}
	if e2.agent.bridgeAPI != want {
		t.Errorf("second agent's bridgeAPI %q, want %s", e2.agent.bridgeAPI, want)
	}
}

// TestServiceEnvLoopbackWithoutBridge: a loopback server and no forwarder
// give a pod without host networking no API variables, and a host-network
// pod the server's own address.
func TestServiceEnvLoopbackWithoutBridge(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.agent.cfg.APIServer = "https://127.0.0.1:6443"
	if f := e.agent.bridgeAPIForwarder(t.Context()); f != nil {
		f.Close()
		t.Fatal("a forwarder without a bridge runtime")
	}
	if got := e.agent.serviceEnv(newPod("p")); got != nil {
		t.Errorf("bridge pod env %v, want none", got)
	}
	pod := newPod("h")
	pod.Spec.HostNetwork = true
	if got := e.agent.serviceEnv(pod); len(got) == 0 || got[0].Value != "127.0.0.1" {
		t.Errorf("host network pod env %v", got)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader.
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
