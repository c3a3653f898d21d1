// Command daemon is everynode's example node daemon: the smallest thing worth
// running on every node. It logs a line every few seconds naming its node and
// answers HTTP with its version, so a rolling update from v1 to v2 can be
// watched with curl and `everynode logs`.
//
//	-version  the version it reports (default: $DAEMON_VERSION, else "dev")
//	-listen   the HTTP address (default ":8080")
//	-every    how often it logs (default 5s)
//
// NODE_NAME (set from spec.nodeName by the pod's env) names the node; the
// host name is used when it is unset. It stops cleanly on SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		os.Exit(1)
	}
}

// run serves and logs to out until ctx ends, then shuts down cleanly.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	defVersion := os.Getenv("DAEMON_VERSION")
	if defVersion == "" {
		defVersion = "dev"
	}
	version := fs.String("version", defVersion, "version to report")
	listen := fs.String("listen", ":8080", "HTTP listen address")
	every := fs.Duration("every", 5*time.Second, "log interval")
	if err := fs.Parse(args); err != nil {
		return err
	}
	node := os.Getenv("NODE_NAME")
	if node == "" {
		node, _ = os.Hostname()
	}
	log := slog.New(slog.NewTextHandler(out, nil)).With("node", node, "version", *version)

	start := time.Now()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "everynode example daemon %s on node %s, up %s\n", *version, node, time.Since(start).Round(time.Second))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, *version)
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("started", "listen", ln.Addr().String())

	tick := time.NewTicker(*every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			log.Info("alive", "uptime", time.Since(start).Round(time.Second))
		case err := <-errc:
			return fmt.Errorf("serving %s: %w", *listen, err)
		case <-ctx.Done():
			log.Info("stopping")
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}
	}
}
