package gossip

import (
	"context"
	"log/slog"
	"time"
)

// ServerAddrs are the gossip addresses of the live server members among
// members: the seeds an agent joins.
func ServerAddrs(members []MemberInfo) []string {
	var out []string
	for _, mi := range members {
		if mi.Meta.Role == RoleServer && mi.State == Alive {
			out = append(out, mi.Addr)
		}
	}
	return out
}

// ServerAPIs are the API URLs the live server members among members
// announce.
func ServerAPIs(members []MemberInfo) []string {
	var out []string
	for _, mi := range members {
		if mi.Meta.Role == RoleServer && mi.State == Alive && mi.Meta.APIAddr != "" {
			out = append(out, mi.Meta.APIAddr)
		}
	}
	return out
}

// DeadServerAPIs are the API URLs announced by the server members among
// members that are dead or left: an agent tries them last.
func DeadServerAPIs(members []MemberInfo) []string {
	var out []string
	for _, mi := range members {
		if mi.Meta.Role == RoleServer && (mi.State == Dead || mi.State == Left) && mi.Meta.APIAddr != "" {
			out = append(out, mi.Meta.APIAddr)
		}
	}
	return out
}

// KeepJoined joins seeds until it reaches one, then checks every interval
// that some server is still a live member and joins the seeds again if not
// (a restarted server forgets its agents; they find it again this way). It
// returns when ctx ends. seeds is re-read on every attempt.
func (m *Member) KeepJoined(ctx context.Context, seeds func() []string, interval time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTimer(0)
	defer t.Stop()
	joined := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if len(ServerAddrs(m.Members())) == 0 || !joined {
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
