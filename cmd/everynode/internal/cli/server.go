package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/cmd/internal/agentcmd"
	"github.com/everynode/everynode/server"
)

// Server defaults, chosen to match Kubernetes' habits so kubectl users feel at home.
const (
	// DefaultDataDir is relative to the working directory, so a first try
	// needs no root and leaves everything in one visible place.
	DefaultDataDir = "./everynode-data"
	// DefaultListen is the API address (server.DefaultListen).
	DefaultListen = server.DefaultListen
	// AdminKubeconfigFile is written into the data dir once the API answers.
	AdminKubeconfigFile = server.AdminKubeconfigFile
)

// ServerCommand is "everynode server".
type ServerCommand struct {
	dataDir   string
	listen    string
	endpoints string
	tlsSANs   string
	noAgent   bool
	logLevel  string
	eventTTL  time.Duration
	grace     time.Duration
	// clustering the embedded etcd (docs/ha.md)
	clusterInit bool
	joinURL     string
	tokenFile   string
	advertise   string
	peerPort    int
	snapEvery   time.Duration
	snapKeep    int
	// memLimit is --memory-limit; memoryLimit its value.
	memLimit    string
	memoryLimit int64
	// auditLog, auditMaxSize and auditMaxBackups are kube-apiserver's
	// --audit-log-path, --audit-log-maxsize and --audit-log-maxbackup.
	auditLog        string
	auditMaxSize    int
	auditMaxBackups int
	// agent holds the local agent's flags and the gossip flags.
	agent agentFlags

	level slog.Level
}

func (c *ServerCommand) flags(fs *pflag.FlagSet) {
	fs.StringVar(&c.dataDir, "data-dir", DefaultDataDir, "directory for etcd data, certificates, tokens and admin.kubeconfig")
	fs.StringVar(&c.listen, "listen", DefaultListen, "API address (host:port; port 0 picks a free port)")
	fs.StringVar(&c.endpoints, "etcd-endpoints", "", "comma-separated client URLs of an external etcd; empty embeds etcd in the data dir")
	fs.StringVar(&c.tlsSANs, "tls-san", "", "comma-separated extra host names or IPs for the serving certificate")
	fs.BoolVar(&c.noAgent, "no-agent", false, "do not run a node agent inside the server")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&c.eventTTL, "event-ttl", server.DefaultEventTTL, "how long Events are kept after their last update, as kube-apiserver's --event-ttl")
	fs.StringVar(&c.auditLog, "audit-log", "", "write the audit log (one audit.k8s.io/v1 Event JSON line per write and per denied request) to this file, as kube-apiserver's --audit-log-path")
	fs.IntVar(&c.auditMaxSize, "audit-log-maxsize", server.DefaultAuditLogMaxSize, "megabytes the audit log may reach before it is rotated")
	fs.IntVar(&c.auditMaxBackups, "audit-log-maxbackup", server.DefaultAuditLogMaxBackups, "rotated audit log files to keep (0 keeps all)")
	fs.DurationVar(&c.grace, "unreachable-grace", server.DefaultUnreachableGrace, "how long a node must have been NotReady or Unknown before DaemonSet rollouts stop waiting for it (docs/rollouts.md §7)")
	fs.BoolVar(&c.clusterInit, "cluster-init", false, "start the first server of a cluster whose embedded etcd other servers join (--join); ignored once the data dir is initialised")
	fs.StringVar(&c.tokenFile, "token-file", "", "with --join: file holding the cluster's join token (a copy of the first server's DATA_DIR/join-token; agent-only tokens are refused)")
	fs.StringVar(&c.joinURL, "join", "", "https URL of a server of the cluster to join as another server (with --token-file); ignored once the data dir is initialised")
	fs.StringVar(&c.advertise, "advertise-address", "", "IP other servers and agents reach this server on (default: the address on the route to --join, else the node IP)")
	fs.IntVar(&c.peerPort, "etcd-peer-port", server.DefaultPeerPort, "etcd peer port (mutual TLS) of a clustered server")
	fs.DurationVar(&c.snapEvery, "snapshot-interval", 0, "save an etcd snapshot into DATA_DIR/snapshots this often (e.g. 6h); 0: none")
	fs.IntVar(&c.snapKeep, "snapshot-retention", server.DefaultSnapshotRetention, "how many scheduled snapshots to keep")
	fs.StringVar(&c.memLimit, "memory-limit", "none", memoryLimitUsage)
	c.agent.Register(fs, "gossip (memberlist) bind address host:port, UDP and TCP; agents learn it when they join; port 0 picks a free one")
}

func (c *ServerCommand) complete(pos []string) error {
	var err error
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
	if c.auditMaxSize < 1 || c.auditMaxBackups < 0 {
		return usageError(fmt.Sprintf("invalid --audit-log-maxsize %d or --audit-log-maxbackup %d", c.auditMaxSize, c.auditMaxBackups),
			"use a size of at least 1 (megabytes) and a backup count of 0 or more")
	}
	if c.grace <= 0 {
		return usageError(fmt.Sprintf("invalid --unreachable-grace %s", c.grace), "use a positive duration, e.g. --unreachable-grace 30s")
	}
	if c.joinURL != "" && c.clusterInit {
		return usageError("--cluster-init and --join both given", "--cluster-init starts the first server; the others --join it")
	}
	if c.joinURL != "" && c.tokenFile == "" {
		return usageError("--join needs --token-file", "give the file holding the first server's join-token (from its data dir)")
	}
	if c.snapEvery < 0 || (c.snapEvery > 0 && c.snapKeep < 1) {
		return usageError("invalid --snapshot-interval or --snapshot-retention", "use a positive interval (e.g. 6h) and keep at least 1")
	}
	if c.memoryLimit, err = parseMemoryLimit(c.memLimit); err != nil {
		return err
	}
	if c.advertise != "" && net.ParseIP(c.advertise) == nil {
		return usageError(fmt.Sprintf("invalid --advertise-address %q", c.advertise), "give an IP address")
	}
	return c.agent.Check()
}

func splitList(s string) []string { return agentcmd.SplitList(s) }

// Run starts the server (server.Start documents the order of its steps),
// prints the welcome text and blocks until ctx ends; then it closes the
// server in order. If the embedded etcd, the API or the local agent fails,
// the same shutdown runs and Run returns the failure.
func (c *ServerCommand) Run(ctx context.Context, std IO) error {
	log := slog.New(slog.NewTextHandler(std.Err, &slog.HandlerOptions{Level: c.level}))
	cfg := server.Config{
		DataDir: c.dataDir, Listen: c.listen, EtcdEndpoints: splitList(c.endpoints), TLSSANs: splitList(c.tlsSANs),
		EventTTL: c.eventTTL, UnreachableGrace: c.grace, Logger: log, Gossip: c.agent.GossipOptions(), UserAgent: "everynode-agent/" + Version(),
		ClusterInit: c.clusterInit, JoinURL: c.joinURL, AdvertiseAddress: c.advertise, PeerPort: c.peerPort,
		ServerName: strings.ToLower(c.agent.Name), SnapshotInterval: c.snapEvery, SnapshotRetention: c.snapKeep,
		AuditLog: c.auditLog, AuditLogMaxSize: c.auditMaxSize, AuditLogMaxBackups: c.auditMaxBackups,
		MemoryLimit: c.memoryLimit,
	}
	if c.joinURL != "" {
		token, err := readTokenFile(c.tokenFile)
		if err != nil {
			return err
		}
		cfg.JoinToken = token
	}
	if !c.noAgent {
		node, err := c.agent.NodeName()
		if err != nil {
			return err
		}
		opts := c.agent.NodeOptions(node)
		cfg.Agent = &opts
	}
	s, err := server.Start(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			log.Info("interrupted while starting")
			return nil
		}
		return explainStart(err, c.dataDir)
	}
	printWelcome(std, s.URL(), s.JoinURL(), s.JoinTokenFile(), s.Kubeconfig())
	select {
	case <-ctx.Done():
		log.Info("shutting down")
		return s.Close()
	case err := <-s.Err():
		log.Error("shutting down after a failure", "err", err)
		s.Close()
		return explainStart(err, c.dataDir)
	}
}

func printWelcome(std IO, url, join, joinToken, kubeconfig string) {
	fmt.Fprintf(std.Out, `everynode server is ready at %s

Use it with kubectl or everynode:
  export KUBECONFIG=%s
  kubectl get nodes
  everynode apply -f daemonset.yaml

Join an agent (from the machine that should run pods, with a copy of %s):
  everynode agent --server %s --token-file join-token

Dashboard: %s/ui/
  log in with the admin token (the token in %s) or a ServiceAccount token
  (kubectl create token NAME); docs/dashboard.md
`, url, kubeconfig, joinToken, join, url, kubeconfig)
}

// ServerRemoveCommand is "everynode server remove NAME".
type ServerRemoveCommand struct {
	main *Main
	clientFlags
	name string
}

func (c *ServerRemoveCommand) flags(*pflag.FlagSet) {}

func (c *ServerRemoveCommand) complete(pos []string) error {
	if len(pos) != 1 {
		return usageError("server remove needs one NAME", "give the server's name as its log and \"everynode server\" show it")
	}
	c.name = pos[0]
	return nil
}

// Run removes the named server from the embedded etcd cluster.
func (c *ServerRemoveCommand) Run(ctx context.Context, std IO) error {
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	body, _ := json.Marshal(client.RemoveServerRequest{Name: c.name})
	if _, err := h.RawPost(ctx, client.RemoveServerPath, body); err != nil {
		return explainTransport(err, h.Server())
	}
	fmt.Fprintf(std.Out, "server %s removed from the etcd cluster; stop it and clear its data dir before it joins again\n", c.name)
	return nil
}
