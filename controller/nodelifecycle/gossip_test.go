package nodelifecycle

import (
	"slices"
	"testing"

	"github.com/everynode/everynode/gossip"
)

// fakeGossip is a GossipMembers with fixed members.
type fakeGossip struct {
	members []gossip.MemberInfo
	hints   chan string
}

func (f *fakeGossip) Members() []gossip.MemberInfo { return f.members }
func (f *fakeGossip) Hints() <-chan string         { return f.hints }

func TestGossipMembership(t *testing.T) {
	g := &fakeGossip{hints: make(chan string, 4), members: []gossip.MemberInfo{
		{Name: "alive", State: gossip.Alive, Meta: gossip.Meta{Role: gossip.RoleAgent}},
		{Name: "suspect", State: gossip.Suspect, Meta: gossip.Meta{Role: gossip.RoleAgent}},
		{Name: "dead", State: gossip.Dead, Meta: gossip.Meta{Role: gossip.RoleAgent}},
		{Name: "left", State: gossip.Left, Meta: gossip.Meta{Role: gossip.RoleAgent}},
		{Name: "server-with-agent", State: gossip.Alive, Addr: "10.0.0.1:7946", Meta: gossip.Meta{Role: gossip.RoleServer, AgentAddr: "10.0.0.1:10250"}},
		{Name: "everynode-server-x", State: gossip.Alive, Addr: "10.0.0.2:7946", Meta: gossip.Meta{Role: gossip.RoleServer}},
		{Name: "gone-server", State: gossip.Dead, Addr: "10.0.0.3:7946", Meta: gossip.Meta{Role: gossip.RoleServer}},
	}}
	ms := NewGossipMembership(g)
	want := []Member{
		{Name: "alive", Alive: true}, {Name: "suspect", Alive: true}, {Name: "dead"}, {Name: "left", Left: true},
		{Name: "server-with-agent", Alive: true},
	}
	if got := ms.Members(); !slices.Equal(got, want) {
		t.Errorf("Members() = %+v, want %+v", got, want)
	}

	// Hints become coalesced Changed signals; Run ends when Hints closes.
	g.hints <- "a"
	g.hints <- "b"
	close(g.hints)
	done := make(chan struct{})
	go func() {
		ms.Run(t.Context())
		close(done)
	}()
	<-done
	select {
	case <-ms.Changed():
	default:
		t.Fatal("no Changed signal after hints")
	}
	select {
	case <-ms.Changed():
		t.Fatal("hints were not coalesced")
	default:
	}
}
