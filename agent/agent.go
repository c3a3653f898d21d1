// Package agent is the node side's composition root: Start joins a
// cluster (the server's CA pinned by the join token, a per-node credential,
// the gossip key, all saved for restarts), builds the container runtime,
// the gossip member and the log endpoint, and runs the node agent
// (package nodeagent) until Close. Node is the part a server's local agent
// shares with it.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/images"
	"github.com/everynode/everynode/internal/exepages"
)

// DefaultGossipAddr is the gossip bind address of servers and agents:
// memberlist's usual port on every interface.
const DefaultGossipAddr = ":7946"

// RejoinInterval is how often an agent checks that it still gossips with a
// server, and joins the seeds again if not.
const RejoinInterval = 5 * time.Second

// leaveTimeout bounds the graceful leave announcement on stop.
const leaveTimeout = 3 * time.Second

// GossipOptions are a member's settings, the same for agents and servers.
type GossipOptions struct {
	// Addr is the bind address host:port (UDP and TCP); empty:
	// DefaultGossipAddr; port 0 picks a free port.
	Addr string
	// Profile is gossip.ProfileLAN (the default when empty), ProfileWAN or
	// ProfileLocal.
	Profile string
	// LeaveOnStop announces a graceful leave on Close (the Node goes
	// Ready=False); false: the others detect the stop as a failure.
	LeaveOnStop bool
	// Logger receives the member's log lines; nil: the owner's logger.
	Logger *slog.Logger
}

// WANNodeStatusPeriod is how often an agent with the wan gossip profile
// posts its Node status (kubelet's nodeStatusReportFrequency, 5 min): each
// post is a read and a write of the whole Node, about 7 KB over the link,
// which every 10 s would be most of an idle agent's traffic. Liveness does
// not depend on it: gossip and the agent's API connection decide when a
// node is unreachable (docs/edge.md, "Metered links").
const WANNodeStatusPeriod = 5 * time.Minute

// NodeStatusPeriod is the Node status period that suits the profile: 0
// (nodeagent.DefaultNodeStatusPeriod, 10 s) but WANNodeStatusPeriod for wan.
func (o GossipOptions) NodeStatusPeriod() time.Duration {
	if o.Profile == gossip.ProfileWAN {
		return WANNodeStatusPeriod
	}
	return 0
}

// APIPing is when the agent pings its silent API connection and how long it
// waits for the answer (client.Config.PingAfter, PingTimeout): zero
// (client.DefaultPingAfter and DefaultPingTimeout, 1 s each, like the
// server's own pings: a partitioned server is left in about 3 s) but 3 s
// and 2 s for wan, whose links are slow and metered and whose gossip takes
// about 38 s: a ping every second of silence would cost an idle agent
// about 35 B/s each way.
func (o GossipOptions) APIPing() (after, timeout time.Duration) {
	if o.Profile == gossip.ProfileWAN {
		return 3 * time.Second, 2 * time.Second
	}
	return 0, 0
}

// MemberConfig is the gossip.Config of these options for a member named
// name. advertiseIP is advertised when Addr binds every interface.
func (o GossipOptions) MemberConfig(name string, key []byte, meta gossip.Meta, advertiseIP string, log *slog.Logger) gossip.Config {
	cfg := gossip.Config{BindAddr: o.Addr, Profile: o.Profile, Name: name, Key: key, Meta: meta}
	if cfg.BindAddr == "" {
		cfg.BindAddr = DefaultGossipAddr
	}
	if host, _, _ := net.SplitHostPort(cfg.BindAddr); advertiseIP != "" {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			cfg.AdvertiseAddr = advertiseIP
		}
	}
	cfg.Logger = o.Logger
	if cfg.Logger == nil && log != nil {
		cfg.Logger = log.With("component", "gossip")
	}
	return cfg
}

// LeaveAndClose announces a graceful leave if LeaveOnStop, then closes m.
func (o GossipOptions) LeaveAndClose(m *gossip.Member, log *slog.Logger) {
	if o.LeaveOnStop {
		if err := m.Leave(leaveTimeout); err != nil {
			log.Warn("gossip leave failed", "err", err)
		}
	}
	if err := m.Close(); err != nil {
		log.Warn("gossip close failed", "err", err)
	}
}

// Config configures an agent.
type Config struct {
	// Server is the API server's https URL. Required.
	Server string
	// Token is the join token (the server's DATA_DIR/join-token). Required.
	Token string
	// DataDir keeps the node credential and the agent's state. Required.
	DataDir string
	// Node are the node's settings; Node.Name is required. Node.IP empty
	// means the address this machine uses to reach Server.
	Node NodeOptions
	// Gossip are the member's settings.
	Gossip GossipOptions
	// UserAgent is sent with every API request.
	UserAgent string
	// Logger receives everything; nil discards.
	Logger *slog.Logger
}

// Agent is a running node agent with its gossip member.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	offline bool
	mu      sync.Mutex     // guards member while Start sets it
	member  *gossip.Member // nil until Start has made it
	api     *client.HTTP

	stop    context.CancelFunc
	wg      sync.WaitGroup
	done    chan struct{} // closed when the node agent returned
	runErr  error         // its result, set before done closes
	failed  chan error    // the node agent's failure, if it stopped unasked
	once    sync.Once
	closeEr error
}

// Start joins the cluster and starts the node agent:
//  1. parse the join token, fetch and pin the server's CA,
//  2. exchange the join secret for a node credential (or, with the server
//     unreachable, reuse the one saved in DATA_DIR/credentials.json),
//  3. build the runtime and the log endpoint, start a gossip member and
//     join the servers' members (retried in the background),
//  4. run the node agent with the node credential.
//
// Close stops the agent, leaves the gossip pool (if Gossip.LeaveOnStop) and
// closes the member. A failed Start leaves nothing running.
func Start(ctx context.Context, cfg Config) (_ *Agent, err error) {
	if cfg.Server == "" || cfg.Token == "" || cfg.DataDir == "" || cfg.Node.Name == "" {
		return nil, errors.New("agent: Config.Server, Token, DataDir and Node.Name are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	// The node credential and the pods' state are secret
	// (docs/security.md, "Local users"): an existing data dir open to other
	// users is restricted to its owner; a new one is made 0700.
	if fi, err := os.Stat(dataDir); err == nil && fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dataDir, 0o700); err != nil {
			return nil, &Error{Part: PartDataDir, Err: fmt.Errorf("restrict the data dir to its owner: %w", err)}
		}
		log.Warn("data dir was open to other users; restricted it to its owner", "dir", dataDir,
			"mode", fmt.Sprintf("%04o", fi.Mode().Perm()), "now", "0700")
	}
	node := cfg.Node.Name
	creds, offline, err := obtainCredentials(ctx, cfg.Server, cfg.Token, node, dataDir)
	if err != nil {
		return nil, err
	}
	switch {
	case offline:
		log.Warn("the server is unreachable: starting offline from saved credentials; pods kept on disk keep running", "server", cfg.Server)
	case creds.kept:
		log.Warn("the server refused the join token (rotated since this node joined?); using the node credential saved by the last join", "server", cfg.Server, "node", node)
	default:
		log.Info("joined the cluster", "server", cfg.Server, "node", node, "seeds", creds.GossipSeeds)
	}
	nodeIP := cfg.Node.IP
	if nodeIP == "" {
		nodeIP = OutboundIP(cfg.Server)
	}

	a := &Agent{cfg: cfg, log: log, offline: offline, done: make(chan struct{}), failed: make(chan error, 1)}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	// Every server announces its API URL in gossip: when cfg.Server dies
	// the client fails over to another, and one gossip declares dead is
	// tried last (docs/ha.md).
	servers := func() []string {
		if m := a.memberOf(); m != nil {
			return gossip.ServerAPIs(m.Members())
		}
		return nil
	}
	down := func() []string {
		if m := a.memberOf(); m != nil {
			return gossip.DeadServerAPIs(m.Members())
		}
		return nil
	}
	pingAfter, pingTimeout := cfg.Gossip.APIPing()
	if a.api, err = client.NewHTTP(client.Config{Server: cfg.Server, CAPEM: []byte(creds.CAPEM), Token: creds.NodeToken,
		UserAgent: cfg.UserAgent, Logger: log.With("component", "client"), Servers: servers, Down: down,
		PingAfter: pingAfter, PingTimeout: pingTimeout, Protobuf: true}); err != nil {
		return nil, err
	}
	nodeOpts := cfg.Node
	if nodeOpts.NodeStatusPeriod == 0 {
		nodeOpts.NodeStatusPeriod = cfg.Gossip.NodeStatusPeriod()
	}
	n, err := NewNode(ctx, nodeOpts, nodeIP, log)
	if err != nil {
		return nil, err
	}
	if !cfg.Node.NoImagePeers {
		n.peerToken = images.PeerToken(creds.GossipKey)
	}
	m, err := gossip.New(cfg.Gossip.MemberConfig(node, creds.GossipKey, gossip.Meta{Role: gossip.RoleAgent, AgentAddr: n.LogAddr()}, nodeIP, log))
	if err != nil {
		n.Close()
		return nil, &Error{Part: PartGossip, Err: fmt.Errorf("cannot start gossip: %w", err)}
	}
	a.mu.Lock()
	a.member = m
	a.mu.Unlock()

	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	a.stop = stop
	a.wg.Add(3)
	go func() {
		defer a.wg.Done()
		// Start-up touched most of the executable; only the pages the
		// agent runs again stay mapped (docs/agent.md, "Footprint").
		exepages.ReleaseStartup(runCtx, exepages.Settle, log)
	}()
	go func() {
		defer a.wg.Done()
		a.member.KeepJoined(runCtx, func() []string { return mergeSeeds(creds.GossipSeeds, gossip.ServerAddrs(a.member.Members())) }, RejoinInterval, log)
	}()
	go func() {
		defer a.wg.Done()
		defer close(a.done)
		a.runErr = n.Run(runCtx, a.api, creds.NodeToken, dataDir)
		if runCtx.Err() == nil {
			err := a.runErr
			if err == nil {
				err = errors.New("the node agent returned without being asked to stop")
			}
			a.failed <- err
		}
	}()
	return a, nil
}

// memberOf is the gossip member, nil before Start has made it.
func (a *Agent) memberOf() *gossip.Member {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.member
}

// APIServer is the API server the agent's requests go to now (another
// than --server after a failover).
func (a *Agent) APIServer() string { return a.api.Current() }

// Offline reports whether the agent started from saved credentials
// because the server was unreachable.
func (a *Agent) Offline() bool { return a.offline }

// GossipAddr is the member's gossip address.
func (a *Agent) GossipAddr() string { return a.member.LocalAddr() }

// Err delivers the node agent's failure if it stops without Close.
func (a *Agent) Err() <-chan error { return a.failed }

// Close stops the node agent and its member; idempotent. It returns the
// node agent's failure, if any.
func (a *Agent) Close() error {
	a.once.Do(func() {
		if a.stop != nil {
			a.stop()
			a.wg.Wait()
			if a.runErr != nil && !errors.Is(a.runErr, context.Canceled) {
				a.closeEr = a.runErr
			}
		}
		if a.member != nil {
			a.cfg.Gossip.LeaveAndClose(a.member, a.log)
		}
		if a.api != nil {
			a.api.Close()
		}
		if a.stop != nil {
			a.log.Info("agent stopped", "node", a.cfg.Node.Name)
		}
	})
	return a.closeEr
}

// Run starts the agent and runs it until ctx ends (then it returns nil
// after Close) or the node agent fails.
func Run(ctx context.Context, cfg Config) error {
	a, err := Start(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	select {
	case <-ctx.Done():
		return a.Close()
	case err := <-a.Err():
		a.Close()
		return err
	}
}

// mergeSeeds returns a followed by the elements of b not in a.
func mergeSeeds(a, b []string) []string {
	out := append([]string(nil), a...)
	for _, s := range b {
		found := false
		for _, x := range out {
			found = found || x == s
		}
		if !found {
			out = append(out, s)
		}
	}
	return out
}
