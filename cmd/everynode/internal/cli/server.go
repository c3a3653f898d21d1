package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/store"
)

// Server defaults, chosen to match Kubernetes' habits so kubectl users feel at home.
const (
	// DefaultDataDir is relative to the working directory, so a first try
	// needs no root and leaves everything in one visible place.
	DefaultDataDir = "./everynode-data"
	// DefaultListen is the API address: loopback only until the user opts
	// into exposing it; 6443 is the Kubernetes API port kubectl users expect.
	DefaultListen = "127.0.0.1:6443"
	// AdminKubeconfigFile is written into the data dir once the API answers.
	AdminKubeconfigFile = "admin.kubeconfig"
	// readyTimeout bounds the wait for the API's /readyz after starting it.
	readyTimeout = 60 * time.Second
	// readyPoll is the interval between /readyz probes while starting.
	readyPoll = 50 * time.Millisecond
)

// namespacesAtStart exist in every cluster, as in Kubernetes.
var namespacesAtStart = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// ServerCommand is "everynode server".
type ServerCommand struct {
	dataDir   string
	listen    string
	gossip    string
	endpoints string
	tlsSANs   string
	noAgent   bool
	logLevel  string

	level slog.Level
}

func (c *ServerCommand) parse(args []string, std IO) error {
	fs := newFlagSet("server", "server [--data-dir DIR] [--listen ADDR] [--gossip ADDR] [--etcd-endpoints URLS] [--no-agent]", std.Out)
	fs.StringVar(&c.dataDir, "data-dir", DefaultDataDir, "directory for etcd data, certificates, tokens and admin.kubeconfig")
	fs.StringVar(&c.listen, "listen", DefaultListen, "API address (host:port; port 0 picks a free port)")
	fs.StringVar(&c.gossip, "gossip", "", "gossip (memberlist) address host:port")
	fs.StringVar(&c.endpoints, "etcd-endpoints", "", "comma-separated client URLs of an external etcd; empty embeds etcd in the data dir")
	fs.StringVar(&c.tlsSANs, "tls-san", "", "comma-separated extra host names or IPs for the serving certificate")
	fs.BoolVar(&c.noAgent, "no-agent", false, "do not run a node agent inside the server")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "server takes only flags; see \"everynode server -h\"")
	}
	if err := c.level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return usageError(fmt.Sprintf("invalid --log-level %q", c.logLevel), "use debug, info, warn or error")
	}
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		return usageError(fmt.Sprintf("invalid --listen %q: %v", c.listen, err), "use host:port, e.g. 127.0.0.1:6443 or :0")
	}
	if c.gossip != "" {
		if _, _, err := net.SplitHostPort(c.gossip); err != nil {
			return usageError(fmt.Sprintf("invalid --gossip %q: %v", c.gossip, err), "use host:port, e.g. 0.0.0.0:7946")
		}
	}
	if c.dataDir == "" {
		return usageError("--data-dir is empty", "give a directory")
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Run starts the server and blocks until ctx ends, then shuts down in order:
//  1. load or create the cluster's key material (pki.Load),
//  2. open the store (embedded etcd, or --etcd-endpoints),
//  3. build the API server and make sure the standard namespaces exist,
//  4. listen and serve over TLS,
//  5. once /readyz answers on the real port, write admin.kubeconfig,
//  6. on ctx end: stop the API, then close the store.
func (c *ServerCommand) Run(ctx context.Context, args []string, std IO) error {
	if err := c.parse(args, std); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(std.Err, &slog.HandlerOptions{Level: c.level}))
	dataDir, err := filepath.Abs(c.dataDir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	kubeconfigPath := filepath.Join(dataDir, AdminKubeconfigFile)
	// A kubeconfig from an earlier run names an old port; nobody may use it
	// before this run has written the right one.
	if err := os.Remove(kubeconfigPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return withFix(fmt.Errorf("cannot remove stale %s: %w", kubeconfigPath, err), "check the data dir's permissions")
	}

	host, _, _ := net.SplitHostPort(c.listen)
	sans := splitList(c.tlsSANs)
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		sans = append(sans, host)
	}
	cluster, err := pki.Load(dataDir, sans...)
	if err != nil {
		return withFix(err, "check the data dir "+dataDir)
	}

	st, err := store.Open(ctx, store.Config{DataDir: dataDir, Endpoints: splitList(c.endpoints), Logger: log})
	if err != nil {
		if ctx.Err() != nil {
			log.Info("interrupted while starting")
			return nil
		}
		return withFix(fmt.Errorf("cannot open the store: %w", err), "check --etcd-endpoints, or that no other server uses "+dataDir)
	}
	defer st.Close()

	api, err := apiserver.New(apiserver.Config{Store: st, Authenticator: cluster, Logger: log.With("component", "apiserver")})
	if err != nil {
		return err
	}
	if err := api.EnsureNamespaces(ctx, namespacesAtStart...); err != nil {
		if ctx.Err() != nil {
			log.Info("interrupted while starting")
			return nil
		}
		return err
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return withFix(fmt.Errorf("cannot listen on %s: %w", c.listen, err), "choose a free address with --listen (port 0 picks one)")
	}
	runCtx, stopAPI := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAPI()
	errc := make(chan error, 1)
	go func() { errc <- api.Run(runCtx, ln, cluster.TLSConfig()) }()
	shutdown := func() error {
		stopAPI()
		err := <-errc
		if cerr := st.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close store: %w", cerr)
		}
		return err
	}

	url := serverURL(ln.Addr(), host)
	if err := waitReady(ctx, url, cluster, errc); err != nil {
		serr := shutdown()
		if errors.Is(err, context.Canceled) {
			return serr
		}
		return err
	}
	if err := pki.WriteKubeconfig(kubeconfigPath, url, cluster.CAPEM(), cluster.AdminToken(), "everynode"); err != nil {
		shutdown()
		return err
	}
	log.Info("API ready", "url", url, "kubeconfig", kubeconfigPath)
	if c.noAgent {
		log.Info("no local agent (--no-agent)")
	} else {
		log.Warn("no local agent runs yet: this build has no node agent, so the server runs as with --no-agent")
	}
	if c.gossip != "" {
		log.Warn("--gossip is accepted but gossip membership is not wired into this build yet", "gossip", c.gossip)
	}
	printWelcome(std, url, joinURL(ln.Addr(), host, url), dataDir, kubeconfigPath)

	select {
	case <-ctx.Done():
		log.Info("shutting down")
		return shutdown()
	case err := <-errc:
		errc <- err // shutdown reads it again
		shutdown()
		return fmt.Errorf("API server stopped: %w", err)
	}
}

// serverURL is the https URL clients use: the listener's real port, and its
// host unless that is a wildcard, in which case loopback.
func serverURL(addr net.Addr, listenHost string) string {
	_, port, _ := net.SplitHostPort(addr.String())
	host := listenHost
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "https://" + net.JoinHostPort(host, port)
}

// waitReady polls /readyz over the real port, with the CA and admin token,
// until it answers, the server fails, ctx ends or readyTimeout passes.
func waitReady(ctx context.Context, url string, cluster *pki.Cluster, errc chan error) error {
	h, err := client.NewHTTP(client.Config{Server: url, CAPEM: cluster.CAPEM(), Token: cluster.AdminToken(), Timeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer h.Close()
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	var last error
	for {
		if _, last = h.RawGet(ctx, "/readyz"); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			errc <- err
			return fmt.Errorf("API server stopped while starting: %w", err)
		case <-deadline.C:
			return withFix(fmt.Errorf("API at %s not ready after %s: %w", url, readyTimeout, last), "see the log above for the cause")
		case <-tick.C:
		}
	}
}

// joinURL is the address to show for joining agents from other machines: the
// local URL, except that a wildcard listener is named by the host name (which
// the serving certificate carries).
func joinURL(addr net.Addr, listenHost, local string) string {
	if ip := net.ParseIP(listenHost); listenHost != "" && (ip == nil || !ip.IsUnspecified()) {
		return local
	}
	name, err := os.Hostname()
	if err != nil || name == "" {
		return local
	}
	_, port, _ := net.SplitHostPort(addr.String())
	return "https://" + net.JoinHostPort(name, port)
}

func printWelcome(std IO, url, join, dataDir, kubeconfig string) {
	fmt.Fprintf(std.Out, `everynode server is ready at %s

Use it with kubectl or everynode:
  export KUBECONFIG=%s
  kubectl get nodes
  everynode apply -f daemonset.yaml

Join an agent (from the machine that should run pods):
  everynode agent --server %s --token $(cat %s)
`, url, kubeconfig, join, filepath.Join(dataDir, pki.JoinTokenFile))
}
