package gossip

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Profiles name a set of failure-detector timings (see the package doc for the arithmetic).
const (
	// ProfileLAN detects a crashed member in about 1.4 s at 3 members and 2.2–2.5 s at 100
	// (measured), without false positives from a loaded machine's scheduling delays.
	ProfileLAN = "lan"
	// ProfileWAN is memberlist's DefaultWANConfig timing, for lossy, high-latency edge links.
	ProfileWAN = "wan"
	// ProfileLocal is for members on one machine (tests, demos): fast gossip, patient probes.
	ProfileLocal = "local"
)

// wanPushPullInterval is ProfileWAN's full state exchange period.
const wanPushPullInterval = 5 * time.Minute

// Roles a member announces in its Meta.
const (
	RoleServer = "server"
	RoleAgent  = "agent"
)

// DefaultPort is the gossip port (UDP and TCP) used by the presets, memberlist's usual 7946.
const DefaultPort = 7946

// DefaultHintBuffer is the capacity of the Hints channel when Config.HintBuffer is 0.
const DefaultHintBuffer = 256

// Meta is what a member tells the others about itself. It travels JSON-encoded in every
// alive message, so it must stay under memberlist's MetaMaxSize (512 bytes) once encoded.
type Meta struct {
	// Role is RoleServer or RoleAgent.
	Role string `json:"role"`
	// AgentAddr is the agent's address (host:port) the server proxies pod logs through;
	// empty for a server without a local agent.
	AgentAddr string `json:"agentAddr,omitempty"`
	// APIAddr is the API server URL or address a server member serves; empty for agents.
	APIAddr string `json:"apiAddr,omitempty"`
}

// Config configures a Member. Start from DefaultLANConfig, DefaultWANConfig or
// DefaultLocalConfig, then set Name, Key and Meta.
type Config struct {
	// Name identifies the member; unique in the cluster (the node name for agents).
	Name string
	// BindAddr is the host:port to listen on for UDP and TCP gossip. The host must be an IP
	// literal or empty (all interfaces); port 0 picks a free port (see Member.LocalAddr).
	BindAddr string
	// AdvertiseAddr is the host[:port] other members should use to reach this one, for NAT
	// or containers; empty means the bound address (or, when bound to all interfaces, the
	// first private IP of this machine). Without a port, the bound port is advertised.
	AdvertiseAddr string
	// Key is the 32-byte AES-256 key all gossip is encrypted and authenticated with.
	// Required: a member with another key cannot join, and no gossip ever travels in clear.
	Key []byte
	// Meta is announced to every other member.
	Meta Meta
	// Profile selects the failure-detector timings: ProfileLAN (the default when empty),
	// ProfileWAN or ProfileLocal.
	Profile string
	// HintBuffer is the capacity of the Hints channel; 0 means DefaultHintBuffer. When it
	// is full further hints are dropped: consumers must also reconcile Members periodically.
	HintBuffer int
	// Logger receives memberlist's own log lines at debug level and this package's events;
	// nil discards them.
	Logger *slog.Logger
	// Traffic, when set, counts the bytes the member sends and receives (UDP and TCP).
	Traffic *Traffic

	// For this package's tests: tune adjusts the profile's timings, and cut,
	// while true, drops everything the member sends and receives (a cut link).
	tune func(*timings)
	cut  *atomic.Bool
}

// DefaultLANConfig returns a Config for members on one LAN: fast failure detection.
func DefaultLANConfig() Config {
	return Config{BindAddr: ":" + strconv.Itoa(DefaultPort), Profile: ProfileLAN}
}

// DefaultWANConfig returns a Config for members on lossy or high-latency links (edge
// sites, cellular): memberlist's WAN timings, detection in tens of seconds.
func DefaultWANConfig() Config {
	return Config{BindAddr: ":" + strconv.Itoa(DefaultPort), Profile: ProfileWAN}
}

// DefaultLocalConfig returns a Config for members on one machine (tests, demos): it binds
// a free loopback port.
func DefaultLocalConfig() Config {
	return Config{BindAddr: "127.0.0.1:0", Profile: ProfileLocal}
}

// timings is one profile's failure-detector tuning. The package doc explains how the
// fields combine into a detection time.
type timings struct {
	// probeInterval (duration) is how often each member probes one other member, in a
	// shuffled round robin; a failed probe also takes exactly one interval.
	probeInterval time.Duration
	// probeTimeout (duration) is how long the direct UDP ping waits for its ack before
	// indirect pings (via indirectChecks peers) and a TCP ping are tried for the rest of
	// the interval.
	probeTimeout time.Duration
	// indirectChecks (members) is how many peers ping a silent member on our behalf.
	indirectChecks int
	// suspicionMult (dimensionless) sets the suspicion timeout:
	// suspicionMult × max(1, log10 N) × probeInterval, reached once suspicionMult−2
	// other members independently confirm the suspicion.
	suspicionMult int
	// suspicionMaxTimeoutMult (dimensionless) bounds the suspicion timeout when nobody
	// confirms it (an isolated or overloaded prober): that many times the timeout above.
	suspicionMaxTimeoutMult int
	// gossipInterval (duration) is how often queued messages (suspect, dead, alive, leave)
	// are sent to gossipNodes random members, besides riding on probes.
	gossipInterval time.Duration
	// gossipNodes (members) is the fan-out of each gossip round.
	gossipNodes int
	// retransmitMult (dimensionless): each message is sent retransmitMult × ⌈log10(N+1)⌉ times.
	retransmitMult int
	// pushPullInterval (duration) is how often a full state exchange over TCP repairs
	// anything gossip lost (scaled up by memberlist beyond 32 members).
	pushPullInterval time.Duration
	// gossipToTheDeadTime (duration) is how long a dead member is still gossiped to, so a
	// false positive can refute; memberlist forgets the member after it.
	gossipToTheDeadTime time.Duration
	// tcpTimeout (duration) bounds a join or push/pull exchange.
	tcpTimeout time.Duration
	// compress: LZW-compress every message memberlist sends (it keeps the
	// compressed form only when smaller). Each compression allocates a
	// 64 KiB LZW table, so it costs an idle member a garbage collection every
	// few seconds: worth it on metered links only. Receivers decompress
	// whatever they get, so members may differ in this.
	compress bool
	// forgetAfter (duration) is how long Members keeps reporting a Dead or Left member.
	forgetAfter time.Duration
}

// profileTimings returns the timings of a profile name.
func profileTimings(profile string) (timings, error) {
	switch profile {
	case ProfileLAN, "":
		return timings{
			// 300 ms: a third of memberlist's LAN 1 s, so that probe, failed probe and a
			// suspicion timeout of 3 (N≤10) to 6 (N=100) intervals add up to < 3 s.
			probeInterval: 300 * time.Millisecond,
			// 150 ms: half the interval, leaving the other half for indirect and TCP
			// probes, which must also finish by the interval's end. LAN RTTs are < 1 ms;
			// the margin is for a loaded machine's scheduling delays.
			probeTimeout: 150 * time.Millisecond,
			// 3 members: memberlist's LAN value; one lossy path alone never suspects.
			indirectChecks: 3,
			// 3: the smallest multiplier that keeps Lifeguard's confirmations
			// (k = 3−2 = 1 independent confirmation before the fast timeout applies).
			// Suspicion lasts 0.9 s (N≤10) to 1.8 s (N=100): time for a stalled but live
			// member to hear the suspicion and refute it.
			suspicionMult: 3,
			// 6: memberlist's LAN value; unconfirmed suspicion waits 5.4–10.8 s.
			suspicionMaxTimeoutMult: 6,
			// 100 ms: half memberlist's LAN 200 ms, so suspect and dead messages reach 100
			// members in about log4(100) ≈ 3.3 rounds ≈ 0.35 s.
			gossipInterval: 100 * time.Millisecond,
			// 3 members: memberlist's LAN fan-out.
			gossipNodes: 3,
			// 4: memberlist's LAN value (12 sends per message at N=100).
			retransmitMult: 4,
			// 5 s (memberlist's LAN value is 30 s): the full state exchange is also how a
			// member that was cut off and declared dead learns so and refutes (gossip
			// about it stopped after its retransmits). 30 s kept a reconnected node
			// NotReady for 25–50 s; 5 s bounds that to about one interval. The cost is
			// one TCP exchange of the member table (≈100 B a member) per member per
			// interval, which memberlist itself stretches beyond 32 members (×3 at 100).
			pushPullInterval: 5 * time.Second,
			// 30 s: memberlist's LAN value.
			gossipToTheDeadTime: 30 * time.Second,
			// 10 s: memberlist's LAN value.
			tcpTimeout: 10 * time.Second,
			// Off: a LAN is not metered, and LZW on every probe (a 64 KiB table per
			// packet) was about a quarter of an idle agent's CPU (docs/benchmarks.md,
			// "Idle CPU per agent"). Pings and acks do not shrink anyway.
			compress: false,
			// 1 h: long enough for any reconcile loop to see the final state.
			forgetAfter: time.Hour,
		}, nil
	case ProfileWAN:
		// memberlist.DefaultWANConfig but for the push/pull interval: 5 s probes,
		// 3 s probe timeout, suspicion 6 × max(1, log10 N) × 5 s = 30 s (N≤10) to
		// 60 s (N=100).
		wan := memberlist.DefaultWANConfig()
		return timings{
			probeInterval:           wan.ProbeInterval,
			probeTimeout:            wan.ProbeTimeout,
			indirectChecks:          wan.IndirectChecks,
			suspicionMult:           wan.SuspicionMult,
			suspicionMaxTimeoutMult: wan.SuspicionMaxTimeoutMult,
			gossipInterval:          wan.GossipInterval,
			gossipNodes:             wan.GossipNodes,
			retransmitMult:          wan.RetransmitMult,
			// 5 min, not memberlist's 60 s: on a metered link the full state
			// exchange was over half of an idle agent's traffic (it carries every
			// member: ≈ 1.5 KB each way per exchange at 30 members, 50 B/s each way
			// at 60 s), and idle traffic must stay under 1 kbit/s in and out
			// together (docs/edge.md §6). Detection does not use it. Its other
			// job, telling a member that was cut off and declared dead meanwhile,
			// is done at once by rejoinAfterSilence.
			pushPullInterval:    wanPushPullInterval,
			gossipToTheDeadTime: wan.GossipToTheDeadTime,
			tcpTimeout:          wan.TCPTimeout,
			// On, memberlist's default: wan links may be metered, and its state
			// exchanges shrink.
			compress:    wan.EnableCompression,
			forgetAfter: time.Hour,
		}, nil
	case ProfileLocal:
		return timings{
			// 500 ms / 250 ms: patient, because tests share a loaded machine and must not
			// see false positives; detection here is not what anyone measures.
			probeInterval: 500 * time.Millisecond,
			probeTimeout:  250 * time.Millisecond,
			// 1 member: on one machine every path is the same path.
			indirectChecks:          1,
			suspicionMult:           3,
			suspicionMaxTimeoutMult: 6,
			// 50 ms: joins, leaves and metadata spread within a few rounds.
			gossipInterval: 50 * time.Millisecond,
			gossipNodes:    3,
			// 2: few members, loopback does not lose packets.
			retransmitMult:      2,
			pushPullInterval:    5 * time.Second,
			gossipToTheDeadTime: 5 * time.Second,
			// 2 s: loopback joins are instant unless the machine is starved.
			tcpTimeout: 2 * time.Second,
			// Off: loopback is free.
			compress:    false,
			forgetAfter: time.Hour,
		}, nil
	}
	return timings{}, fmt.Errorf("unknown profile %q (want %q, %q or %q)", profile, ProfileLAN, ProfileWAN, ProfileLocal)
}

// Validate reports the first problem with the configuration. New calls it.
func (c Config) Validate() error {
	if c.Name == "" {
		return errors.New("gossip: config: Name is required")
	}
	if len(c.Key) != 32 {
		return fmt.Errorf("gossip: config: Key must be 32 bytes (AES-256), got %d", len(c.Key))
	}
	if _, _, err := splitBind(c.BindAddr); err != nil {
		return fmt.Errorf("gossip: config: %w", err)
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitAdvertise(c.AdvertiseAddr); err != nil {
			return fmt.Errorf("gossip: config: %w", err)
		}
	}
	if _, err := profileTimings(c.Profile); err != nil {
		return fmt.Errorf("gossip: config: %w", err)
	}
	if c.Meta.Role != RoleServer && c.Meta.Role != RoleAgent {
		return fmt.Errorf("gossip: config: Meta.Role must be %q or %q, got %q", RoleServer, RoleAgent, c.Meta.Role)
	}
	if c.HintBuffer < 0 {
		return fmt.Errorf("gossip: config: HintBuffer must not be negative, got %d", c.HintBuffer)
	}
	// The instance id adds a fixed-size field; check the size with a stand-in of its length.
	meta, err := json.Marshal(wireMeta{Meta: c.Meta, Instance: "0000000000000000"})
	if err != nil {
		return fmt.Errorf("gossip: config: encode Meta: %w", err)
	}
	if len(meta) > memberlist.MetaMaxSize {
		return fmt.Errorf("gossip: config: Meta encodes to %d bytes, the limit is %d", len(meta), memberlist.MetaMaxSize)
	}
	return nil
}

// splitBind parses a bind address: an IP literal or empty host, and a port.
func splitBind(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("BindAddr %q: want host:port (e.g. \":7946\" or \"127.0.0.1:0\"): %w", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("BindAddr %q: bad port: %w", addr, err)
	}
	if host == "" {
		host = "0.0.0.0"
	} else if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("BindAddr %q: host must be an IP address or empty", addr)
	}
	return host, int(port), nil
}

// splitAdvertise parses an advertise address: an IP literal with an optional port (0 = none).
func splitAdvertise(addr string) (string, int, error) {
	host, port := addr, 0
	if h, p, err := net.SplitHostPort(addr); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return "", 0, fmt.Errorf("AdvertiseAddr %q: bad port: %w", addr, err)
		}
		host, port = h, int(n)
	}
	if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("AdvertiseAddr %q: host must be an IP address", addr)
	}
	return host, port, nil
}

// memberlistConfig translates a validated Config into memberlist's, wiring the adapters.
func (c Config) memberlistConfig(t timings, m *Member, logger *slog.Logger) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.Name
	mc.BindAddr, mc.BindPort, _ = splitBind(c.BindAddr)
	mc.AdvertiseAddr, mc.AdvertisePort = "", mc.BindPort
	if c.AdvertiseAddr != "" {
		host, port, _ := splitAdvertise(c.AdvertiseAddr)
		if port == 0 {
			port = mc.BindPort // memberlist substitutes the real port when BindPort is 0
		}
		mc.AdvertiseAddr, mc.AdvertisePort = host, port
	}

	mc.ProbeInterval = t.probeInterval
	mc.ProbeTimeout = t.probeTimeout
	mc.IndirectChecks = t.indirectChecks
	mc.SuspicionMult = t.suspicionMult
	mc.SuspicionMaxTimeoutMult = t.suspicionMaxTimeoutMult
	mc.GossipInterval = t.gossipInterval
	mc.GossipNodes = t.gossipNodes
	mc.RetransmitMult = t.retransmitMult
	mc.PushPullInterval = t.pushPullInterval
	mc.GossipToTheDeadTime = t.gossipToTheDeadTime
	mc.TCPTimeout = t.tcpTimeout
	mc.EnableCompression = t.compress

	mc.SecretKey = append([]byte(nil), c.Key...)
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true

	mc.Delegate = &delegate{m: m}
	mc.Events = &eventDelegate{m: m}
	if m != nil {
		mc.Ping = m.silence
	}
	mc.Logger = slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
	return mc
}
