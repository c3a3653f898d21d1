package gossip

import (
	"slices"
	"testing"
)

func TestServerAddrs(t *testing.T) {
	members := []MemberInfo{
		{Name: "alive", State: Alive, Meta: Meta{Role: RoleAgent}},
		{Name: "server-with-agent", State: Alive, Addr: "10.0.0.1:7946", Meta: Meta{Role: RoleServer, AgentAddr: "10.0.0.1:10250"}},
		{Name: "everynode-server-x", State: Alive, Addr: "10.0.0.2:7946", Meta: Meta{Role: RoleServer}},
		{Name: "gone-server", State: Dead, Addr: "10.0.0.3:7946", Meta: Meta{Role: RoleServer}},
	}
	if got := ServerAddrs(members); !slices.Equal(got, []string{"10.0.0.1:7946", "10.0.0.2:7946"}) {
		t.Errorf("ServerAddrs = %v", got)
	}
}
