package nodelifecycle

import (
	"context"
	"sync/atomic"
	"time"
)

// disputedPoll is how often Run hints while gossip and the connections
// disagree about a node (gossip says gone, the node is connected): the
// connections of other servers send no hint when a stream there ends.
const disputedPoll = 500 * time.Millisecond

// Connections is what only a node can produce: the set of nodes that hold
// a stream to the API authenticated with their own credential
// (*apiserver.ConnectedNodes satisfies it).
type Connections interface {
	// Connected returns the nodes connected now; it must not block for long.
	Connected() []string
	// Changed delivers a hint (coalesced, never blocking) after a node
	// stopped being connected.
	Changed() <-chan struct{}
}

// Corroborated is a Membership whose members carry Connected from conns:
// gossip says which nodes are alive, and a node that gossip calls dead,
// left or unknown but that is connected is left as it is (rules.go). A
// member holding the gossip key can then no longer make a healthy node
// NotReady by declaring it dead, while a killed agent (its streams end at
// once) and a cut link (its connection fails the server's pings) are still
// seen within seconds. Members is safe for concurrent use; Run must be
// running for Changed to fire.
type Corroborated struct {
	ms      Membership
	conns   Connections
	changed chan struct{}
	// disputed: the last Members had a connected node gossip calls gone.
	disputed atomic.Bool
}

var _ Membership = (*Corroborated)(nil)

// Corroborate returns ms corroborated by conns; start Run to forward hints.
func Corroborate(ms Membership, conns Connections) *Corroborated {
	return &Corroborated{ms: ms, conns: conns, changed: make(chan struct{}, 1)}
}

// Members implements Membership: ms's members with Connected set, and a
// member neither alive nor left for each connected node ms does not list.
func (c *Corroborated) Members() []Member {
	ms := c.ms.Members()
	conn := map[string]bool{}
	for _, n := range c.conns.Connected() {
		conn[n] = true
	}
	out := make([]Member, 0, len(ms)+len(conn))
	disputed := false
	for _, m := range ms {
		m.Connected = conn[m.Name]
		disputed = disputed || (m.Connected && !m.Alive)
		delete(conn, m.Name)
		out = append(out, m)
	}
	for n := range conn {
		out = append(out, Member{Name: n, Connected: true})
	}
	c.disputed.Store(disputed)
	return out
}

// Changed implements Membership.
func (c *Corroborated) Changed() <-chan struct{} { return c.changed }

// Run forwards the hints of ms and conns until ctx ends, and hints every
// disputedPoll while a node is disputed.
func (c *Corroborated) Run(ctx context.Context) {
	poll := time.NewTicker(disputedPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.ms.Changed():
		case <-c.conns.Changed():
		case <-poll.C:
			if !c.disputed.Load() {
				continue
			}
		}
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
}
