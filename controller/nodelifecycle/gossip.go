package nodelifecycle

import (
	"context"

	"github.com/everynode/everynode/gossip"
)

// GossipMembers is what GossipMembership reads of a gossip member
// (*gossip.Member satisfies it).
type GossipMembers interface {
	Members() []gossip.MemberInfo
	Hints() <-chan string
}

// GossipMembership adapts a gossip member to Membership: Alive or Suspect →
// alive, Left (graceful stop) → left, Dead → neither (Ready=Unknown).
// Members that announce no agent (a server run with --no-agent) are not
// nodes and are left out. Members is safe for concurrent use; Run must be
// running for Changed to fire.
type GossipMembership struct {
	m       GossipMembers
	changed chan struct{}
}

var _ Membership = (*GossipMembership)(nil)

// NewGossipMembership returns the adapter; start Run to forward hints.
func NewGossipMembership(m GossipMembers) *GossipMembership {
	return &GossipMembership{m: m, changed: make(chan struct{}, 1)}
}

// Members implements Membership.
func (g *GossipMembership) Members() []Member {
	infos := g.m.Members()
	out := make([]Member, 0, len(infos))
	for _, mi := range infos {
		if mi.Meta.Role == gossip.RoleServer && mi.Meta.AgentAddr == "" {
			continue
		}
		out = append(out, Member{Name: mi.Name, Alive: mi.State == gossip.Alive || mi.State == gossip.Suspect, Left: mi.State == gossip.Left})
	}
	return out
}

// Changed implements Membership.
func (g *GossipMembership) Changed() <-chan struct{} { return g.changed }

// Run turns the member's hints into Changed signals (coalesced, never
// blocking) until ctx ends or the member's hint channel closes.
func (g *GossipMembership) Run(ctx context.Context) {
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
