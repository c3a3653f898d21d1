package cli

import (
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/everynode/everynode/gossip"
)

func TestParseAgent(t *testing.T) {
	c := &AgentCommand{}
	err := c.parse(strings.Fields("--server https://10.0.0.1:6443 --token K10x --name edge-1 --labels zone=edge,disk=ssd "+
		"--taints dedicated=edge:NoSchedule,gpu:NoExecute --runtime fake --data-dir /d --gossip 127.0.0.1:0 --gossip-profile wan "+
		"--fake-images busybox,app:v2 --fake-unpullable broken* --log-listen 127.0.0.1:0 --leave-on-stop=false"), discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.server != "https://10.0.0.1:6443" || c.agent.name != "edge-1" || c.agent.labelMap["disk"] != "ssd" || len(c.agent.taintSet) != 2 ||
		c.agent.runtime != "fake" || c.agent.gossipProfile != "wan" || c.agent.leaveOnStop || c.dataDir != "/d" {
		t.Fatalf("parsed %+v", c)
	}
	base := "--server https://s:6443 --token K10x "
	for args, want := range map[string]string{
		"--token K10x":                       "--server is required",
		"--server http://s:6443 --token K10": "invalid --server",
		"--server https://s:6443":            "join refused: no --token given; copy <data-dir>/join-token from the server",
		base + "--labels zone":               "invalid --labels",
		base + "--taints gpu=yes":            "invalid --taints",
		base + "--taints gpu:Sometimes":      "invalid --taints",
		base + "--runtime rkt":               "unknown --runtime",
		base + "--gossip-profile moon":       "unknown --gossip-profile",
		base + "--gossip 7946":               "invalid --gossip",
		base + "--node-ip nope":              "invalid --node-ip",
		base + "--name Edge_1":               "invalid --name",
		base + "extra":                       "unexpected arguments",
		"-h":                                 flag.ErrHelp.Error(),
	} {
		err := (&AgentCommand{}).parse(strings.Fields(args), discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", args, err, want)
		}
	}
}

// fakeGossip is a gossipMembers with fixed members.
type fakeGossip struct {
	members []gossip.MemberInfo
	hints   chan string
}

func (f *fakeGossip) Members() []gossip.MemberInfo { return f.members }
func (f *fakeGossip) Hints() <-chan string         { return f.hints }

func TestServerSeeds(t *testing.T) {
	g := &fakeGossip{members: []gossip.MemberInfo{
		{Name: "alive", State: gossip.Alive, Meta: gossip.Meta{Role: gossip.RoleAgent}},
		{Name: "server-with-agent", State: gossip.Alive, Addr: "10.0.0.1:7946", Meta: gossip.Meta{Role: gossip.RoleServer, AgentAddr: "10.0.0.1:10250"}},
		{Name: "everynode-server-x", State: gossip.Alive, Addr: "10.0.0.2:7946", Meta: gossip.Meta{Role: gossip.RoleServer}},
		{Name: "gone-server", State: gossip.Dead, Addr: "10.0.0.3:7946", Meta: gossip.Meta{Role: gossip.RoleServer}},
	}}
	if got := serverSeeds(g); !slices.Equal(got, []string{"10.0.0.1:7946", "10.0.0.2:7946"}) {
		t.Errorf("serverSeeds = %v", got)
	}
}

func TestMergeSeeds(t *testing.T) {
	if got := mergeSeeds([]string{"a", "b"}, []string{"b", "c"}); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("mergeSeeds = %v", got)
	}
}
