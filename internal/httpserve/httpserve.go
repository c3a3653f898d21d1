// Package httpserve builds an http.Server with everynode's connection
// deadlines and runs it until its context ends, shutting it down within a
// bound: what the API server and the agent's log server share.
package httpserve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"
)

// Limits are the connection deadlines of a server (docs/security.md
// §1). There is no server-wide read or write timeout: both servers
// stream watches and log follows for as long as their clients want, and a
// server-wide WriteTimeout would cut them (kube-apiserver sets none either).
// Handlers bound the requests that are not long-running themselves, with
// per-request deadlines (http.ResponseController).
type Limits struct {
	// ReadHeader bounds reading a request's headers, from its first byte,
	// and the TLS handshake: a client that sends its headers slowly
	// (slowloris) is cut after it.
	ReadHeader time.Duration
	// Idle bounds how long a keep-alive connection waits for its next request.
	Idle time.Duration
	// MaxHeaderBytes bounds the size of a request's headers.
	MaxHeaderBytes int
}

// DefaultLimits are kube-apiserver's values (k8s.io/apiserver
// pkg/server/secure_serving.go: IdleTimeout 90 s, MaxHeaderBytes 1 MiB) with a
// shorter header deadline: 10 s instead of 32 s.
func DefaultLimits() Limits {
	return Limits{ReadHeader: 10 * time.Second, Idle: 90 * time.Second, MaxHeaderBytes: 1 << 20}
}

// NewServer returns an http.Server for h with the deadlines of l; errorLog
// receives the server's own errors (nil: the standard logger).
func NewServer(h http.Handler, l Limits, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeader,
		IdleTimeout:       l.Idle,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          errorLog,
	}
}

// Serve serves srv on ln, over TLS when tlsCfg is not nil, until ctx ends or
// serving fails. Either way it then calls stopping (if not nil: end long
// requests such as watches and follows, so connections can go idle), shuts
// srv down waiting at most grace, and closes the connections still busy
// after that. It returns nil after a clean shutdown, "serve ADDR: …" when
// serving failed and "shutdown: …" when the shutdown did.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, tlsCfg *tls.Config, grace time.Duration, stopping func()) error {
	errc := make(chan error, 1)
	go func() {
		if tlsCfg != nil {
			srv.TLSConfig = tlsCfg.Clone()
			errc <- srv.ServeTLS(ln, "", "")
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case err := <-errc:
		if stopping != nil {
			stopping()
		}
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	if stopping != nil {
		stopping()
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		// Some connection would not go idle in time (a client that stopped
		// reading a stream): cut every connection.
		_ = srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
