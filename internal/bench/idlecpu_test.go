package bench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func TestReadWakeups(t *testing.T) {
	w0, err := readWakeups(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Block a few times: each sleep is a voluntary switch of some thread.
	for range 5 {
		time.Sleep(time.Millisecond)
	}
	w1, err := readWakeups(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if w1.voluntary <= w0.voluntary || w1.involuntary < w0.involuntary {
		t.Errorf("wake-ups went from %+v to %+v after five sleeps", w0, w1)
	}
	if _, err := readWakeups(-1); err == nil {
		t.Error("readWakeups(-1) answered without an error")
	}
}

func TestIdleCPURates(t *testing.T) {
	// Two processes, four agents: 0.2 and 0.1 CPU seconds and 300 and 100
	// context switches over 10 s.
	s0 := []procSample{{cpuS: 1, wakeups: procWakeups{voluntary: 100, involuntary: 10}}, {cpuS: 2, wakeups: procWakeups{voluntary: 50}}}
	s1 := []procSample{{cpuS: 1.2, wakeups: procWakeups{voluntary: 380, involuntary: 30}}, {cpuS: 2.1, wakeups: procWakeups{voluntary: 150}}}
	var res Result
	idleCPURates(s0, s1, 10, 4, &res)
	near := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("IdleCPUS", res.IdleCPUS, 10)
	near("IdleCPUMsPerS", res.IdleCPUMsPerS, 300.0/10/4) // 0.3 s = 300 ms over 10 s, 4 agents
	near("IdleCPUMsPerSMax", res.IdleCPUMsPerSMax, 200.0/10/2)
	near("IdleVoluntaryPerS", res.IdleVoluntaryPerS, 380.0/10/4)
	near("IdleInvoluntaryPerS", res.IdleInvoluntaryPerS, 20.0/10/4)
	near("IdleWakeupsPerS", res.IdleWakeupsPerS, 400.0/10/4)
}

func TestServeControlProfile(t *testing.T) {
	p := newControlPeer(t, context.Background())
	p.next()
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	if r := p.do(request{Op: opProfile, On: true, Path: path}); r.Err != "" {
		t.Fatalf("profile on: %s", r.Err)
	}
	if r := p.do(request{Op: opProfile, On: true, Path: path}); r.Err == "" {
		t.Error("a second profile answered without an error")
	}
	// Burn some CPU so the profile has samples.
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
		runtime.Gosched()
	}
	if r := p.do(request{Op: opProfile}); r.Err != "" {
		t.Fatalf("profile off: %s", r.Err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b { // a profile is gzipped protobuf
		t.Errorf("the profile file holds %d bytes, not a gzipped profile", len(b))
	}
	if r := p.do(request{Op: opProfile}); r.Err != "" {
		t.Errorf("stopping no profile: %s", r.Err)
	}
	p.do(request{Op: opStop})
	if err := p.exit(); err != nil {
		t.Errorf("serveControl after stop: %v", err)
	}
}
