package apiserver

// Node streams (connected.go): what corroborates gossip before a node is
// marked not ready (docs/security.md, "Gossip is a hint").

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/everynode/everynode/internal/testkit"
)

const streamNodeToken = "n1-token"

// selfSignedTLS is a server TLS config for 127.0.0.1 and the pool that trusts it.
func selfSignedTLS(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, pool
}

// cuttableProxy forwards TCP connections to target until cut, after which
// it forwards nothing either way but keeps the connections open: a cut
// link, as a pulled cable or a dropping firewall makes it.
type cuttableProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newCuttableProxy(t *testing.T, target string) *cuttableProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttableProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *cuttableProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, u)
		go p.pipe(u, c)
	}
}

// pipe copies from src to dst until src fails; once cut it drops what it reads.
func (p *cuttableProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *cuttableProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestNodeStreams: a node holding a watch authenticated as itself is
// connected, another user's watch counts for nobody; a stream its agent
// ends (an agent killed: its kernel closes the connection, which ends
// its streams) stops counting after the linger, with a Changed hint; and a
// link cut without any close is found by the server's HTTP/2 pings, which
// close the connection and its streams.
func TestNodeStreams(t *testing.T) {
	conns := NewConnectedNodes(100 * time.Millisecond)
	e := newEnv(t, func(c *Config) {
		c.Connected = conns
		c.Authenticator.(tokens)[streamNodeToken] = UserInfo{Name: "system:node:n1", Groups: []string{nodesGroup}}
	})
	tlsCfg, pool := selfSignedTLS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- e.s.Run(runCtx, ln, tlsCfg) }()
	proxy := newCuttableProxy(t, ln.Addr().String())
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}

	// watch opens a pod watch with token; the stream ends with its context.
	watch := func(ctx context.Context, token string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
			"https://"+proxy.ln.Addr().String()+"/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dn1", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Fatalf("watch: %s over %s, want 200 over HTTP/2", resp.Status, resp.Proto)
		}
		return resp
	}
	connected := func() bool { return conns.IsConnected("n1") }

	adminCtx, stopAdmin := context.WithCancel(context.Background())
	defer stopAdmin()
	adminResp := watch(adminCtx, adminToken)
	defer adminResp.Body.Close()
	ctx1, end1 := context.WithCancel(context.Background())
	resp := watch(ctx1, streamNodeToken)
	testkit.EventuallyTrue(t, 10*time.Second, "n1 connected", connected)
	if got := conns.Connected(); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("Connected() = %v, want [n1] (the admin's watch is nobody's)", got)
	}
	var list ConnectedNodesList
	e.get(ConnectedNodesPath).must(t, http.StatusOK, &list)
	if !slices.Equal(list.Nodes, []string{"n1"}) {
		t.Errorf("GET %s = %v, want [n1]", ConnectedNodesPath, list.Nodes)
	}

	// The agent goes away: its stream ends.
	select { // drop a stale hint
	case <-conns.Changed():
	default:
	}
	end1()
	resp.Body.Close()
	select {
	case <-conns.Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("no Changed hint after the node's stream ended")
	}
	if connected() {
		t.Error("n1 still connected after its stream ended and the linger passed")
	}

	// A cut link: nothing is closed, nothing arrives.
	ctx2, end2 := context.WithCancel(context.Background())
	defer end2()
	resp2 := watch(ctx2, streamNodeToken)
	defer resp2.Body.Close()
	testkit.EventuallyTrue(t, 10*time.Second, "n1 connected again", connected)
	proxy.cut.Store(true)
	cutAt := time.Now()
	testkit.EventuallyTrue(t, 20*time.Second, "n1 gone after the cut", func() bool { return !connected() })
	t.Logf("cut link → node no longer connected in %s (ping after %s of silence, %s to answer, %s linger)",
		time.Since(cutAt).Round(10*time.Millisecond), StreamPingInterval, StreamPingTimeout, 100*time.Millisecond)

	end2()
	stopAdmin()
	_, _ = io.Copy(io.Discard, adminResp.Body)
	stopRun()
	if err := <-runDone; err != nil {
		t.Errorf("Run: %v", err)
	}
	tr.CloseIdleConnections()
}

// TestStreamPingConfig: the HTTP/2 pings that find cut links are on by
// default (1 s of silence, 1 s to answer) and follow Config.StreamPing.
func TestStreamPingConfig(t *testing.T) {
	for _, c := range []struct {
		ping                  StreamPing
		wantSilence, wantWait time.Duration
	}{
		{StreamPing{}, StreamPingInterval, StreamPingTimeout},
		{StreamPing{Interval: 10 * time.Second, Timeout: 5 * time.Second}, 10 * time.Second, 5 * time.Second},
	} {
		e := newEnv(t, func(cfg *Config) { cfg.StreamPing = c.ping })
		srv := e.s.httpServer()
		if srv.HTTP2 == nil || srv.HTTP2.SendPingTimeout != c.wantSilence || srv.HTTP2.PingTimeout != c.wantWait {
			t.Errorf("StreamPing %+v: HTTP2 config %+v, want pings after %s, answers within %s", c.ping, srv.HTTP2, c.wantSilence, c.wantWait)
		}
	}
}
