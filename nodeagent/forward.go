package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Forwarder defaults.
const (
	// defaultForwardConns bounds the connections a forwarder carries at
	// once; further clients wait in the listen backlog until one ends.
	defaultForwardConns = 256
	// forwardDialTimeout bounds connecting to the target.
	forwardDialTimeout = 5 * time.Second
)

// tcpForwarder copies raw TCP between the clients it accepts and a target
// address: the API server, for pods on a bridge network that cannot reach
// the server's loopback address. It never looks into the bytes (TLS stays
// end to end). It listens on one literal IP address only, never on an
// unspecified one (0.0.0.0, ::), so it is not reachable from other hosts
// unless that address is. Run owns every goroutine; its end closes the
// listener and every connection.
type tcpForwarder struct {
	ln     net.Listener
	target string
	log    *slog.Logger
	sem    chan struct{} // one token per carried connection

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
}

// listenForwarder opens a forwarder's listener on addr (a literal,
// specified IP and a port) towards target. maxConns <= 0 means
// defaultForwardConns.
func listenForwarder(addr, target string, maxConns int, log *slog.Logger) (*tcpForwarder, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("forwarder: listen address %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsUnspecified() {
		return nil, fmt.Errorf("forwarder: listen address %q: want one literal IP address, not a wildcard or a name", addr)
	}
	if maxConns <= 0 {
		maxConns = defaultForwardConns
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("forwarder: %w", err)
	}
	return &tcpForwarder{ln: ln, target: target, log: log, sem: make(chan struct{}, maxConns), conns: map[net.Conn]struct{}{}}, nil
}

// Addr is the listener's address.
func (f *tcpForwarder) Addr() net.Addr { return f.ln.Addr() }

// Close closes the listener; for a forwarder whose Run is never called.
func (f *tcpForwarder) Close() error { return f.ln.Close() }

// Run accepts and forwards connections until ctx ends, then closes the
// listener and every open connection and returns once all its goroutines
// have.
func (f *tcpForwarder) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		f.ln.Close()
		f.mu.Lock()
		f.done = true
		for c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
	}()
	for {
		select {
		case f.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		c, err := f.ln.Accept()
		if err != nil {
			<-f.sem
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			f.log.Warn("API forwarder: accept failed, stopping", "addr", f.ln.Addr(), "err", err)
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-f.sem }()
			f.serve(ctx, c)
		}()
	}
}

// track records c so that the end of Run closes it; false once Run ended
// (c is closed then).
func (f *tcpForwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *tcpForwarder) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

// serve connects client to the target and copies both ways until both
// directions ended (each end's EOF is passed on as a half close).
func (f *tcpForwarder) serve(ctx context.Context, client net.Conn) {
	if !f.track(client) {
		return
	}
	defer f.untrack(client)
	dctx, cancel := context.WithTimeout(ctx, forwardDialTimeout)
	up, err := (&net.Dialer{}).DialContext(dctx, "tcp", f.target)
	cancel()
	if err != nil {
		f.log.Debug("API forwarder: cannot reach the API server", "target", f.target, "client", client.RemoteAddr(), "err", err)
		return
	}
	if !f.track(up) {
		return
	}
	defer f.untrack(up)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(up, client)
	}()
	pipe(client, up)
	<-done
}

// pipe copies from src to dst, then passes the end on: a half close of
// dst's write side when it has one, else a full close.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	dst.Close()
}
