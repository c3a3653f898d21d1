package gossip

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// TestSilenceAsksForStateExchange: acks every probe interval ask for
// nothing; the first ack after silenceProbes intervals without one asks
// for one state exchange with the member that answered, and a second
// request while one is pending does not block.
func TestSilenceAsksForStateExchange(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newSilence(5*time.Second, func() time.Time { return now })
	peer := &memberlist.Node{Name: "p", Addr: net.ParseIP("10.0.0.2"), Port: 7946}
	pending := func() (string, bool) {
		select {
		case a := <-s.rejoin:
			return a, true
		default:
			return "", false
		}
	}
	for range 10 {
		now = now.Add(5 * time.Second)
		s.NotifyPingComplete(peer, time.Millisecond, nil)
	}
	if a, ok := pending(); ok {
		t.Fatalf("regular acks asked for a state exchange with %s", a)
	}
	// A lost ack or two is no silence.
	now = now.Add(3 * 5 * time.Second)
	s.NotifyPingComplete(peer, time.Millisecond, nil)
	if a, ok := pending(); ok {
		t.Fatalf("three intervals asked for a state exchange with %s", a)
	}
	// A cut link: 40 s without an ack, then one.
	now = now.Add(40 * time.Second)
	s.NotifyPingComplete(peer, time.Millisecond, nil)
	a, ok := pending()
	if !ok || a != "10.0.0.2:7946" {
		t.Fatalf("after a silence: %q, %v; want a state exchange with 10.0.0.2:7946", a, ok)
	}
	now = now.Add(40 * time.Second)
	s.NotifyPingComplete(peer, time.Millisecond, nil)
	now = now.Add(40 * time.Second)
	s.NotifyPingComplete(peer, time.Millisecond, nil) // one is pending: dropped, not blocking
	if _, ok := pending(); !ok {
		t.Fatal("no state exchange pending after two silences")
	}
	if a, ok := pending(); ok {
		t.Fatalf("two exchanges pending (%s); one is enough", a)
	}
}

// TestCutMemberRefutesAfterSilence: a member whose link is cut long
// enough to be declared dead learns it as soon as the link is back, from
// the state exchange after the silence, and refutes: the others see it
// alive again long before the next periodic push/pull (10 min here, as
// ProfileWAN's is minutes).
func TestCutMemberRefutesAfterSilence(t *testing.T) {
	checkGoroutines(t)
	longPushPull := func(t *timings) { t.pushPullInterval = 10 * time.Minute }
	var cut atomic.Bool
	var ms []*Member
	for _, name := range []string{"a", "b", "c"} {
		cfg := testConfig(name, ProfileLocal)
		cfg.tune = longPushPull
		if name == "c" {
			cfg.cut = &cut
			// c suspects the others slowly, so that while cut off it still
			// counts them alive and probes them once the link is back.
			cfg.tune = func(t *timings) {
				longPushPull(t)
				t.suspicionMult, t.suspicionMaxTimeoutMult = 200, 1
			}
		}
		ms = append(ms, startMember(t, cfg))
	}
	for _, m := range ms[1:] {
		if _, err := m.Join([]string{ms[0].LocalAddr()}); err != nil {
			t.Fatal(err)
		}
	}
	a := ms[0]
	waitFor(t, 30*time.Second, "everyone alive", func() bool {
		return seesAlive(ms[0], "a", "b", "c") && seesAlive(ms[1], "a", "b", "c") && seesAlive(ms[2], "a", "b", "c")
	})
	cut.Store(true)
	waitFor(t, 60*time.Second, "a sees c dead", func() bool {
		st, ok := stateOf(a, "c")
		return ok && st.State == Dead
	})
	cut.Store(false)
	waitFor(t, 60*time.Second, "a sees c alive again", func() bool { return seesAlive(a, "c") })
}
