package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller"
	"github.com/everynode/everynode/controller/leader"
	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/nodeagent"
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
	endpoints string
	tlsSANs   string
	noAgent   bool
	logLevel  string
	eventTTL  time.Duration
	// agent holds the local agent's flags and the gossip flags.
	agent agentFlags

	level slog.Level
}

func (c *ServerCommand) parse(args []string, std IO) error {
	fs := newFlagSet("server", "server [--data-dir DIR] [--listen ADDR] [--gossip ADDR] [--gossip-profile lan|wan|local] [--etcd-endpoints URLS] [--no-agent] [local agent flags: --name --labels --taints --runtime ...]", std.Out)
	fs.StringVar(&c.dataDir, "data-dir", DefaultDataDir, "directory for etcd data, certificates, tokens and admin.kubeconfig")
	fs.StringVar(&c.listen, "listen", DefaultListen, "API address (host:port; port 0 picks a free port)")
	fs.StringVar(&c.endpoints, "etcd-endpoints", "", "comma-separated client URLs of an external etcd; empty embeds etcd in the data dir")
	fs.StringVar(&c.tlsSANs, "tls-san", "", "comma-separated extra host names or IPs for the serving certificate")
	fs.BoolVar(&c.noAgent, "no-agent", false, "do not run a node agent inside the server")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&c.eventTTL, "event-ttl", store.DefaultEventTTL, "how long Events are kept after their last update, as kube-apiserver's --event-ttl")
	c.agent.register(fs, "gossip (memberlist) bind address host:port, UDP and TCP; agents learn it when they join; port 0 picks a free one")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "server takes only flags; see \"everynode server -h\"")
	}
	if c.level, err = parseLogLevel(c.logLevel); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		return usageError(fmt.Sprintf("invalid --listen %q: %v", c.listen, err), "use host:port, e.g. 127.0.0.1:6443 or :0")
	}
	if c.dataDir == "" {
		return usageError("--data-dir is empty", "give a directory")
	}
	if c.eventTTL < time.Second {
		return usageError(fmt.Sprintf("invalid --event-ttl %s", c.eventTTL), "use at least 1s, e.g. --event-ttl 1h")
	}
	return c.agent.check()
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
//  2. listen on --listen (so the URL with the real port is known), start the
//     local agent's runtime unless --no-agent,
//  3. open the store (embedded etcd, or --etcd-endpoints),
//  4. start the gossip member (named after the local node, or
//     everynode-server-<host>-<random> with --no-agent),
//  5. build the API server (node credentials restricted by NodeRestriction,
//     POST /everynode/v1/join enabled), make sure the standard namespaces
//     exist, serve over TLS,
//  6. once /readyz answers on the real port, write admin.kubeconfig,
//  7. campaign for the controllers' leadership (etcd election) and run the
//     controllers while leading, fed by the gossip membership,
//  8. run the local agent against the server's own URL with its node token,
//  9. on ctx end: stop the agent, stop the controllers, leave the gossip
//     pool, close the member, stop the API, close the store. If the
//     embedded etcd, the API or the local agent fails, the same shutdown
//     runs and Run returns the failure.
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
	node := ""
	if !c.noAgent {
		if node, err = c.agent.nodeName(); err != nil {
			return err
		}
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return withFix(fmt.Errorf("cannot listen on %s: %w", c.listen, err), "choose a free address with --listen (port 0 picks one)")
	}
	listening := true
	defer func() {
		if listening {
			ln.Close()
		}
	}()
	url := serverURL(ln.Addr(), host)
	nodeIP := c.agent.nodeIP
	if nodeIP == "" {
		nodeIP = serverNodeIP(host)
	}

	var rt nodeagent.Runtime
	var logLn net.Listener
	if !c.noAgent {
		r, closeRT, err := c.agent.newRuntime(ctx, node, nodeIP, log)
		if err != nil {
			return err
		}
		defer closeRT()
		rt = r
		if logLn, err = c.agent.listenLogs(); err != nil {
			return err
		}
		defer logLn.Close()
	}

	st, err := store.Open(ctx, store.Config{DataDir: dataDir, Endpoints: splitList(c.endpoints), EventTTL: c.eventTTL, Logger: log})
	if err != nil {
		if ctx.Err() != nil {
			log.Info("interrupted while starting")
			return nil
		}
		return withFix(fmt.Errorf("cannot open the store: %w", err), "check --etcd-endpoints, or that no other server uses "+dataDir)
	}
	defer st.Close()

	memberName, meta := node, gossip.Meta{Role: gossip.RoleServer, APIAddr: url}
	if c.noAgent {
		memberName = "everynode-server-" + randomSuffix(hostnameOr("server"))
	} else {
		meta.AgentAddr = logAddr(logLn, nodeIP)
	}
	member, err := gossip.New(c.agent.gossipConfig(memberName, cluster.GossipKey(), meta, nodeIP, log))
	if err != nil {
		return withFix(fmt.Errorf("cannot start gossip: %w", err), "choose a free --gossip address (port 0 picks one)")
	}
	defer member.Close()

	api, err := apiserver.New(apiserver.Config{
		Store: st, Authenticator: cluster, Authorizer: apiserver.NewNodeRestriction(apiserver.StorePods(st)),
		Logger:         log.With("component", "apiserver"),
		NodeCredential: func(n string) string { return nodeagent.LogToken(cluster.NodeToken(n)) },
		Join: &apiserver.JoinConfig{Secrets: cluster, DataDir: dataDir,
			Seeds: func() []string { return serverSeeds(member) }, APIServer: func() string { return url }},
	})
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
	runCtx, stopAPI := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAPI()
	errc := make(chan error, 1)
	listening = false // api.Run owns ln now
	go func() { errc <- api.Run(runCtx, ln, cluster.TLSConfig()) }()
	shutdown := func() error {
		stopAPI()
		err := <-errc
		if cerr := st.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close store: %w", cerr)
		}
		return err
	}

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
	log.Info("API ready", "url", url, "kubeconfig", kubeconfigPath, "gossip", member.LocalAddr())

	// Controllers, under leader election, fed by gossip membership.
	ctrlCtx, stopCtrl := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCtrl()
	var ctrlWG sync.WaitGroup
	ms := nodelifecycle.NewGossipMembership(member)
	ctrlWG.Add(3)
	go func() {
		defer ctrlWG.Done()
		ms.Run(ctrlCtx)
	}()
	go func() {
		defer ctrlWG.Done()
		joinServerPeers(ctrlCtx, st.Client(), member, memberName, log.With("component", "gossip"))
	}()
	identity, err := serverIdentity(dataDir)
	if err != nil {
		return err
	}
	go func() {
		defer ctrlWG.Done()
		ctrlLog := log.With("component", "controller")
		local := apiserver.NewLocalClient(api, "system:controller", pki.MastersGroup)
		err := leader.Run(ctrlCtx, leader.Config{Client: st.Client(), Identity: identity, Logger: ctrlLog}, func(ctx context.Context) {
			ctrlLog.Info("leading: controllers start", "identity", identity)
			if err := controller.RunAll(ctx, controller.Config{Client: local, Membership: ms, Logger: ctrlLog}); err != nil && ctx.Err() == nil {
				ctrlLog.Error("controllers stopped", "err", err)
			}
		})
		if err != nil {
			ctrlLog.Error("leader election", "err", err)
		}
	}()

	// The local agent: an ordinary node credential against our own URL, so
	// NodeRestriction applies to it as to any agent. Its liveness in gossip
	// is the server's member, named after the node.
	agentCtx, stopAgent := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAgent()
	agentErr := make(chan error, 1)
	if c.noAgent {
		log.Info("no local agent (--no-agent)")
	} else {
		h, err := client.NewHTTP(client.Config{Server: url, CAPEM: cluster.CAPEM(), Token: cluster.NodeToken(node),
			UserAgent: "everynode-agent/" + Version(), Logger: log.With("component", "client")})
		if err != nil {
			stopCtrl()
			ctrlWG.Wait()
			shutdown()
			return err
		}
		defer h.Close()
		ar := &agentRun{flags: &c.agent, node: node, nodeIP: nodeIP, nodeToken: cluster.NodeToken(node),
			dataDir: agentDataDir(dataDir), api: h, rt: rt, log: log, logLn: logLn}
		go func() { agentErr <- ar.run(agentCtx) }()
		log.Info("local agent started", "node", node, "runtime", c.agent.runtime)
	}
	printWelcome(std, url, joinURL(ln.Addr(), host, url), dataDir, kubeconfigPath)

	stopAll := func() error {
		stopAgent()
		if !c.noAgent {
			if err := <-agentErr; err != nil {
				log.Warn("local agent stopped with an error", "err", err)
			}
		}
		stopCtrl() // controllers, and joining other servers' members
		ctrlWG.Wait()
		if c.agent.leaveOnStop {
			if err := member.Leave(leaveTimeout); err != nil {
				log.Warn("gossip leave failed", "err", err)
			}
		}
		member.Close()
		return shutdown()
	}
	var failure error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
		return stopAll()
	case err := <-errc:
		errc <- err // shutdown reads it again
		failure = fmt.Errorf("API server stopped: %w", err)
	case err := <-st.Err():
		failure = withFix(fmt.Errorf("embedded etcd stopped: %v", err), "see the log above for the cause (disk full? data dir removed?), then restart the server")
	case err := <-agentErr:
		if err == nil {
			err = errors.New("it returned without being asked to stop")
		}
		agentErr <- nil // stopAll reads it again
		failure = withFix(fmt.Errorf("local agent failed: %w", err), "fix the cause above, or run the server with --no-agent")
	}
	log.Error("shutting down after a failure", "err", failure)
	stopAll()
	return failure
}

// serverNodeIP is the local node's IP: the listen host when it is a
// specific IP, else the address of the interface with the default route
// (no packet is sent), else loopback.
func serverNodeIP(listenHost string) string {
	if ip := net.ParseIP(listenHost); ip != nil && !ip.IsUnspecified() {
		return ip.String()
	}
	if ip := outboundIP("https://192.0.2.1:443"); ip != "" {
		return ip
	}
	return "127.0.0.1"
}

// hostnameOr is the lower-cased host name, or def.
func hostnameOr(def string) string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return def
	}
	return strings.ToLower(h)
}

// serverIdentity is this server's name in the controllers' leader election:
// made once (host name plus a random suffix) and kept in DIR/server-id, so a
// server restarted after a crash recognises and releases its own stale term
// at once instead of waiting for its lease to expire.
func serverIdentity(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "server-id")
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read server identity: %w", err)
	}
	id := randomSuffix(hostnameOr("server"))
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write server identity: %w; check that the data dir is writable", err)
	}
	return id, nil
}

// randomSuffix appends "-" and 8 random hex digits to s.
func randomSuffix(s string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return s + "-" + hex.EncodeToString(b[:])
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
