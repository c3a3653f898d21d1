package nodelifecycle

import (
	"sort"
	"sync"
)

// StaticMembership is a Membership whose members are set by its owner
// rather than discovered by gossip: the benchmark's gossip-free fleets (the
// simulated agents of one process are alive while they run) and every test
// of node lifecycle use it. Safe for concurrent use.
type StaticMembership struct {
	mu      sync.Mutex
	members map[string]Member
	reads   int
	changed chan struct{}
}

var _ Membership = (*StaticMembership)(nil)

// NewStaticMembership returns a membership holding ms.
func NewStaticMembership(ms ...Member) *StaticMembership {
	s := &StaticMembership{members: map[string]Member{}, changed: make(chan struct{}, 1)}
	for _, m := range ms {
		s.members[m.Name] = m
	}
	return s
}

// Members returns the members sorted by name.
func (s *StaticMembership) Members() []Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	out := make([]Member, 0, len(s.members))
	for _, m := range s.members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Changed delivers a hint after every change.
func (s *StaticMembership) Changed() <-chan struct{} { return s.changed }

// SetAlive records name as alive or dead (not left) and sends a hint.
func (s *StaticMembership) SetAlive(name string, alive bool) {
	s.update(func() { s.members[name] = Member{Name: name, Alive: alive} })
}

// Remove forgets name and sends a hint.
func (s *StaticMembership) Remove(name string) {
	s.update(func() { delete(s.members, name) })
}

// Replace makes ms the whole membership and sends a hint.
func (s *StaticMembership) Replace(ms ...Member) {
	s.update(func() {
		clear(s.members)
		for _, m := range ms {
			s.members[m.Name] = m
		}
	})
}

// Reads is how many times Members was called.
func (s *StaticMembership) Reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

func (s *StaticMembership) update(change func()) {
	s.mu.Lock()
	change()
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}
