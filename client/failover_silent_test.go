package client

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/everynode/everynode/internal/testkit"
)

// blackHole forwards TCP connections to target until frozen, then drops
// every byte both ways and refuses new connections: a server cut off the
// network, which sends no reset.
type blackHole struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	frozen bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newBlackHole(t *testing.T, target string) *blackHole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackHole{ln: ln, target: target}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			b.mu.Lock()
			b.conns = append(b.conns, c, up)
			b.mu.Unlock()
			b.wg.Add(2)
			go b.pipe(c, up)
			go b.pipe(up, c)
		}
	}()
	t.Cleanup(b.close)
	return b
}

func (b *blackHole) pipe(dst, src net.Conn) {
	defer b.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		b.mu.Lock()
		frozen := b.frozen
		b.mu.Unlock()
		if !frozen {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

func (b *blackHole) freeze() {
	b.mu.Lock()
	b.frozen = true
	b.mu.Unlock()
	b.ln.Close()
}

func (b *blackHole) close() {
	b.ln.Close()
	b.mu.Lock()
	for _, c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// TestFailoverSilentServer: the server a failover client talks to over
// HTTP/2 goes silent (its traffic is dropped, no reset comes): the client's
// health check closes the dead connection and later requests move to the
// other server, instead of hanging on it for ever.
func TestFailoverSilentServer(t *testing.T) {
	serve := func(name string) *httptest.Server {
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, name)
		}))
		s.EnableHTTP2 = true
		s.StartTLS()
		t.Cleanup(s.Close)
		return s
	}
	a, b := serve("a"), serve("b")
	hole := newBlackHole(t, a.Listener.Addr().String())
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Certificate().Raw})
	h, err := NewHTTP(Config{Server: "https://" + hole.ln.Addr().String(), CAPEM: ca, Timeout: 2 * time.Second,
		Servers: func() []string { return []string{b.URL} }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx := context.Background()
	if got, err := h.RawGet(ctx, "/"); err != nil || string(got) != "a" {
		t.Fatalf("before the partition: %q, %v", got, err)
	}
	hole.freeze()
	cut := time.Now()
	testkit.Eventually(t, 60*time.Second, func() error {
		got, err := h.RawGet(ctx, "/")
		if err != nil {
			return err
		}
		if string(got) != "b" {
			return fmt.Errorf("answer from %q", got)
		}
		return nil
	})
	t.Logf("requests moved to the other server %s after the first went silent", time.Since(cut).Round(100*time.Millisecond))
	if h.Current() != b.URL {
		t.Fatalf("current %s, want %s", h.Current(), b.URL)
	}
}
