package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/everynode/everynode/gossip"
)

// gossipMembers is what serverSeeds reads of a gossip member.
type gossipMembers interface {
	Members() []gossip.MemberInfo
	Hints() <-chan string
}

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
