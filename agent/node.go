package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/images"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/nodeagent/runtime/docker"
	"github.com/everynode/everynode/nodeagent/runtime/fake"
)

// Runtime names for NodeOptions.Runtime.
const (
	RuntimeDocker = "docker"
	RuntimeFake   = "fake"
)

// DefaultLogListen is the log endpoint's address, kubelet's port.
const DefaultLogListen = ":10250"

// dockerConnectTimeout bounds connecting to the Docker Engine at start.
const dockerConnectTimeout = 10 * time.Second

// NodeOptions are a node's settings, the same for "everynode agent" and the
// local agent of a server.
type NodeOptions struct {
	// Name is the node name. Required.
	Name string
	// IP is reported for the node and its pods; empty: the caller's choice
	// (the address used to reach the server).
	IP string
	// Labels and Taints are set on the Node at registration.
	Labels map[string]string
	Taints []corev1.Taint
	// ManifestDir holds static pod manifests; empty: none.
	ManifestDir string
	// Runtime is RuntimeDocker (the default when empty) or RuntimeFake.
	Runtime string
	// FakeImages and FakeUnpullable configure RuntimeFake.
	FakeImages     []string
	FakeUnpullable string
	// DockerHost is RuntimeDocker's engine address; empty: DOCKER_HOST or
	// the local socket.
	DockerHost string
	// LogListen is the log endpoint's host:port; empty: DefaultLogListen.
	LogListen string
	// NoImagePeers turns off fetching image blobs from peers and serving
	// them to peers: every image comes from the servers (measurements).
	NoImagePeers bool
	// NodeStatusPeriod is how often the agent posts its Node status; 0:
	// nodeagent.DefaultNodeStatusPeriod (an agent with the wan gossip
	// profile gets WANNodeStatusPeriod, see GossipOptions.NodeStatusPeriod).
	NodeStatusPeriod time.Duration
}

// Node is a node's machine side, made before the API is reachable: its
// container runtime and its log endpoint's listener. Run runs the node
// agent on them; Close releases them when Run is never called.
type Node struct {
	opts    NodeOptions
	ip      string
	rt      nodeagent.Runtime
	closeRT func()
	logLn   net.Listener
	log     *slog.Logger
	// peerToken lets the node fetch image blobs from its peers and serve
	// its own (images.PeerToken of the cluster key); empty: neither.
	peerToken string
}

// NewNode builds the runtime of opts and opens the log endpoint's listener.
// ip is the node's address (opts.IP is ignored).
func NewNode(ctx context.Context, opts NodeOptions, ip string, log *slog.Logger) (*Node, error) {
	if opts.Name == "" {
		return nil, errors.New("agent: NodeOptions.Name is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Node{opts: opts, ip: ip, log: log}
	switch opts.Runtime {
	case RuntimeFake:
		n.rt, n.closeRT = fake.New(fake.Config{Images: opts.FakeImages, Unpullable: opts.FakeUnpullable, IP: ip}), func() {}
	case RuntimeDocker, "":
		cctx, cancel := context.WithTimeout(ctx, dockerConnectTimeout)
		rt, err := docker.New(cctx, docker.Config{Host: opts.DockerHost, NodeName: opts.Name, Logger: log})
		cancel()
		if err != nil {
			return nil, &Error{Part: PartRuntime, Err: err}
		}
		n.rt, n.closeRT = rt, func() { rt.Close() }
	default:
		return nil, fmt.Errorf("agent: unknown runtime %q (want %q or %q)", opts.Runtime, RuntimeDocker, RuntimeFake)
	}
	addr := opts.LogListen
	if addr == "" {
		addr = DefaultLogListen
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		n.closeRT()
		return nil, &Error{Part: PartLogListen, Err: fmt.Errorf("cannot listen for the log endpoint on %s: %w", addr, err)}
	}
	n.logLn = ln
	return n, nil
}

// Runtime is the node's container runtime.
func (n *Node) Runtime() nodeagent.Runtime { return n.rt }

// LogAddr is the log endpoint's address as others reach it: the node IP
// and the listener's port.
func (n *Node) LogAddr() string {
	_, port, _ := net.SplitHostPort(n.logLn.Addr().String())
	return net.JoinHostPort(n.ip, port)
}

// Close releases the runtime and the listener; idempotent. Run calls it.
func (n *Node) Close() {
	if n.logLn != nil {
		n.logLn.Close()
	}
	if n.closeRT != nil {
		n.closeRT()
		n.closeRT = nil
	}
}

// Run runs the node agent against api, and its log endpoint (authorizing
// the API server by nodeToken), with its state in dataDir, until ctx ends
// (nil) or the agent fails. It closes the node.
func (n *Node) Run(ctx context.Context, api client.Interface, nodeToken, dataDir string) error {
	defer n.Close()
	// Pods reach the API server where the agent does, and trust its CA.
	var apiServer string
	var clusterCA []byte
	if h, ok := api.(interface {
		Server() string
		CAPEM() []byte
	}); ok {
		apiServer, clusterCA = h.Server(), h.CAPEM()
	}
	ag, err := nodeagent.New(nodeagent.Config{
		APIServer: apiServer, ClusterCA: clusterCA,
		LogPort:  int32(n.logLn.Addr().(*net.TCPAddr).Port),
		NodeName: n.opts.Name, NodeIP: n.ip, Client: api, Runtime: n.rt,
		Logger:  n.log.With("component", "agent"),
		DataDir: dataDir, Labels: n.opts.Labels, Taints: n.opts.Taints,
		ManifestDir:      n.opts.ManifestDir,
		NodeStatusPeriod: n.opts.NodeStatusPeriod,
		Images:           n.imageFetcher(api, filepath.Join(dataDir, "images")),
		PeerBlobs:        n.peerBlobs(filepath.Join(dataDir, "images")),
	})
	if err != nil {
		return &Error{Part: PartConfig, Err: err}
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return &Error{Part: PartDataDir, Err: fmt.Errorf("cannot create the agent data dir: %w", err)}
	}
	hosts := []string{n.opts.Name}
	if n.ip != "" {
		hosts = append(hosts, n.ip)
	}
	tlsCfg, err := nodeagent.SelfSignedTLS(hosts...)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	logsDone := make(chan error, 1)
	go func() { logsDone <- ag.ServeLogs(runCtx, n.logLn, tlsCfg, nodeagent.LogAuthorizer(nodeToken)) }()
	err = ag.Run(runCtx)
	stop()
	if lerr := <-logsDone; lerr != nil && ctx.Err() == nil {
		n.log.Warn("log endpoint stopped", "err", lerr)
	}
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("agent stopped")
	}
	return err
}

// OutboundIP is the local address this machine uses to reach server (an
// https URL or host:port; no packet is sent); "" if it cannot tell.
func OutboundIP(server string) string {
	host := server
	if i := strings.Index(host, "://"); i >= 0 {
		host = host[i+3:]
	}
	host = strings.SplitN(host, "/", 2)[0]
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

// imageFetcher fetches images from the servers' store (and from peers,
// with a peer token) when the runtime can load tarballs (Docker; the fake
// runtime cannot) and api streams; nil otherwise.
func (n *Node) imageFetcher(api client.Interface, dir string) nodeagent.ImageFetcher {
	st, ok1 := api.(images.Streamer)
	ld, ok2 := n.rt.(images.Loader)
	if !ok1 || !ok2 {
		return nil
	}
	variant := ""
	if goruntime.GOARCH == "arm" {
		variant = "v7"
	}
	f := &images.Fetcher{API: st, Loader: ld, Dir: dir, OS: "linux", Arch: goruntime.GOARCH, Variant: variant,
		Log: n.log.With("component", "images"), Self: n.opts.Name}
	if n.peerToken != "" {
		// Peers' endpoints have self-signed certificates: what a peer
		// sends is trusted by its digest, which the servers gave.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // content verified by digest
		tr.Proxy = nil
		f.Peers, f.PeerToken = &http.Client{Transport: tr}, n.peerToken
	}
	return f
}

// peerBlobs serves the fetched blobs in dir to peers with the peer token;
// nil without one.
func (n *Node) peerBlobs(dir string) http.Handler {
	if n.peerToken == "" {
		return nil
	}
	return images.PeerHandler(dir, n.peerToken)
}
