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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/nodeagent/runtime/docker"
	"github.com/everynode/everynode/nodeagent/runtime/fake"
)

// Runtime names for --runtime.
const (
	runtimeDocker = "docker"
	runtimeFake   = "fake"
)

// DefaultGossipAddr is the gossip bind address of servers and agents:
// memberlist's usual port on every interface.
const DefaultGossipAddr = ":7946"

// DefaultLogListen is the agent's log endpoint address, kubelet's port.
const DefaultLogListen = ":10250"

// leaveTimeout bounds the graceful leave announcement on stop.
const leaveTimeout = 3 * time.Second

// agentFlags are the node agent's flags, shared by "everynode agent" and the
// local agent of "everynode server".
type agentFlags struct {
	name           string
	labels         string
	taints         string
	runtime        string
	manifestDir    string
	nodeIP         string
	fakeImages     string
	fakeUnpullable string
	dockerHost     string
	gossip         string
	gossipProfile  string
	leaveOnStop    bool
	logListen      string

	// parsed
	labelMap map[string]string
	taintSet []corev1.Taint
}

func (a *agentFlags) register(fs *cmdFlags, gossipHelp string) {
	fs.StringVar(&a.name, "name", "", "node name (default: the host name, lower-cased)")
	fs.StringVar(&a.labels, "labels", "", "node labels, comma-separated key=value pairs (zone=edge,disk=ssd)")
	fs.StringVar(&a.taints, "taints", "", "node taints, comma-separated key=value:Effect or key:Effect (dedicated=edge:NoSchedule,gpu:NoExecute)")
	fs.StringVar(&a.runtime, "runtime", runtimeDocker, "container runtime: docker, or fake (simulated, for tests and demos without Docker)")
	fs.StringVar(&a.manifestDir, "manifest-dir", "", "directory of static pod manifests run without the API (empty: none)")
	fs.StringVar(&a.nodeIP, "node-ip", "", "IP reported for the node and its pods (default: the address this machine uses to reach the server)")
	fs.StringVar(&a.fakeImages, "fake-images", "", "--runtime fake: comma-separated images preloaded in the simulated image store")
	fs.StringVar(&a.fakeUnpullable, "fake-unpullable", "", "--runtime fake: glob of image references whose pulls fail")
	fs.StringVar(&a.dockerHost, "docker-host", "", "--runtime docker: engine address (default: DOCKER_HOST, else the local socket)")
	fs.StringVar(&a.gossip, "gossip", DefaultGossipAddr, gossipHelp)
	fs.StringVar(&a.gossipProfile, "gossip-profile", gossip.ProfileLAN, "failure-detection timings: lan (≈1.5–2.5 s), wan (lossy links, ≈40–70 s) or local (one machine)")
	fs.StringVar(&a.logListen, "log-listen", DefaultLogListen, "address (host:port) of the agent's HTTPS log endpoint the API server proxies \"logs\" to; port 0 picks a free one")
	fs.BoolVar(&a.leaveOnStop, "leave-on-stop", true, "announce a graceful leave when stopped (the Node goes Ready=False); false: the others detect the stop as a failure (Ready=Unknown)")
}

// check validates and parses the flags.
func (a *agentFlags) check() error {
	var err error
	if a.labelMap, err = nodeagent.ParseLabels(a.labels); err != nil {
		return usageError(fmt.Sprintf("invalid --labels: %v", err), "use key=value,key2=value2")
	}
	if a.taintSet, err = nodeagent.ParseTaints(a.taints); err != nil {
		return usageError(fmt.Sprintf("invalid --taints: %v", err), "use key=value:Effect or key:Effect, Effect one of NoSchedule, PreferNoSchedule, NoExecute")
	}
	switch a.runtime {
	case runtimeDocker, runtimeFake:
	default:
		return usageError(fmt.Sprintf("unknown --runtime %q", a.runtime), "use docker or fake")
	}
	switch a.gossipProfile {
	case gossip.ProfileLAN, gossip.ProfileWAN, gossip.ProfileLocal:
	default:
		return usageError(fmt.Sprintf("unknown --gossip-profile %q", a.gossipProfile), "use lan, wan or local")
	}
	if _, _, err := net.SplitHostPort(a.gossip); err != nil {
		return usageError(fmt.Sprintf("invalid --gossip %q: %v", a.gossip, err), "use host:port with an IP or empty host, e.g. :7946 or 127.0.0.1:0")
	}
	if _, _, err := net.SplitHostPort(a.logListen); err != nil {
		return usageError(fmt.Sprintf("invalid --log-listen %q: %v", a.logListen, err), "use host:port, e.g. :10250 or 127.0.0.1:0")
	}
	if a.nodeIP != "" && net.ParseIP(a.nodeIP) == nil {
		return usageError(fmt.Sprintf("invalid --node-ip %q", a.nodeIP), "give an IP address")
	}
	if a.name != "" {
		if msgs := validation.IsDNS1123Subdomain(a.name); len(msgs) > 0 {
			return usageError(fmt.Sprintf("invalid --name %q: %s", a.name, strings.Join(msgs, "; ")), "use lower-case letters, digits, '-' and '.'")
		}
	}
	return nil
}

// nodeName is --name, else the host name lower-cased.
func (a *agentFlags) nodeName() (string, error) {
	if a.name != "" {
		return a.name, nil
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "", withFix(fmt.Errorf("cannot read the host name: %v", err), "give the node a name with --name")
	}
	h = strings.ToLower(h)
	if msgs := validation.IsDNS1123Subdomain(h); len(msgs) > 0 {
		return "", usageError(fmt.Sprintf("host name %q is not a valid node name: %s", h, strings.Join(msgs, "; ")), "give the node a name with --name")
	}
	return h, nil
}

// gossipConfig is the member configuration of the flags' profile.
func (a *agentFlags) gossipConfig(name string, key []byte, meta gossip.Meta, advertiseIP string, log *slog.Logger) gossip.Config {
	var cfg gossip.Config
	switch a.gossipProfile {
	case gossip.ProfileWAN:
		cfg = gossip.DefaultWANConfig()
	case gossip.ProfileLocal:
		cfg = gossip.DefaultLocalConfig()
	default:
		cfg = gossip.DefaultLANConfig()
	}
	cfg.BindAddr = a.gossip
	if host, _, _ := net.SplitHostPort(a.gossip); advertiseIP != "" {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			cfg.AdvertiseAddr = advertiseIP
		}
	}
	cfg.Name, cfg.Key, cfg.Meta, cfg.Logger = name, key, meta, log.With("component", "gossip")
	return cfg
}

// closer releases a runtime.
type closer func()

// newRuntime builds the --runtime for node.
func (a *agentFlags) newRuntime(ctx context.Context, node, ip string, log *slog.Logger) (nodeagent.Runtime, closer, error) {
	if a.runtime == runtimeFake {
		return fake.New(fake.Config{Images: splitList(a.fakeImages), Unpullable: a.fakeUnpullable, IP: ip}), func() {}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rt, err := docker.New(cctx, docker.Config{Host: a.dockerHost, NodeName: node, Logger: log})
	if err != nil {
		return nil, nil, withFix(err, "start Docker, or run with --runtime fake (simulated) or, for a server, --no-agent")
	}
	return rt, func() { rt.Close() }, nil
}

// outboundIP is the local address this machine uses to reach server (an
// https URL); "" if it cannot tell.
func outboundIP(server string) string {
	host := server
	if i := strings.Index(host, "://"); i >= 0 {
		host = host[i+3:]
	}
	host = strings.TrimSuffix(strings.SplitN(host, "/", 2)[0], "/")
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		h, port = host, "443"
	}
	conn, err := net.Dial("udp", net.JoinHostPort(h, port))
	if err != nil {
		return ""
	}
	defer conn.Close()
	if ua, ok := conn.LocalAddr().(*net.UDPAddr); ok {
		return ua.IP.String()
	}
	return ""
}

// agentRun is one node agent with its gossip member, as run by "everynode
// agent" and inside "everynode server".
type agentRun struct {
	flags     *agentFlags
	node      string
	nodeIP    string
	nodeToken string // authorizes the API server at the log endpoint
	dataDir   string
	api       client.Interface
	rt        nodeagent.Runtime
	log       *slog.Logger
	logLn     net.Listener // the log endpoint's listener (listenLogs); run closes it
}

// listenLogs opens the log endpoint's listener.
func (a *agentFlags) listenLogs() (net.Listener, error) {
	ln, err := net.Listen("tcp", a.logListen)
	if err != nil {
		return nil, withFix(fmt.Errorf("cannot listen for the log endpoint on %s: %w", a.logListen, err), "choose a free --log-listen address (port 0 picks one)")
	}
	return ln, nil
}

// logAddr is the log endpoint's address as others reach it.
func logAddr(ln net.Listener, nodeIP string) string {
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return net.JoinHostPort(nodeIP, port)
}

// run runs the agent until ctx ends or it fails.
func (r *agentRun) run(ctx context.Context) error {
	defer r.logLn.Close()
	ag, err := nodeagent.New(nodeagent.Config{
		LogPort:  int32(r.logLn.Addr().(*net.TCPAddr).Port),
		NodeName: r.node, NodeIP: r.nodeIP, Client: r.api, Runtime: r.rt,
		Logger:  r.log.With("component", "agent"),
		DataDir: r.dataDir, Labels: r.flags.labelMap, Taints: r.flags.taintSet,
		ManifestDir: r.flags.manifestDir,
	})
	if err != nil {
		return withFix(err, "check the agent's flags")
	}
	if err := os.MkdirAll(r.dataDir, 0o700); err != nil {
		return withFix(fmt.Errorf("cannot create the agent data dir: %w", err), "check --data-dir")
	}
	hosts := []string{r.node}
	if r.nodeIP != "" {
		hosts = append(hosts, r.nodeIP)
	}
	tlsCfg, err := nodeagent.SelfSignedTLS(hosts...)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	logsDone := make(chan error, 1)
	go func() { logsDone <- ag.ServeLogs(runCtx, r.logLn, tlsCfg, nodeagent.LogAuthorizer(r.nodeToken)) }()
	err = ag.Run(runCtx)
	stop()
	if lerr := <-logsDone; lerr != nil && ctx.Err() == nil {
		r.log.Warn("log endpoint stopped", "err", lerr)
	}
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("agent stopped")
	}
	return err
}

// agentDataDir is where the local agent of a server keeps its state.
func agentDataDir(serverDataDir string) string { return filepath.Join(serverDataDir, "agent") }
