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

	"github.com/everynode/everynode/client"
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

// quantiles returns the p50 and p99 in milliseconds and the sample count.
func (l *latencies) quantiles() (p50, p99 float64, n int) {
	l.mu.Lock()
	d := slices.Clone(l.d)
	l.mu.Unlock()
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

// simAgent is one simulated node.
type simAgent struct {
	name   string
	member *gossip.Member // nil without gossip
	cancel context.CancelFunc
	done   chan error
}

// fleet is the simulated nodes of a run.
type fleet struct {
	srv    *server
	tr     *http2.Transport
	lat    *latencies
	dials  atomic.Int64 // connections the shared transport opened
	log    *slog.Logger
	agents []*simAgent
}

func nodeName(i int) string { return fmt.Sprintf("sim-%05d", i) }

// startFleet starts n agents (in parallel batches) and returns once all
// are started; registration is awaited separately.
func startFleet(ctx context.Context, srv *server, n int, useGossip bool, log *slog.Logger) (*fleet, error) {
	f := &fleet{srv: srv, lat: &latencies{}, log: log, agents: make([]*simAgent, n)}
	tr, err := srv.agentTransport(&f.dials)
	if err != nil {
		return nil, err
	}
	f.tr = tr
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f.agents[i], errs[i] = f.start(ctx, nodeName(i), useGossip)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		f.stop()
		return nil, err
	}
	return f, nil
}

func (f *fleet) start(ctx context.Context, name string, useGossip bool) (*simAgent, error) {
	h, err := client.NewHTTP(client.Config{Server: f.srv.url, Token: f.srv.cluster.NodeToken(name),
		UserAgent: "everynode-bench-agent", Transport: f.tr})
	if err != nil {
		return nil, err
	}
	a := &simAgent{name: name, done: make(chan error, 1)}
	if useGossip {
		cfg := gossip.DefaultLANConfig()
		cfg.BindAddr, cfg.Name, cfg.Key = "127.0.0.1:0", name, f.srv.cluster.GossipKey()
		cfg.Meta = gossip.Meta{Role: gossip.RoleAgent, AgentAddr: "127.0.0.1"}
		m, err := gossip.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("bench: gossip member %s: %w", name, err)
		}
		if _, err := m.Join(f.srv.seeds()); err != nil {
			m.Close()
			return nil, fmt.Errorf("bench: gossip join %s: %w", name, err)
		}
		a.member = m
	} else {
		f.srv.static.set(name, true)
	}
	ag, err := nodeagent.New(nodeagent.Config{
		NodeName: name, NodeIP: "127.0.0.1",
		Client:           timedClient{Interface: h, lat: f.lat},
		Runtime:          fake.New(fake.Config{Images: []string{ImageV1, ImageV2}, IP: "127.0.0.1"}),
		Logger:           f.log,
		Labels:           map[string]string{NodeLabel: "true"},
		NodeStatusPeriod: nodeStatusPeriod,
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

// kill stops an agent the way a crash does: its gossip member goes silent
// without a leave, its agent stops.
func (a *simAgent) kill(static *staticMembership) {
	if a.member != nil {
		a.member.Close()
	} else if static != nil {
		static.set(a.name, false)
	}
	a.cancel()
	<-a.done
	a.cancel = nil
}

// stop stops every agent still running.
func (f *fleet) stop() {
	var wg sync.WaitGroup
	for _, a := range f.agents {
		if a == nil || a.cancel == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.cancel()
			<-a.done
			a.cancel = nil
			if a.member != nil {
				a.member.Close()
			}
		}()
	}
	wg.Wait()
	f.tr.CloseIdleConnections()
}
