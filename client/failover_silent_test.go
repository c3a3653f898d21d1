package client

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// blackHole forwards TCP connections to target until frozen, then drops
// every byte both ways: a server cut off the network, which sends no
// reset. Frozen, it refuses new connections, or, with blackHole.silent,
// accepts them and lets them go as silent.
type blackHole struct {
	silent bool
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
	if !b.silent {
		b.ln.Close()
	}
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
// HTTP/2 goes silent (its traffic is dropped, no reset comes).
//
//   - ping: the client's health check closes the dead connection: the
//     request sent on it fails long before its own timeout, and the next
//     one goes to the other server (the silent one refuses connections).
//   - gossip: the silent server is known dead (as an agent's gossip
//     declares it) and still accepts connections that stay silent: the
//     very next request goes to the other server.
//   - slow: a live server that takes longer to answer than a silent one
//     takes to be given up is not left: the answer is its own.
//
// The times are logged (docs/ha.md), not asserted.
func TestFailoverSilentServer(t *testing.T) {
	serve := func(name string) *httptest.Server {
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				// Longer than a ping and its timeout.
				select {
				case <-time.After(DefaultPingAfter + DefaultPingTimeout + time.Second):
				case <-r.Context().Done():
					return
				}
			}
			io.WriteString(w, name)
		}))
		s.EnableHTTP2 = true
		s.StartTLS()
		t.Cleanup(s.Close)
		return s
	}
	a, b := serve("a"), serve("b")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Certificate().Raw})
	ctx := context.Background()
	start := func(t *testing.T, silent bool) (*HTTP, *blackHole, *atomic.Bool) {
		hole := newBlackHole(t, a.Listener.Addr().String())
		hole.silent = silent
		var dead atomic.Bool
		h, err := NewHTTP(Config{Server: "https://" + hole.ln.Addr().String(), CAPEM: ca, Timeout: 30 * time.Second,
			Servers: func() []string { return []string{b.URL} },
			Down: func() []string {
				if dead.Load() {
					return []string{"https://" + hole.ln.Addr().String()}
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		if got, err := h.RawGet(ctx, "/"); err != nil || string(got) != "a" {
			t.Fatalf("before the partition: %q, %v", got, err)
		}
		return h, hole, &dead
	}
	answer := func(t *testing.T, h *HTTP, when string) {
		t.Helper()
		got, err := h.RawGet(ctx, "/")
		if err != nil || string(got) != "b" {
			t.Fatalf("%s: %q, %v; want the other server's answer", when, got, err)
		}
		if h.Current() != b.URL {
			t.Fatalf("%s: current %s, want %s", when, h.Current(), b.URL)
		}
	}

	t.Run("ping", func(t *testing.T) {
		h, hole, _ := start(t, false)
		hole.freeze()
		cut := time.Now()
		// Sent on the silent connection (or, if the ping closed it
		// already, to the other server).
		got, err := h.RawGet(ctx, "/")
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("the request on the silent connection ran into its timeout: %v", err)
		case err == nil && string(got) != "b":
			t.Fatalf("answer from %q after the partition", got)
		}
		t.Logf("the silent connection was given up %s after the partition (%v)", time.Since(cut).Round(10*time.Millisecond), err)
		answer(t, h, "after the ping")
		t.Logf("requests moved to the other server %s after the partition", time.Since(cut).Round(10*time.Millisecond))
	})

	t.Run("gossip", func(t *testing.T) {
		h, hole, dead := start(t, true)
		hole.freeze()
		dead.Store(true)
		cut := time.Now()
		answer(t, h, "the first request once the silent server is known dead")
		t.Logf("requests moved to the other server %s after it was known dead", time.Since(cut).Round(time.Millisecond))
	})

	t.Run("slow", func(t *testing.T) {
		h, _, _ := start(t, false)
		began := time.Now()
		got, err := h.RawGet(ctx, "/slow")
		if err != nil || string(got) != "a" {
			t.Fatalf("slow answer: %q, %v; want the first server's", got, err)
		}
		if h.Current() == b.URL {
			t.Fatalf("moved to the other server on a slow answer")
		}
		t.Logf("a slow answer came from the first server after %s", time.Since(began).Round(10*time.Millisecond))
	})
}
