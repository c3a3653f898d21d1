package gossip

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestJoinSeesMembersWithMeta(t *testing.T) {
	checkGoroutines(t)
	server := DefaultLocalConfig()
	server.Name, server.Key, server.Logger = "server", testKey(1), testLogger()
	server.Meta = Meta{Role: RoleServer, APIAddr: "https://127.0.0.1:6443"}
	s := startMember(t, server)
	a := startMember(t, testConfig("a", ProfileLocal))
	b := startMember(t, testConfig("b", ProfileLocal))
	for _, m := range []*Member{a, b} {
		n, err := m.Join([]string{s.LocalAddr()})
		if err != nil || n != 1 {
			t.Fatalf("%s: Join = %d, %v; want 1, nil", m.name, n, err)
		}
	}
	all := []*Member{s, a, b}
	waitFor(t, 10*time.Second, "everyone sees everyone", func() bool {
		for _, m := range all {
			if !seesAlive(m, "server", "a", "b") {
				return false
			}
		}
		return true
	})
	for _, m := range all {
		got := m.Members()
		if len(got) != 3 {
			t.Fatalf("%s: Members() = %+v, want 3", m.name, got)
		}
		for _, mi := range got {
			var want Meta
			var addr string
			switch mi.Name {
			case "server":
				want, addr = server.Meta, s.LocalAddr()
			case "a":
				want, addr = Meta{Role: RoleAgent, AgentAddr: "127.0.0.1:1a"}, a.LocalAddr()
			case "b":
				want, addr = Meta{Role: RoleAgent, AgentAddr: "127.0.0.1:1b"}, b.LocalAddr()
			}
			if mi.Meta != want || mi.Addr != addr || mi.State != Alive || mi.Since.IsZero() {
				t.Errorf("%s sees %+v; want meta %+v, addr %s, alive", m.name, mi, want, addr)
			}
		}
	}
	if !strings.HasPrefix(s.LocalAddr(), "127.0.0.1:") || strings.HasSuffix(s.LocalAddr(), ":0") {
		t.Errorf("LocalAddr() = %q, want the real bound loopback port", s.LocalAddr())
	}
}

func TestWrongKeyCannotJoin(t *testing.T) {
	checkGoroutines(t)
	ms := startCluster(t, ProfileLocal, 2)
	bad := testConfig("intruder", ProfileLocal)
	bad.Key = testKey(2)
	w := startMember(t, bad)
	if n, err := w.Join([]string{ms[0].LocalAddr(), ms[1].LocalAddr()}); err == nil {
		t.Fatalf("Join with the wrong key = %d, nil; want an error", n)
	} else if !strings.Contains(err.Error(), "gossip key") || strings.Contains(err.Error(), "\n") {
		t.Errorf("wrong-key join error %q: want one line naming the gossip key", err)
	} else {
		t.Logf("wrong-key join error: %v", err)
	}
	// A member with the right key joins after the intruder tried: once everyone sees it,
	// gossip has had its chance to spread the intruder too.
	late := startMember(t, testConfig("late", ProfileLocal))
	if _, err := late.Join([]string{ms[1].LocalAddr()}); err != nil {
		t.Fatalf("late join: %v", err)
	}
	all := append(ms, late)
	waitFor(t, 10*time.Second, "late member everywhere", func() bool {
		for _, m := range all {
			if !seesAlive(m, "m0", "m1", "late") {
				return false
			}
		}
		return true
	})
	for _, m := range all {
		if _, ok := stateOf(m, "intruder"); ok {
			t.Errorf("%s lists the intruder: %+v", m.name, m.Members())
		}
	}
	if got := w.Members(); len(got) != 1 || got[0].Name != "intruder" {
		t.Errorf("intruder sees %+v, want only itself", got)
	}
}

func TestCrashIsDeadLAN(t *testing.T) {
	checkGoroutines(t)
	got := measureDetection(t, ProfileLAN, 3)
	// The figure is what matters; measureDetection only bounds it at 15 s for CI.
	t.Logf("LAN profile, 3 members: crash seen dead after %v (by m0), %v (by m1)", got[0].Round(time.Millisecond), got[1].Round(time.Millisecond))
}

func TestLeaveIsLeft(t *testing.T) {
	checkGoroutines(t)
	ms := startCluster(t, ProfileLocal, 3)
	leaver := ms[2]
	if err := leaver.Leave(5 * time.Second); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := leaver.Leave(5 * time.Second); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
	waitFor(t, 10*time.Second, "leaver seen as left", func() bool {
		for _, m := range ms[:2] {
			if mi, _ := stateOf(m, "m2"); mi.State != Left {
				return false
			}
		}
		return true
	})
	if mi, _ := stateOf(leaver, "m2"); mi.State != Left {
		t.Errorf("leaver sees itself %v, want left", mi.State)
	}
	if err := leaver.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := leaver.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := leaver.Leave(time.Second); err == nil {
		t.Error("Leave after Close succeeded, want an error")
	}
	if _, err := leaver.Join([]string{ms[0].LocalAddr()}); err == nil {
		t.Error("Join after Close succeeded, want an error")
	}
	// Closing after leaving changes nothing: still Left, not Dead, and the others agree.
	for _, m := range ms[:2] {
		if mi, _ := stateOf(m, "m2"); mi.State != Left {
			t.Errorf("%s sees the closed leaver as %v, want left", m.name, mi.State)
		}
		if !seesAlive(m, "m0", "m1") {
			t.Errorf("%s: %+v, want m0 and m1 alive", m.name, m.Members())
		}
	}
}

func TestHintPerChange(t *testing.T) {
	checkGoroutines(t)
	a := startMember(t, testConfig("a", ProfileLocal))
	expectHint(t, a, "a", Alive)
	b := startMember(t, testConfig("b", ProfileLocal))
	if _, err := b.Join([]string{a.LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	expectHint(t, a, "b", Alive)
	c := startMember(t, testConfig("c", ProfileLocal))
	if _, err := c.Join([]string{b.LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	expectHint(t, a, "c", Alive)
	if err := b.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	expectHint(t, a, "b", Left)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for range a.Hints() { // Close closes the channel; leftovers are fine
	}
}

// expectHint waits for a hint naming name, then checks m lists it in state want.
func expectHint(t *testing.T, m *Member, name string, want State) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	var seen []string
	for {
		select {
		case got := <-m.Hints():
			seen = append(seen, got)
			if got != name {
				continue
			}
			mi, ok := stateOf(m, name)
			if !ok || mi.State != want {
				continue // a hint for an earlier change of the same member
			}
			return
		case <-timeout:
			t.Fatalf("no hint for %s becoming %v; hints seen: %v; members: %+v", name, want, seen, m.Members())
		}
	}
}

func TestUnreadHintsDoNotBlock(t *testing.T) {
	checkGoroutines(t)
	cfg := testConfig("deaf", ProfileLocal)
	cfg.HintBuffer = 1
	deaf := startMember(t, cfg) // its own join fills the buffer; nobody ever reads it
	others := startCluster(t, ProfileLocal, 4)
	if _, err := deaf.Join([]string{others[0].LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	all := append([]*Member{deaf}, others...)
	waitFor(t, 10*time.Second, "membership converges despite a full hint buffer", func() bool {
		for _, m := range all {
			if !seesAlive(m, "deaf", "m0", "m1", "m2", "m3") {
				return false
			}
		}
		return true
	})
	if err := others[3].Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "deaf member sees the leave", func() bool {
		mi, _ := stateOf(deaf, "m3")
		return mi.State == Left
	})
	deaf.mu.Lock()
	dropped := deaf.dropped
	deaf.mu.Unlock()
	if dropped < 4 {
		t.Errorf("dropped %d hints, want ≥ 4 (m0…m3 joining): the buffer never filled", dropped)
	}
	if len(deaf.Hints()) != 1 {
		t.Errorf("hint buffer holds %d, want 1", len(deaf.Hints()))
	}
}

func TestRestartedMemberIsAliveAgain(t *testing.T) {
	checkGoroutines(t)
	ms := startCluster(t, ProfileLocal, 2)
	// m2 leaves, and a new process with the same name joins: alive again, no stale
	// "leaving" mark from its former instance.
	old := startMember(t, testConfig("m2", ProfileLocal))
	if _, err := old.Join([]string{ms[0].LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "m2 joined", func() bool { return seesAlive(ms[0], "m2") && seesAlive(ms[1], "m2") })
	if err := old.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "m2 left", func() bool {
		mi, _ := stateOf(ms[0], "m2")
		return mi.State == Left
	})
	_ = old.Close()
	again := startMember(t, testConfig("m2", ProfileLocal))
	if _, err := again.Join([]string{ms[1].LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "restarted m2 alive", func() bool {
		return seesAlive(ms[0], "m2") && seesAlive(ms[1], "m2") && seesAlive(again, "m0", "m1", "m2")
	})
	ms[0].mu.Lock()
	leaving := ms[0].members["m2"].leaving
	ms[0].mu.Unlock()
	if leaving {
		t.Error("restarted m2 still marked leaving")
	}
	names := []string{}
	for _, mi := range ms[0].Members() {
		names = append(names, mi.Name)
	}
	if !slices.Equal(names, []string{"m0", "m1", "m2"}) {
		t.Errorf("Members() names = %v, want sorted m0 m1 m2", names)
	}
}

// BenchmarkDetectionLAN measures how long, with the LAN profile, the other members take
// to list a crashed member Dead ("detect-ms": the slowest observer, averaged).
func BenchmarkDetectionLAN(b *testing.B) {
	for _, n := range []int{3, 10, 30} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				total += slices.Max(measureDetection(b, ProfileLAN, n))
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "detect-ms")
		})
	}
}

func TestLeaveAlone(t *testing.T) {
	checkGoroutines(t)
	m := startMember(t, testConfig("solo", ProfileLAN))
	start := time.Now()
	if err := m.Leave(10 * time.Second); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Leave with nobody to tell took %v, want immediate", d)
	}
	if mi, _ := stateOf(m, "solo"); mi.State != Left {
		t.Errorf("solo sees itself %v, want left", mi.State)
	}
}

// TestLeaveIntentReachesServersOverTCP: the servers get a leave intent over
// memberlist's reliable channel, not only by gossip, so a lost datagram cannot
// make a graceful stop look like a crash. The intent is sent with nothing
// queued for gossip; the agent then stops silently, and the server still
// lists it Left.
func TestLeaveIntentReachesServersOverTCP(t *testing.T) {
	checkGoroutines(t)
	scfg := testConfig("srv", ProfileLocal)
	scfg.Meta = Meta{Role: RoleServer}
	srv := startMember(t, scfg)
	agent := startMember(t, testConfig("a1", ProfileLocal))
	if _, err := agent.Join([]string{srv.LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a1 and srv see each other", func() bool {
		return seesAlive(srv, "a1") && seesAlive(agent, "srv")
	})
	leaving := func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		r := srv.members["a1"]
		return r != nil && r.leaving
	}
	if leaving() {
		t.Fatal("srv thinks a1 is leaving before it said so")
	}
	agent.sendToServers(encodeIntent(agent.name, agent.instance))
	waitFor(t, 5*time.Second, "srv got a1's intent", leaving)
	if err := agent.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "srv lists the silently stopped a1 as Left", func() bool {
		mi, ok := stateOf(srv, "a1")
		return ok && mi.State == Left
	})
}
