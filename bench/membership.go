package bench

import (
	"context"
	"sync"

	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/gossip"
)

// gossipMembership adapts the server's gossip member to
// nodelifecycle.Membership, as "everynode server" does: Alive or Suspect →
// alive, Left → left, Dead → neither. Members without an agent are no nodes.
type gossipMembership struct {
	m       *gossip.Member
	changed chan struct{}
}

func newGossipMembership(m *gossip.Member) *gossipMembership {
	return &gossipMembership{m: m, changed: make(chan struct{}, 1)}
}

func (g *gossipMembership) Members() []nodelifecycle.Member {
	infos := g.m.Members()
	out := make([]nodelifecycle.Member, 0, len(infos))
	for _, mi := range infos {
		if mi.Meta.AgentAddr == "" {
			continue
		}
		out = append(out, nodelifecycle.Member{Name: mi.Name, Alive: mi.State == gossip.Alive || mi.State == gossip.Suspect, Left: mi.State == gossip.Left})
	}
	return out
}

func (g *gossipMembership) Changed() <-chan struct{} { return g.changed }

// run forwards the member's hints as coalesced Changed signals until ctx ends.
func (g *gossipMembership) run(ctx context.Context) {
	hints := g.m.Hints()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-hints:
			if !ok {
				return
			}
			select {
			case g.changed <- struct{}{}:
			default:
			}
		}
	}
}

// staticMembership is the membership of a run without gossip: the simulated
// agents this process runs are alive while they run. It keeps the node
// lifecycle controller running (and the nodes Ready) without gossip.
type staticMembership struct {
	mu      sync.Mutex
	alive   map[string]bool
	changed chan struct{}
}

func newStaticMembership() *staticMembership {
	return &staticMembership{alive: map[string]bool{}, changed: make(chan struct{}, 1)}
}

func (s *staticMembership) set(name string, alive bool) {
	s.mu.Lock()
	s.alive[name] = alive
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *staticMembership) Members() []nodelifecycle.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]nodelifecycle.Member, 0, len(s.alive))
	for n, a := range s.alive {
		out = append(out, nodelifecycle.Member{Name: n, Alive: a})
	}
	return out
}

func (s *staticMembership) Changed() <-chan struct{} { return s.changed }
