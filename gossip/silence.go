package gossip

import (
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// silenceProbes is how many probe intervals without any ack to our own
// probes make a silence: longer than a lost packet or two (an ack is
// expected every interval), shorter than the shortest time the others
// need to declare a silent member dead (a failed probe and a suspicion of
// at least 3 intervals, plus the wait for a probe).
const silenceProbes = 4

// silence watches the acks to this member's probes. The first ack after a
// silence (our link was cut, or this process stalled) means we may have
// been declared dead meanwhile without knowing it: the others stop probing
// a dead member and gossip about its death fades, so only a full state
// exchange tells it, and it can refute. Rather than wait for the periodic
// push/pull (5 min with ProfileWAN), the member exchanges state at once
// with the member that answered.
type silence struct {
	after time.Duration
	now   func() time.Time

	mu      sync.Mutex
	lastAck time.Time
	rejoin  chan string // buffered 1: the address to exchange state with
}

var _ memberlist.PingDelegate = (*silence)(nil)

func newSilence(probeInterval time.Duration, now func() time.Time) *silence {
	return &silence{after: silenceProbes * probeInterval, now: now, lastAck: now(), rejoin: make(chan string, 1)}
}

// AckPayload implements memberlist.PingDelegate: nothing is added to acks.
func (s *silence) AckPayload() []byte { return nil }

// NotifyPingComplete implements memberlist.PingDelegate; memberlist calls
// it for every ack to a direct probe. It never blocks.
func (s *silence) NotifyPingComplete(other *memberlist.Node, _ time.Duration, _ []byte) {
	now := s.now()
	s.mu.Lock()
	quiet := now.Sub(s.lastAck)
	s.lastAck = now
	s.mu.Unlock()
	if quiet < s.after || other == nil {
		return
	}
	select {
	case s.rejoin <- other.Address():
	default: // one is pending already
	}
}
