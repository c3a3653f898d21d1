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
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
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
	log := slog.New(slog.NewTextHandler(os.Stdout, nil)).With("node", node, "version", *version)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

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
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("started", "listen", *listen)

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
