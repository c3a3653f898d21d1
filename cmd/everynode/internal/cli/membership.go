package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/gossip"
)

// gossipMembers is what the adapters read of a gossip member.
type gossipMembers interface {
	Members() []gossip.MemberInfo
	Hints() <-chan string
}

// membership adapts a gossip member to nodelifecycle.Membership: Alive →
// alive, Left (graceful stop) → left, Dead → neither (Ready=Unknown).
// Members that announce no agent (a server run with --no-agent) are not
// nodes and are left out.
type membership struct {
	m       gossipMembers
	changed chan struct{}
}

var _ nodelifecycle.Membership = (*membership)(nil)

func newMembership(m gossipMembers) *membership {
	return &membership{m: m, changed: make(chan struct{}, 1)}
}

// Members implements nodelifecycle.Membership.
func (ms *membership) Members() []nodelifecycle.Member {
	infos := ms.m.Members()
	out := make([]nodelifecycle.Member, 0, len(infos))
	for _, mi := range infos {
		if mi.Meta.Role == gossip.RoleServer && !serverHasAgent(mi) {
			continue
		}
		out = append(out, nodelifecycle.Member{Name: mi.Name, Alive: mi.State == gossip.Alive || mi.State == gossip.Suspect, Left: mi.State == gossip.Left})
	}
	return out
}

// Changed implements nodelifecycle.Membership.
func (ms *membership) Changed() <-chan struct{} { return ms.changed }

// run turns the member's hints into Changed signals (coalesced, never
// blocking) until ctx ends or the member is closed.
func (ms *membership) run(ctx context.Context) {
	hints := ms.m.Hints()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-hints:
			if !ok {
				return
			}
			select {
			case ms.changed <- struct{}{}:
			default:
			}
		}
	}
}

// serverHasAgent reports whether a server member also runs a local agent
// (its member name is then the node name).
func serverHasAgent(mi gossip.MemberInfo) bool { return mi.Meta.AgentAddr != "" }

// serverSeeds are the gossip addresses of the live server members.
func serverSeeds(m gossipMembers) []string {
	var out []string
	for _, mi := range m.Members() {
		if mi.Meta.Role == gossip.RoleServer && mi.State == gossip.Alive {
			out = append(out, mi.Addr)
		}
	}
	return out
}

// keepJoined joins seeds until it reaches one, then checks every interval
// that some server is still a live member and joins the seeds again if not
// (a restarted server forgets its agents; they find it again this way). It
// returns when ctx ends. seeds is re-read on every attempt.
func keepJoined(ctx context.Context, m *gossip.Member, seeds func() []string, interval time.Duration, log *slog.Logger) {
	t := time.NewTimer(0)
	defer t.Stop()
	joined := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if len(serverSeeds(m)) == 0 || !joined {
			s := seeds()
			if len(s) > 0 {
				if n, err := m.Join(s); err != nil {
					log.Warn("cannot join the gossip pool; will retry", "seeds", s, "err", err)
				} else {
					if !joined {
						log.Info("joined the gossip pool", "seeds", s, "reached", n)
					}
					joined = true
				}
			}
		}
		t.Reset(interval)
	}
}
