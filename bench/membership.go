package bench

import (
	"sync"

	"github.com/everynode/everynode/controller/nodelifecycle"
)

// staticMembership is the membership of a run without gossip: the simulated
// agents this process runs are alive while they run. It keeps the node
// lifecycle controller running (and the nodes Ready) without gossip.
type staticMembership struct {
	mu      sync.Mutex
	alive   map[string]bool
	changed chan struct{}
}

func newStaticMembership() *staticMembership {
	return &staticMembership{alive: map[string]bool{}, changed: make(chan struct{}, 1)}
}

func (s *staticMembership) set(name string, alive bool) {
	s.mu.Lock()
	s.alive[name] = alive
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *staticMembership) Members() []nodelifecycle.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]nodelifecycle.Member, 0, len(s.alive))
	for n, a := range s.alive {
		out = append(out, nodelifecycle.Member{Name: n, Alive: a})
	}
	return out
}

func (s *staticMembership) Changed() <-chan struct{} { return s.changed }
