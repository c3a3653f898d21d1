// Package server is everynode's composition root: Start assembles one
// server — the cluster's key material, the store (embedded etcd or an
// external one), the gossip member, the API server, the leader-elected
// controllers and, optionally, a local node agent — and Close takes it
// down in order. The CLI's "everynode server", the benchmark and the
// integration tests all start servers through it; it is the only package
// that opens the store and builds the API server and the controllers.
package server

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

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller"
	"github.com/everynode/everynode/controller/daemonset"
	"github.com/everynode/everynode/controller/leader"
	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/internal/exepages"
	"github.com/everynode/everynode/nodeagent/runtime/docker"
	"github.com/everynode/everynode/store"
)

const (
	// DefaultListen is the API address: loopback only until the user opts
	// into exposing it; 6443 is the Kubernetes API port kubectl users expect.
	DefaultListen = "127.0.0.1:6443"
	// AdminKubeconfigFile is written into the data dir once the API answers.
	AdminKubeconfigFile = "admin.kubeconfig"
	// DefaultEventTTL is how long Events are kept after their last update
	// when Config.EventTTL is 0.
	DefaultEventTTL = store.DefaultEventTTL
	// DefaultUnreachableGrace is how long a node must have been NotReady or
	// Unknown before a DaemonSet rollout sets it aside, when
	// Config.UnreachableGrace is 0 (docs/rollouts.md §7).
	DefaultUnreachableGrace = daemonset.DefaultUnreachableGrace
	// DefaultSnapshotRetention is how many scheduled snapshots are kept
	// when Config.SnapshotRetention is 0 (k3s keeps 5).
	DefaultSnapshotRetention = 5
	// readyTimeout bounds the wait for the API's /readyz after starting it.
	readyTimeout = 60 * time.Second
	// readyPoll is the interval between /readyz probes while starting.
	readyPoll = 50 * time.Millisecond
)

// namespacesAtStart exist in every cluster, as in Kubernetes.
var namespacesAtStart = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// Config configures a server. Only DataDir is required.
type Config struct {
	// DataDir holds the key material, etcd's data (when embedded), the
	// leader-election identity, admin.kubeconfig and the local agent's state.
	DataDir string
	// Listen is the API address host:port; empty: DefaultListen; port 0
	// picks a free port (see Addr).
	Listen string
	// EtcdEndpoints are an external etcd's client URLs; empty embeds etcd
	// in DataDir.
	EtcdEndpoints []string
	// EtcdClientURL is the unix socket the embedded etcd serves other
	// clients on, unix:///absolute/path, in a directory only the server's
	// user can enter (other servers of that user can share the etcd
	// through their EtcdEndpoints); empty: DataDir/run/etcd.sock
	// (store.SocketURL). etcd never listens on TCP.
	EtcdClientURL string
	// ClusterInit starts the embedded etcd as the first member of a
	// cluster of servers, with a mutual-TLS peer listener (docs/ha.md).
	ClusterInit bool
	// JoinURL, with JoinToken (the cluster's whole join token), joins this
	// server to the cluster of the server at JoinURL: it receives the key
	// material and becomes an etcd member. Both are ignored once the data
	// dir is initialised.
	JoinURL, JoinToken string
	// AdvertiseAddress is the IP peers and clients reach this server on;
	// empty: the address on the route to JoinURL, else the node IP.
	AdvertiseAddress string
	// PeerPort is the etcd peer port; 0: DefaultPeerPort.
	PeerPort int
	// ServerName is the server's etcd member name; empty: the local
	// agent's node name, else the host name.
	ServerName string
	// SnapshotInterval, when positive, saves an etcd snapshot into
	// DataDir/snapshots that often; SnapshotRetention scheduled snapshots
	// are kept (0: DefaultSnapshotRetention).
	SnapshotInterval  time.Duration
	SnapshotRetention int
	// TLSSANs are extra host names or IPs for the serving certificate.
	TLSSANs []string
	// EventTTL is how long Events are kept; 0: store.DefaultEventTTL.
	EventTTL time.Duration
	// CompactInterval is etcd's compaction period; 0: the store's
	// default, negative: never (tests).
	CompactInterval time.Duration
	// AuditLog, if set, is the file of the API's audit log (one
	// audit.k8s.io/v1 Event per write and per denied request), rotated at
	// AuditLogMaxSize megabytes (0: DefaultAuditLogMaxSize), keeping
	// AuditLogMaxBackups rotated files (0 keeps all).
	AuditLog           string
	AuditLogMaxSize    int
	AuditLogMaxBackups int
	// Logger receives everything; nil discards.
	Logger *slog.Logger

	// Gossip are the server member's settings.
	Gossip agent.GossipOptions
	// GossipName names the server's member; empty: the local node's name,
	// or everynode-server-<host>-<random> without a local agent.
	GossipName string
	// Agent are the local node agent's settings; nil runs none.
	Agent *agent.NodeOptions
	// UserAgent is the local agent's HTTP user agent.
	UserAgent string

	// Membership, if set, replaces gossip as the controllers' view of which
	// nodes are alive, and no gossip member runs (tests and the benchmark
	// without gossip set nodes alive themselves). Like gossip, it is
	// corroborated by the nodes' streams to the API (Server.Membership).
	Membership nodelifecycle.Membership
	// Authenticator, if set, is asked about bearer tokens the cluster's own
	// credentials do not know (tests' token tables).
	Authenticator apiserver.Authenticator
	// NoControllers starts no controllers (StartControllers starts them).
	NoControllers bool
	// UnreachableGrace is how long a node must have been NotReady or
	// Unknown before a DaemonSet rollout sets it aside; 0 means
	// daemonset.DefaultUnreachableGrace (docs/rollouts.md §7). Tests and
	// the benchmark shorten it.
	UnreachableGrace time.Duration
	// OrphanQuarantine is how long a pod's Node must have been gone before
	// pod GC deletes the pod; 0 means garbagecollector.DefaultOrphanQuarantine
	// (40 s, Kubernetes'). Tests shorten it.
	OrphanQuarantine time.Duration
	// StreamPingTimeout, when > 0, is how long the API waits for the
	// answer to an HTTP/2 ping before it closes the connection, instead of
	// the gossip profile's (1 s; 10 s with wan). The benchmark, whose
	// simulated agents share a connection per process, lengthens it.
	StreamPingTimeout time.Duration
	// MemoryLimit, when positive, is the process's soft memory limit in
	// bytes (runtime/debug.SetMemoryLimit; it overrides GOMEMLIMIT); 0
	// leaves the runtime's own. Close puts back the limit Start found.
	MemoryLimit int64
}

// Server is a running server.
type Server struct {
	cfg        Config
	log        *slog.Logger
	dataDir    string
	listenHost string
	kubeconfig string
	url        string
	addr       net.Addr
	// advertiseURL is the API URL other machines use, announced in
	// gossip: the advertise address of a clustered server, else url.
	advertiseURL string
	identity     string
	nodeIP       string

	cluster *pki.Cluster
	members *etcdMembers // nil unless the embedded etcd is clustered
	audit   *auditFile   // nil without Config.AuditLog
	ln      net.Listener // until the API serves on it
	node    *agent.Node  // the local agent's runtime, until it runs
	st      *store.Store
	member  *gossip.Member
	ms      nodelifecycle.Membership
	// connected: the nodes holding a stream to this server's API.
	connected *apiserver.ConnectedNodes
	// conns: the nodes connected to this server or another (connections.go).
	conns *clusterConnections

	api   *apiserver.Server
	local client.Interface

	stopAPI context.CancelFunc
	apiDone chan struct{}
	apiErr  error

	stopBG context.CancelFunc // gossip membership, server peers, the store watch
	bgWG   sync.WaitGroup

	ctrlMu   sync.Mutex
	stopCtrl context.CancelFunc
	ctrlDone chan struct{}

	agentAPI  *client.HTTP
	stopAgent context.CancelFunc
	agentDone chan struct{}
	agentErr  error

	mem memoryLimiter

	failed    chan error
	closeOnce sync.Once
	closeErr  error
}

// Start starts a server, in this order:
//  1. load or create the cluster's key material (pki.Load),
//  2. listen on Listen (so the URL with the real port is known), start the
//     local agent's runtime and log endpoint unless Agent is nil,
//  3. open the store (embedded etcd, or EtcdEndpoints),
//  4. start the gossip member (unless Membership is set),
//  5. build the API server (node credentials restricted by NodeRestriction,
//     POST /everynode/v1/join enabled), make sure the standard namespaces
//     exist, serve over TLS,
//  6. once /readyz answers on the real port, write admin.kubeconfig,
//  7. campaign for the controllers' leadership (etcd election) and run the
//     controllers while leading, fed by the gossip membership,
//  8. run the local agent against the server's own URL with its node token.
//
// Close undoes it in reverse: stop the agent, stop the controllers, leave
// the gossip pool, close the member, stop the API, close the store. A
// failed Start has released everything it started. Err reports a failure
// of the embedded etcd, the API or the local agent after Start.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("server: Config.DataDir is required")
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	s := &Server{cfg: cfg, log: cfg.Logger, failed: make(chan error, 1)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.dataDir, err = filepath.Abs(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := privateDir(s.dataDir, s.log); err != nil {
		return nil, &Error{Part: PartDataDir, Err: err}
	}
	s.kubeconfig = filepath.Join(s.dataDir, AdminKubeconfigFile)
	// A kubeconfig from an earlier run names an old port; nobody may use it
	// before this run has written the right one.
	if err := os.Remove(s.kubeconfig); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, &Error{Part: PartDataDir, Err: fmt.Errorf("cannot remove stale %s: %w", s.kubeconfig, err)}
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, &Error{Part: PartListen, Err: fmt.Errorf("invalid listen address %q: %w", cfg.Listen, err)}
	}
	s.listenHost = host
	sans := append([]string(nil), cfg.TLSSANs...)
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		sans = append(sans, host)
	}
	peer, adv, mem, err := s.clusterPeer(ctx)
	if err != nil {
		return nil, err
	}
	if adv != "" {
		sans = append(sans, adv)
	}
	sans = append(sans, s.bridgeSANs(ctx, cfg, host)...)
	if s.cluster, err = pki.Load(s.dataDir, sans...); err != nil {
		return nil, &Error{Part: PartDataDir, Err: err}
	}
	if peer != nil {
		if peer.CertFile, peer.KeyFile, err = pki.PeerCert(s.dataDir, adv); err != nil {
			return nil, &Error{Part: PartDataDir, Err: err}
		}
		peer.CAFile = filepath.Join(s.dataDir, pki.CACertFile)
	}
	if s.identity, err = serverIdentity(s.dataDir); err != nil {
		return nil, &Error{Part: PartDataDir, Err: err}
	}

	if s.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, &Error{Part: PartListen, Err: fmt.Errorf("cannot listen on %s: %w", cfg.Listen, err)}
	}
	s.addr = s.ln.Addr()
	s.url = serverURL(s.addr, host)
	s.advertiseURL = s.url
	if adv != "" {
		_, port, _ := net.SplitHostPort(s.addr.String())
		s.advertiseURL = "https://" + net.JoinHostPort(adv, port)
	}
	if s.nodeIP = serverNodeIP(host); cfg.Agent != nil && cfg.Agent.IP != "" {
		s.nodeIP = cfg.Agent.IP
	}
	if cfg.Agent != nil {
		if s.node, err = agent.NewNode(ctx, *cfg.Agent, s.nodeIP, s.log); err != nil {
			return nil, err
		}
	}

	if s.st, err = store.Open(ctx, store.Config{DataDir: s.dataDir, Endpoints: cfg.EtcdEndpoints, ClientURL: cfg.EtcdClientURL,
		EventTTL: cfg.EventTTL, CompactInterval: cfg.CompactInterval, Logger: s.log, Peer: peer,
		EncryptionKeyFile: filepath.Join(s.dataDir, store.EncryptionKeyFile)}); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &Error{Part: PartStore, Err: fmt.Errorf("cannot open the store: %w", err)}
	}
	if mem != nil {
		if err := writeMember(s.dataDir, mem); err != nil {
			return nil, &Error{Part: PartDataDir, Err: err}
		}
		s.members = &etcdMembers{c: s.st.Client(), dataDir: s.dataDir}
		s.log.Info("embedded etcd cluster member", "name", mem.Name, "peer", mem.PeerURL)
	}
	bgCtx, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	s.stopBG = stopBG
	s.mem.start(cfg.MemoryLimit, s.log)
	s.goBG(func() {
		select {
		case err := <-s.st.Err():
			s.fail(&Error{Part: PartEtcd, Err: fmt.Errorf("embedded etcd stopped: %v", err)})
		case <-bgCtx.Done():
		}
	})

	if cfg.SnapshotInterval > 0 && len(cfg.EtcdEndpoints) == 0 {
		retain := cfg.SnapshotRetention
		if retain <= 0 {
			retain = DefaultSnapshotRetention
		}
		s.goBG(func() { s.snapshotLoop(bgCtx, cfg.SnapshotInterval, retain) })
	}

	s.ms = cfg.Membership
	if s.ms == nil {
		if err := s.startGossip(bgCtx); err != nil {
			return nil, err
		}
	}
	// Gossip is a hint: the controllers see a node as gone only once its
	// own authenticated stream to this server has ended too
	// (docs/security.md, "Gossip is a hint").
	s.connected = apiserver.NewConnectedNodes(0)
	if s.conns, err = newClusterConnections(s.connected, s.st.Client(), s.url, s.cluster.CAPEM(), s.cluster.AdminToken(), s.log.With("component", "controller")); err != nil {
		return nil, &Error{Part: PartDataDir, Err: err}
	}
	corr := nodelifecycle.Corroborate(s.ms, s.conns)
	s.ms = corr
	s.goBG(func() { corr.Run(bgCtx) })

	if err := s.startAPI(ctx); err != nil {
		return nil, err
	}
	if err := pki.WriteKubeconfig(s.kubeconfig, s.url, s.cluster.CAPEM(), s.cluster.AdminToken(), "everynode"); err != nil {
		return nil, &Error{Part: PartDataDir, Err: err}
	}
	gossipAddr := ""
	if s.member != nil {
		gossipAddr = s.member.LocalAddr()
	}
	s.log.Info("API ready", "url", s.url, "kubeconfig", s.kubeconfig, "gossip", gossipAddr)

	if !cfg.NoControllers {
		s.StartControllers()
	}
	if cfg.Agent == nil {
		s.log.Info("no local agent")
	} else {
		if err := s.startAgent(); err != nil {
			return nil, err
		}
		if s.members != nil && cfg.Agent.Name == s.serverName() {
			s.goBG(func() { s.labelServerNode(bgCtx, cfg.Agent.Name) })
		}
	}
	// Start-up touched most of the executable (its package initializers);
	// only the pages the server runs again stay mapped (docs/cli.md,
	// "Server memory").
	s.goBG(func() { exepages.ReleaseStartup(bgCtx, exepages.Settle, s.log) })
	return s, nil
}

// goBG runs f in the background group Close stops after the controllers.
func (s *Server) goBG(f func()) {
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		f()
	}()
}

// fail reports the first failure on Err.
func (s *Server) fail(err error) {
	select {
	case s.failed <- err:
	default:
	}
}

// startGossip starts the server's member, the controllers' gossip
// membership over it and the publication of its address to other servers.
func (s *Server) startGossip(ctx context.Context) error {
	name := s.cfg.GossipName
	meta := gossip.Meta{Role: gossip.RoleServer, APIAddr: s.advertiseURL}
	switch {
	case name != "":
	case s.cfg.Agent != nil:
		name = s.cfg.Agent.Name
	default:
		name = "everynode-server-" + randomSuffix(hostnameOr("server"))
	}
	if s.node != nil {
		meta.AgentAddr = s.node.LogAddr()
	}
	m, err := gossip.New(s.cfg.Gossip.MemberConfig(name, s.cluster.GossipKey(), meta, s.nodeIP, s.log))
	if err != nil {
		return &Error{Part: PartGossip, Err: fmt.Errorf("cannot start gossip: %w", err)}
	}
	s.member = m
	gm := nodelifecycle.NewGossipMembership(m)
	s.ms = gm
	s.goBG(func() { gm.Run(ctx) })
	s.goBG(func() { joinServerPeers(ctx, s.st.Client(), m, name, s.url, s.log.With("component", "gossip")) })
	return nil
}

// StartControllers campaigns for the controllers' leadership and runs
// them while leading, unless they run already. Start calls it unless
// Config.NoControllers.
func (s *Server) StartControllers() {
	s.ctrlMu.Lock()
	defer s.ctrlMu.Unlock()
	if s.stopCtrl != nil {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.stopCtrl, s.ctrlDone = stop, done
	ctrlLog := s.log.With("component", "controller")
	go func() {
		defer close(done)
		err := leader.Run(ctx, leader.Config{Client: s.st.Client(), Identity: s.identity, Logger: ctrlLog, TTL: s.leaderTTL()}, func(ctx context.Context) {
			ctrlLog.Info("leading: controllers start", "identity", s.identity)
			if err := controller.RunAll(ctx, controller.Config{Client: s.local, Membership: s.ms, Logger: ctrlLog,
				UnreachableGrace: s.cfg.UnreachableGrace, OrphanQuarantine: s.cfg.OrphanQuarantine}); err != nil && ctx.Err() == nil {
				ctrlLog.Error("controllers stopped", "err", err)
			}
		})
		if err != nil && ctx.Err() == nil {
			ctrlLog.Error("leader election", "err", err)
		}
	}()
}

// StopControllers stops the controllers (and the campaign) and waits for
// them, as a server that stops or loses leadership does.
func (s *Server) StopControllers() {
	s.ctrlMu.Lock()
	stop, done := s.stopCtrl, s.ctrlDone
	s.stopCtrl, s.ctrlDone = nil, nil
	s.ctrlMu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// startAgent runs the local agent: an ordinary node credential against the
// server's own URL, so NodeRestriction applies to it as to any agent. Its
// liveness in gossip is the server's member, named after the node.
func (s *Server) startAgent() error {
	name := s.cfg.Agent.Name
	token := s.cluster.NodeToken(name)
	h, err := client.NewHTTP(client.Config{Server: s.url, CAPEM: s.cluster.CAPEM(), Token: token,
		UserAgent: s.cfg.UserAgent, Logger: s.log.With("component", "client"), Protobuf: true})
	if err != nil {
		return err
	}
	s.agentAPI = h
	ctx, stop := context.WithCancel(context.Background())
	s.stopAgent, s.agentDone = stop, make(chan struct{})
	node := s.node
	s.node = nil // Run owns it now
	go func() {
		defer close(s.agentDone)
		s.agentErr = node.Run(ctx, h, token, filepath.Join(s.dataDir, "agent"))
		if ctx.Err() == nil {
			err := s.agentErr
			if err == nil {
				err = errors.New("it returned without being asked to stop")
			}
			s.fail(&Error{Part: PartAgent, Err: fmt.Errorf("local agent failed: %w", err)})
		}
	}()
	s.log.Info("local agent started", "node", name, "runtime", s.cfg.Agent.Runtime)
	return nil
}

// Close stops the server in order — the local agent, the controllers,
// gossip (leaving the pool if Gossip.LeaveOnStop), the API, the store —
// and waits for every goroutine Start began. It is idempotent and returns
// the API's or the store's failure to stop, if any.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.stopAgent != nil {
			s.stopAgent()
			<-s.agentDone
			if s.agentErr != nil {
				s.log.Warn("local agent stopped with an error", "err", s.agentErr)
			}
			s.agentAPI.Close()
		} else if s.agentAPI != nil {
			s.agentAPI.Close()
		}
		if s.node != nil {
			s.node.Close()
		}
		s.StopControllers()
		if s.stopBG != nil {
			s.stopBG()
			s.bgWG.Wait()
		}
		s.mem.restore()
		if s.conns != nil {
			s.conns.close()
		}
		if s.member != nil {
			s.cfg.Gossip.LeaveAndClose(s.member, s.log)
		}
		if s.stopAPI != nil {
			s.stopAPI()
			<-s.apiDone
			if s.apiErr != nil && !errors.Is(s.apiErr, context.Canceled) {
				errs = append(errs, fmt.Errorf("API server: %w", s.apiErr))
			}
		}
		if s.api != nil {
			s.api.Stop()
		}
		if s.ln != nil {
			s.ln.Close()
		}
		if s.audit != nil {
			if err := s.audit.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close audit log: %w", err))
			}
		}
		if s.st != nil {
			if err := s.st.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close store: %w", err))
			}
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// Err delivers the first failure of the embedded etcd, the API or the
// local agent after Start; the server should then be closed.
func (s *Server) Err() <-chan error { return s.failed }

// Addr is the API's listening address (with the real port).
func (s *Server) Addr() net.Addr { return s.addr }

// URL is the API's https URL: the real port, and the listen host unless
// that is a wildcard, in which case loopback.
func (s *Server) URL() string { return s.url }

// JoinURL is the address to show for joining agents from other machines:
// URL, except that a wildcard listener is named by the host name (which
// the serving certificate carries).
func (s *Server) JoinURL() string {
	if ip := net.ParseIP(s.listenHost); s.listenHost != "" && (ip == nil || !ip.IsUnspecified()) {
		return s.url
	}
	name, err := os.Hostname()
	if err != nil || name == "" {
		return s.url
	}
	_, port, _ := net.SplitHostPort(s.addr.String())
	return "https://" + net.JoinHostPort(name, port)
}

// DataDir is the absolute data dir.
func (s *Server) DataDir() string { return s.dataDir }

// Kubeconfig is the path of admin.kubeconfig.
func (s *Server) Kubeconfig() string { return s.kubeconfig }

// JoinTokenFile is the path of the join token agents need.
func (s *Server) JoinTokenFile() string { return filepath.Join(s.dataDir, pki.JoinTokenFile) }

// CAPEM is the cluster CA (PEM) that signed the serving certificate.
func (s *Server) CAPEM() []byte { return s.cluster.CAPEM() }

// AdminToken is the cluster administrator's bearer token.
func (s *Server) AdminToken() string { return s.cluster.AdminToken() }

// JoinToken is the token agents join with.
func (s *Server) JoinToken() string { return s.cluster.JoinToken() }

// NodeToken is node's bearer token, as the join hands it out.
func (s *Server) NodeToken(node string) string { return s.cluster.NodeToken(node) }

// GossipKey is the cluster's gossip encryption key.
func (s *Server) GossipKey() []byte { return s.cluster.GossipKey() }

// Admin is an in-process client with the administrator's rights (no HTTP).
func (s *Server) Admin() client.Interface { return s.local }

// Etcd is the store's etcd client (measurements read and write it
// directly).
func (s *Server) Etcd() *clientv3.Client { return s.st.Client() }

// EtcdRangesServed is how many ranges the etcd servers embedded in this
// process have served (store.RangesServed), for the benchmark.
func EtcdRangesServed() (int64, bool) { return store.RangesServed() }

// VerifyCache compares the store's watch caches with etcd.
func (s *Server) VerifyCache(ctx context.Context) error { return s.st.VerifyCache(ctx) }

// Member is the server's gossip member; nil with Config.Membership.
func (s *Server) Member() *gossip.Member { return s.member }

// Membership is the controllers' view of which nodes are alive.
func (s *Server) Membership() nodelifecycle.Membership { return s.ms }

// GossipSeeds are the addresses agents join: the server's member's.
func (s *Server) GossipSeeds() []string {
	if s.member == nil {
		return nil
	}
	return []string{s.member.LocalAddr()}
}

// serverNodeIP is the local node's IP: the listen host when it is a
// specific IP, else the address of the interface with the default route
// (no packet is sent), else loopback.
func serverNodeIP(listenHost string) string {
	if ip := net.ParseIP(listenHost); ip != nil && !ip.IsUnspecified() {
		return ip.String()
	}
	if ip := agent.OutboundIP("https://192.0.2.1:443"); ip != "" {
		return ip
	}
	return "127.0.0.1"
}

// bridgeTimeout bounds asking the local Docker engine for its bridge.
const bridgeTimeout = 5 * time.Second

// bridgeSANs are the serving certificate's names for the pods of this
// host's agents: a server listening on loopback (or on every address) is
// reached by an agent of this host on loopback, and that agent forwards it
// to the pods without host networking at the Docker bridge's gateway
// (nodeagent's API forwarder), so that address must be in the certificate
// as the kubernetes Service's IP is on Kubernetes. None when the server
// listens on another address, its local agent is not on Docker, or no
// engine answers.
func (s *Server) bridgeSANs(ctx context.Context, cfg Config, listenHost string) []string {
	ip := net.ParseIP(listenHost)
	if listenHost != "" && listenHost != "localhost" && (ip == nil || !(ip.IsLoopback() || ip.IsUnspecified())) {
		return nil
	}
	var dockerHost string
	if cfg.Agent != nil {
		if cfg.Agent.Runtime != "" && cfg.Agent.Runtime != agent.RuntimeDocker {
			return nil
		}
		dockerHost = cfg.Agent.DockerHost
	}
	bctx, cancel := context.WithTimeout(ctx, bridgeTimeout)
	defer cancel()
	gw, err := docker.BridgeGateway(bctx, dockerHost)
	if err != nil {
		s.log.Debug("no Docker bridge address for the serving certificate", "err", err)
		return nil
	}
	return []string{gw.String()}
}

// hostnameOr is the lower-cased host name, or def.
func hostnameOr(def string) string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return def
	}
	return strings.ToLower(h)
}

// privateDir creates dir with mode 0700, or tightens an existing one to
// 0700 (logging it): everything in a data dir but the *.crt files is
// secret (docs/security.md, "Local users").
func privateDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("restrict the data dir to its owner: %w", err)
		}
		log.Warn("data dir was open to other users; restricted it to its owner", "dir", dir, "mode", fmt.Sprintf("%04o", perm), "now", "0700")
	}
	return nil
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

// streamPing paces the API's HTTP/2 pings like the gossip profile's failure
// detection: 1 s of silence and 1 s to answer find a cut link in about 2 s
// (lan, local); with wan, whose gossip takes about 38 s, 10 s and 10 s keep
// an idle agent's link quiet (docs/security.md, "Gossip is a hint").
// A timeout > 0 replaces the profile's.
func streamPing(profile string, timeout time.Duration) apiserver.StreamPing {
	p := apiserver.StreamPing{}
	if profile == gossip.ProfileWAN {
		p = apiserver.StreamPing{Interval: 10 * time.Second, Timeout: 10 * time.Second}
	}
	if timeout > 0 {
		p.Timeout = timeout
	}
	return p
}
