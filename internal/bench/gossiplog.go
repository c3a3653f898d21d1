package bench

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// maxGossipLines bounds what a gossipRecorder keeps: the first lines of a
// run are the ones that explain a false NotReady; later ones are counted.
const maxGossipLines = 1000

// gossipRecorder is a slog.Handler for gossip members that keeps their
// notable lines for the result: memberlist's [INFO], [WARN] and [ERR] lines
// (a member suspected, marked failed, refuting a suspicion) and the gossip
// package's "member gone" events, each with the time and the member that
// logged it. memberlist's [DEBUG] lines are dropped. Every record also goes
// to next, when set. It is safe for concurrent use.
type gossipRecorder struct {
	next   slog.Handler // nil: none
	member string       // from a "member" attribute (gossip.New adds it)
	st     *recorderState
}

type recorderState struct {
	mu      sync.Mutex
	lines   []string
	dropped int
}

var _ slog.Handler = (*gossipRecorder)(nil)

func newGossipRecorder(next slog.Handler) *gossipRecorder {
	return &gossipRecorder{next: next, st: &recorderState{}}
}

func (g *gossipRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (g *gossipRecorder) Handle(ctx context.Context, r slog.Record) error {
	if g.next != nil && g.next.Enabled(ctx, r.Level) {
		_ = g.next.Handle(ctx, r)
	}
	msg := r.Message
	notable := strings.HasPrefix(msg, "[INFO]") || strings.HasPrefix(msg, "[WARN]") || strings.HasPrefix(msg, "[ERR]")
	if !notable && !strings.HasPrefix(msg, "gossip: member gone") {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s", r.Time.UTC().Format(time.TimeOnly+".000"), g.member, strings.Replace(msg, " memberlist:", "", 1))
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	g.st.mu.Lock()
	defer g.st.mu.Unlock()
	if len(g.st.lines) >= maxGossipLines {
		g.st.dropped++
		return nil
	}
	g.st.lines = append(g.st.lines, b.String())
	return nil
}

func (g *gossipRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *g
	if g.next != nil {
		c.next = g.next.WithAttrs(attrs)
	}
	for _, a := range attrs {
		if a.Key == "member" {
			c.member = a.Value.String()
		}
	}
	return &c
}

func (g *gossipRecorder) WithGroup(name string) slog.Handler {
	c := *g
	if g.next != nil {
		c.next = g.next.WithGroup(name)
	}
	return &c
}

// lines returns the kept lines, and a last line counting the dropped ones.
func (g *gossipRecorder) lines() []string {
	if g == nil {
		return nil
	}
	g.st.mu.Lock()
	defer g.st.mu.Unlock()
	out := append([]string(nil), g.st.lines...)
	if g.st.dropped > 0 {
		out = append(out, fmt.Sprintf("(%d more lines not kept)", g.st.dropped))
	}
	return out
}
