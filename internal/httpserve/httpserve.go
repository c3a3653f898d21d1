// Package httpserve runs an http.Server until its context ends and shuts it
// down within a bound: what the API server and the agent's log server share.
package httpserve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

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
