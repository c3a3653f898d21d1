package bench

import (
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestCountedConnCountsBothWays(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	var c byteCount
	conn := &countedConn{Conn: a, c: &c}
	go func() {
		buf := make([]byte, 5)
		_, _ = io.ReadFull(b, buf)
		_, _ = b.Write([]byte("abc"))
	}()
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(conn, make([]byte, 3)); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if c.out.Load() != 5 || c.in.Load() != 3 {
		t.Errorf("counted out %d in %d, want 5 and 3", c.out.Load(), c.in.Load())
	}
}

// The agents' transport counts below TLS: the handshake and the records
// carrying a response, so at least the body and more than nothing out.
func TestAgentTransportCountsBelowTLS(t *testing.T) {
	body := strings.Repeat("x", 10000)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, body)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	var dials atomic.Int64
	var c byteCount
	tr, err := agentTransport(caPEM, &dials, &c)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(got) != body {
		t.Fatalf("body: %d bytes, %v", len(got), err)
	}
	// TLS 1.3: a handshake of a few hundred bytes each way (the server's
	// certificate in), then the response's records.
	if in := c.in.Load(); in < int64(len(body))+500 {
		t.Errorf("counted %d bytes in, want the %d-byte body plus the handshake", in, len(body))
	}
	if out := c.out.Load(); out < 200 {
		t.Errorf("counted %d bytes out, want at least a ClientHello and the request", out)
	}
	if dials.Load() != 1 {
		t.Errorf("dials %d, want 1", dials.Load())
	}
}

func TestIdleRatesPerAgentPerSecond(t *testing.T) {
	t0 := Traffic{APIIn: 100, APIOut: 50, GossipIn: 1000, GossipOut: 1000, GossipPacketsIn: 10, GossipPacketsOut: 10}
	t1 := Traffic{APIIn: 100 + 2000, APIOut: 50 + 1000, GossipIn: 1000 + 4000, GossipOut: 1000 + 3000, GossipPacketsIn: 10 + 40, GossipPacketsOut: 10 + 20}
	var r Result
	idleRates(t1.sub(t0), 10, 2, &r) // 10 s, 2 agents
	for _, x := range []struct {
		name      string
		got, want float64
	}{
		{"api in", r.IdleAPIBytesPerSIn, 100}, {"api out", r.IdleAPIBytesPerSOut, 50},
		{"gossip in", r.IdleGossipBytesPerSIn, 200}, {"gossip out", r.IdleGossipBytesPerSOut, 150},
		{"packets in", r.IdleGossipPacketsPerSIn, 2}, {"packets out", r.IdleGossipPacketsPerSOut, 1},
		{"in", r.IdleBytesPerSIn, 300}, {"out", r.IdleBytesPerSOut, 200},
	} {
		if x.got != x.want {
			t.Errorf("%s = %v, want %v", x.name, x.got, x.want)
		}
	}
}
