package gossip

import (
	"encoding/json"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// The member table driven directly with the events memberlist would deliver, in orders
// the network can produce.
func TestMemberTableEvents(t *testing.T) {
	node := func(instance string) *memberlist.Node {
		meta, _ := json.Marshal(wireMeta{Meta: Meta{Role: RoleAgent, AgentAddr: "10.0.0.2:10250"}, Instance: instance})
		return &memberlist.Node{Name: "peer", Addr: net.ParseIP("10.0.0.2"), Port: 7946, Meta: meta}
	}
	join := func(inst string) func(*Member) { return func(m *Member) { m.observeAlive(node(inst)) } }
	gone := func(m *Member) { m.observeGone(node("")) }
	intentFrom := func(inst string) func(*Member) {
		return func(m *Member) { (&delegate{m: m}).NotifyMsg(encodeIntent("peer", inst)) }
	}
	tests := []struct {
		name      string
		events    []func(*Member)
		want      State
		wantHints int
	}{
		{"join", []func(*Member){join("a")}, Alive, 1},
		{"crash", []func(*Member){join("a"), gone}, Dead, 2},
		{"leave, intent first", []func(*Member){join("a"), intentFrom("a"), gone}, Left, 2},
		{"leave, intent overtaken", []func(*Member){join("a"), gone, intentFrom("a")}, Left, 3},
		{"intent repeated", []func(*Member){join("a"), gone, intentFrom("a"), intentFrom("a")}, Left, 3},
		{"stale intent of a former instance", []func(*Member){join("b"), intentFrom("a"), gone}, Dead, 2},
		{"restart after leave", []func(*Member){join("a"), intentFrom("a"), gone, join("b")}, Alive, 3},
		{"restart after leave, then crash", []func(*Member){join("a"), intentFrom("a"), gone, join("b"), gone}, Dead, 4},
		{"false positive refuted", []func(*Member){join("a"), gone, join("a")}, Alive, 3},
		{"intent for an unknown member", []func(*Member){intentFrom("a")}, -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newTestTable()
			for _, ev := range tt.events {
				ev(m)
			}
			mi, ok := stateOf(m, "peer")
			switch {
			case tt.want < 0 && ok:
				t.Fatalf("lists %+v, want nothing", mi)
			case tt.want >= 0 && (!ok || mi.State != tt.want):
				t.Fatalf("state %v (listed %v), want %v", mi.State, ok, tt.want)
			case tt.want >= 0 && (mi.Addr != "10.0.0.2:7946" || mi.Meta.AgentAddr != "10.0.0.2:10250"):
				t.Fatalf("info %+v: address or meta lost", mi)
			}
			if got := len(m.hints); got != tt.wantHints {
				t.Errorf("%d hints, want %d", got, tt.wantHints)
			}
			wantAlive := 0
			if tt.want == Alive {
				wantAlive = 1
			}
			if m.alive != wantAlive {
				t.Errorf("alive count %d, want %d", m.alive, wantAlive)
			}
		})
	}
}

func TestMemberTableUnreadableMetaAndForgetting(t *testing.T) {
	m := newTestTable()
	m.observeAlive(&memberlist.Node{Name: "odd", Addr: net.ParseIP("10.0.0.3"), Port: 1, Meta: []byte("not json")})
	if mi, ok := stateOf(m, "odd"); !ok || mi.State != Alive || mi.Meta != (Meta{}) {
		t.Fatalf("member with unreadable meta: %+v, %v; want alive with zero Meta", mi, ok)
	}
	m.observeGone(&memberlist.Node{Name: "odd"})
	m.mu.Lock()
	m.members["odd"].info.Since = time.Now().Add(-2 * m.forgetAfter)
	m.mu.Unlock()
	if _, ok := stateOf(m, "odd"); ok {
		t.Fatal("a member dead for longer than forgetAfter is still listed")
	}
}

func newTestTable() *Member {
	return &Member{
		name:        "self",
		forgetAfter: time.Hour,
		log:         slog.New(slog.DiscardHandler),
		members:     make(map[string]*record),
		hints:       make(chan string, 16),
		broadcasts:  &memberlist.TransmitLimitedQueue{NumNodes: func() int { return 1 }, RetransmitMult: 1},
	}
}

func TestPushPullCarriesLeaveIntents(t *testing.T) {
	meta, _ := json.Marshal(wireMeta{Meta: Meta{Role: RoleAgent}, Instance: "a"})
	peer := &memberlist.Node{Name: "peer", Addr: net.ParseIP("10.0.0.2"), Port: 7946, Meta: meta}
	knows, missed := newTestTable(), newTestTable()
	for _, m := range []*Member{knows, missed} {
		m.observeAlive(peer)
		m.observeGone(peer)
	}
	knows.observeIntent("peer", "a")
	state := (&delegate{m: knows}).LocalState(false)
	(&delegate{m: missed}).MergeRemoteState(state, false)
	(&delegate{m: missed}).MergeRemoteState([]byte("garbage"), false) // ignored
	if mi, _ := stateOf(missed, "peer"); mi.State != Left {
		t.Fatalf("after push/pull the member that missed the intent sees %v, want left", mi.State)
	}
}
