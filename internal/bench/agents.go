package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/nodeagent/runtime/fake"
)

// Images the fake runtimes have preloaded: the DaemonSet's image and the
// rollout's.
const (
	ImageV1 = "everynode.io/bench/daemon:v1"
	ImageV2 = "everynode.io/bench/daemon:v2"
)

// NodeLabel marks the simulated nodes; the benchmark DaemonSet selects it.
const NodeLabel = "bench.everynode.io/fleet"

// nodeStatusPeriod is the simulated agents' Node heartbeat period: long, so a
// thousand heartbeats do not dominate; readiness comes from membership.
const nodeStatusPeriod = 5 * time.Minute

// latencies records the durations of the agents' pod status writes while
// recording is on.
type latencies struct {
	on atomic.Bool
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) samples() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.d)
}

// quantiles returns the p50 and p99 of d in milliseconds and the sample
// count; d is sorted in place.
func quantiles(d []time.Duration) (p50, p99 float64, n int) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	q := func(p float64) float64 {
		i := int(p * float64(len(d)-1))
		return float64(d[i]) / float64(time.Millisecond)
	}
	return q(0.50), q(0.99), len(d)
}

// timedClient times pod status updates at the agent's client.
type timedClient struct {
	client.Interface
	lat *latencies
}

func (c timedClient) UpdateStatus(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error) {
	_, isPod := obj.(*corev1.Pod)
	start := time.Now()
	out, err := c.Interface.UpdateStatus(ctx, obj, opts)
	if isPod && err == nil && c.lat.on.Load() {
		c.lat.add(time.Since(start))
	}
	return out, err
}

// agentFleet is a running set of simulated nodes, wherever they run: in this
// process (fleet), in child processes (procFleet), or a child's CPU burner.
// Methods are safe for concurrent use; stop is idempotent and ends
// everything the fleet started.
type agentFleet interface {
	// record turns the timing of pod status writes on or off.
	record(ctx context.Context, on bool) error
	// report returns what the fleet measured so far.
	report(ctx context.Context) (fleetReport, error)
	// kill stops one agent the way a crash does.
	kill(ctx context.Context, name string) error
	// fanoutWatch opens (on) the fan-out watches, one per agent, returning
	// once all are established, or closes them (see fanout).
	fanoutWatch(ctx context.Context, on bool) error
	// fanoutWait waits (at most timeout) until every fan-out watch saw
	// resourceVersion rv and returns the receipt times (Unix ns) and how
	// many watches did not see it.
	fanoutWait(ctx context.Context, rv string, timeout time.Duration) ([]int64, int, error)
	stop()
}

// fleetReport is what a fleet measured.
type fleetReport struct {
	// Dials is how many connections the agents' shared transports opened.
	Dials int
	// Samples are the recorded pod status write durations.
	Samples []time.Duration
	// GossipLog holds the agents' gossip members' notable lines (suspicions,
	// refutations, failures; memberlist's debug lines are left out).
	GossipLog []string
	// Traffic is what the agents' API connections and gossip members
	// carried so far.
	Traffic Traffic
}

// fleetTarget is what simulated agents need to reach the server.
type fleetTarget struct {
	url   string
	caPEM []byte
	// token returns a node's credential; safe for concurrent use.
	token func(node string) string
	// gossipKey and seeds, when the key is set, make every agent a gossip
	// member (LAN profile on loopback) joining seeds.
	gossipKey []byte
	seeds     []string
	// gossipProfile is the members' profile (gossip.ProfileLAN when empty).
	gossipProfile string
	// realHeartbeat makes the agents post their Node status at the real
	// agent's period instead of nodeStatusPeriod.
	realHeartbeat bool
	// ownConns gives every agent its own transport, so its own
	// connection, instead of the fleet's shared one.
	ownConns bool
	// static, when set, is told which agents run (runs without gossip).
	static *nodelifecycle.StaticMembership
}

// simAgent is one simulated node.
type simAgent struct {
	name   string
	api    client.Interface // the agent's own client
	tr     *http2.Transport // its own transport with ownConns, else nil
	member *gossip.Member   // nil without gossip
	done   chan error

	mu     sync.Mutex
	cancel context.CancelFunc // nil once stopped; guarded by mu
}

// fleet is simulated nodes running in this process.
type fleet struct {
	target fleetTarget
	tr     *http2.Transport // shared by the agents, unless target.ownConns
	lat    *latencies
	dials  atomic.Int64 // connections the agents' transports opened
	api    byteCount    // what the agents' connections carried
	gtr    gossip.Traffic
	glog   *gossipRecorder
	log    *slog.Logger
	agents []*simAgent

	fanMu sync.Mutex
	fan   *fanoutWatches // open fan-out watches; guarded by fanMu

	stopOnce sync.Once
}

var _ agentFleet = (*fleet)(nil)

func nodeName(i int) string { return fmt.Sprintf("sim-%05d", i) }

// nodeNames returns the names of n simulated nodes.
func nodeNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = nodeName(i)
	}
	return names
}

// startFleet starts an agent for each name (in parallel batches) and
// returns once all are started; registration is awaited separately.
func startFleet(ctx context.Context, t fleetTarget, names []string, log *slog.Logger) (*fleet, error) {
	f := &fleet{target: t, lat: &latencies{}, glog: newGossipRecorder(nil), log: log, agents: make([]*simAgent, len(names))}
	tr, err := agentTransport(t.caPEM, &f.dials, &f.api)
	if err != nil {
		return nil, err
	}
	f.tr = tr
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f.agents[i], errs[i] = f.start(ctx, name)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		f.stop()
		return nil, err
	}
	return f, nil
}

func (f *fleet) start(ctx context.Context, name string) (*simAgent, error) {
	tr, own := f.tr, (*http2.Transport)(nil)
	if f.target.ownConns {
		var err error
		if own, err = agentTransport(f.target.caPEM, &f.dials, &f.api); err != nil {
			return nil, err
		}
		tr = own
	}
	h, err := client.NewHTTP(client.Config{Server: f.target.url, Token: f.target.token(name),
		UserAgent: "everynode-bench-agent", Transport: tr, Protobuf: true})
	if err != nil {
		return nil, err
	}
	a := &simAgent{name: name, api: h, tr: own, done: make(chan error, 1)}
	if f.target.gossipKey != nil {
		cfg := gossip.DefaultLANConfig()
		if f.target.gossipProfile != "" {
			cfg.Profile = f.target.gossipProfile
		}
		cfg.BindAddr, cfg.Name, cfg.Key, cfg.Traffic = "127.0.0.1:0", name, f.target.gossipKey, &f.gtr
		cfg.Meta = gossip.Meta{Role: gossip.RoleAgent, AgentAddr: "127.0.0.1"}
		cfg.Logger = slog.New(f.glog)
		m, err := gossip.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("bench: gossip member %s: %w", name, err)
		}
		if _, err := m.Join(f.target.seeds); err != nil {
			m.Close()
			return nil, fmt.Errorf("bench: gossip join %s: %w", name, err)
		}
		a.member = m
	} else if f.target.static != nil {
		f.target.static.SetAlive(name, true)
	}
	period := nodeStatusPeriod
	if f.target.realHeartbeat {
		// What "everynode agent" uses: nodeagent.DefaultNodeStatusPeriod,
		// or longer with the wan profile.
		period = agent.GossipOptions{Profile: f.target.gossipProfile}.NodeStatusPeriod()
	}
	ag, err := nodeagent.New(nodeagent.Config{
		NodeName: name, NodeIP: "127.0.0.1",
		Client:           timedClient{Interface: h, lat: f.lat},
		Runtime:          fake.New(fake.Config{Images: []string{ImageV1, ImageV2}, IP: "127.0.0.1"}),
		Logger:           f.log,
		Labels:           map[string]string{NodeLabel: "true"},
		NodeStatusPeriod: period,
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("2"),
			corev1.ResourceMemory: resource.MustParse("4Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		},
	})
	if err != nil {
		if a.member != nil {
			a.member.Close()
		}
		return nil, err
	}
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	go func() { a.done <- ag.Run(actx) }()
	return a, nil
}

func (f *fleet) record(_ context.Context, on bool) error {
	f.lat.on.Store(on)
	return nil
}

func (f *fleet) report(context.Context) (fleetReport, error) {
	return fleetReport{Dials: int(f.dials.Load()), Samples: f.lat.samples(), GossipLog: f.glog.lines(),
		Traffic: trafficOf(&f.api, &f.gtr)}, nil
}

func (f *fleet) kill(_ context.Context, name string) error {
	for _, a := range f.agents {
		if a != nil && a.name == name {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.cancel == nil {
				return fmt.Errorf("bench: agent %s is not running", name)
			}
			a.kill(f.target.static)
			return nil
		}
	}
	return fmt.Errorf("bench: no agent %s here", name)
}

func (f *fleet) fanoutWatch(ctx context.Context, on bool) error {
	f.fanMu.Lock()
	defer f.fanMu.Unlock()
	if f.fan != nil {
		f.fan.close()
		f.fan = nil
	}
	if !on {
		return nil
	}
	apis := make([]client.Interface, 0, len(f.agents))
	for _, a := range f.agents {
		if a != nil {
			apis = append(apis, a.api)
		}
	}
	fan, err := openFanout(ctx, apis, f.log)
	if err != nil {
		return err
	}
	f.fan = fan
	return nil
}

func (f *fleet) fanoutWait(ctx context.Context, rv string, timeout time.Duration) ([]int64, int, error) {
	f.fanMu.Lock()
	fan := f.fan
	f.fanMu.Unlock()
	if fan == nil {
		return nil, 0, errors.New("bench: no fan-out watches open")
	}
	return fan.wait(ctx, rv, timeout)
}

// kill stops an agent the way a crash does: its gossip member goes silent
// without a leave, its agent stops. The caller holds a.mu.
func (a *simAgent) kill(static *nodelifecycle.StaticMembership) {
	if a.member != nil {
		a.member.Close()
	} else if static != nil {
		static.SetAlive(a.name, false)
	}
	a.cancel()
	<-a.done
	a.cancel = nil
}

// stop stops every agent still running. It is idempotent.
func (f *fleet) stop() {
	f.stopOnce.Do(func() {
		_ = f.fanoutWatch(context.Background(), false)
		var wg sync.WaitGroup
		for _, a := range f.agents {
			if a == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.mu.Lock()
				defer a.mu.Unlock()
				if a.cancel == nil {
					return
				}
				a.cancel()
				<-a.done
				a.cancel = nil
				if a.member != nil {
					a.member.Close()
				}
				if a.tr != nil {
					a.tr.CloseIdleConnections()
				}
			}()
		}
		wg.Wait()
		f.tr.CloseIdleConnections()
	})
}
