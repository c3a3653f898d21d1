package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/internal/testkit"
)

// fakeFleet is an agentFleet that runs nothing and records its calls. Its
// report answers one sample of 1 ms per node while recording is on, one
// dial, and a gossip line per killed node.
type fakeFleet struct {
	mu        sync.Mutex
	names     []string
	recording bool
	killed    []string
	stops     int
	fanning   bool
}

var _ agentFleet = (*fakeFleet)(nil)

func (f *fakeFleet) record(_ context.Context, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recording = on
	return nil
}

func (f *fakeFleet) report(context.Context) (fleetReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := fleetReport{Dials: 1}
	if f.recording {
		for range f.names {
			r.Samples = append(r.Samples, time.Millisecond)
		}
	}
	for _, k := range f.killed {
		r.GossipLog = append(r.GossipLog, "killed "+k)
	}
	return r, nil
}

func (f *fakeFleet) kill(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.names, name) || slices.Contains(f.killed, name) {
		return fmt.Errorf("no running agent %s", name)
	}
	f.killed = append(f.killed, name)
	return nil
}

func (f *fakeFleet) fanoutWatch(_ context.Context, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fanning = on
	return nil
}

// fanoutWait answers, for each running agent, a receipt at rv (a number)
// nanoseconds; killed agents are missing.
func (f *fakeFleet) fanoutWait(_ context.Context, rv string, _ time.Duration) ([]int64, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.fanning {
		return nil, 0, errors.New("no fan-out watches open")
	}
	at, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		return nil, 0, err
	}
	var got []int64
	for _, n := range f.names {
		if !slices.Contains(f.killed, n) {
			got = append(got, at)
		}
	}
	return got, len(f.killed), nil
}

func (f *fakeFleet) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stops++
}

func fakeStart(spec childSpec) (agentFleet, error) {
	if spec.Burn > 0 {
		return startBurner(spec.Burn), nil
	}
	f := &fakeFleet{}
	for _, n := range spec.Nodes {
		f.names = append(f.names, n.Name)
	}
	return f, nil
}

// controlPeer drives serveControl over pipes, as a parent would.
type controlPeer struct {
	t      *testing.T
	in     *io.PipeWriter
	enc    *json.Encoder
	dec    *json.Decoder
	served chan error
	fleet  chan *fakeFleet // the fleet a start made
}

func newControlPeer(t *testing.T, ctx context.Context) *controlPeer {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &controlPeer{t: t, in: inW, enc: json.NewEncoder(inW), dec: json.NewDecoder(outR),
		served: make(chan error, 1), fleet: make(chan *fakeFleet, 1)}
	go func() {
		err := serveControl(ctx, inR, outW, func(_ context.Context, spec childSpec) (agentFleet, error) {
			f, err := fakeStart(spec)
			if ff, ok := f.(*fakeFleet); ok {
				p.fleet <- ff
			}
			return f, err
		})
		outW.Close()
		p.served <- err
	}()
	t.Cleanup(func() {
		inW.Close()
		outR.Close()
	})
	return p
}

func (p *controlPeer) next() reply {
	p.t.Helper()
	var r reply
	if err := p.dec.Decode(&r); err != nil {
		p.t.Fatalf("read reply: %v", err)
	}
	return r
}

func (p *controlPeer) do(r request) reply {
	p.t.Helper()
	if err := p.enc.Encode(r); err != nil {
		p.t.Fatalf("send %s: %v", r.Op, err)
	}
	rep := p.next()
	if rep.Op != r.Op {
		p.t.Fatalf("sent %q, got a reply to %q", r.Op, rep.Op)
	}
	return rep
}

func (p *controlPeer) exit() error {
	p.t.Helper()
	select {
	case err := <-p.served:
		return err
	case <-time.After(30 * time.Second):
		p.t.Fatal("serveControl did not return")
		return nil
	}
}

func TestServeControlProtocol(t *testing.T) {
	p := newControlPeer(t, context.Background())
	if h := p.next(); h.Op != opHello || h.PID != os.Getpid() {
		t.Fatalf("first line = %+v, want a hello with this pid", h)
	}
	if r := p.do(request{Op: opRecord, On: true}); r.Err == "" {
		t.Errorf("record before start answered without an error: %+v", r)
	}
	if r := p.do(request{Op: opStart}); r.Err == "" {
		t.Errorf("start without a spec answered without an error: %+v", r)
	}
	spec := &childSpec{Server: "https://127.0.0.1:1", Nodes: []childNode{{Name: "a", Token: "ta"}, {Name: "b", Token: "tb"}}}
	if r := p.do(request{Op: opStart, Spec: spec}); r.Err != "" {
		t.Fatalf("start: %s", r.Err)
	}
	f := <-p.fleet
	if r := p.do(request{Op: opStart, Spec: spec}); r.Err == "" {
		t.Errorf("a second start answered without an error")
	}
	if r := p.do(request{Op: "dance"}); r.Err == "" {
		t.Errorf("an unknown op answered without an error")
	}
	if r := p.do(request{Op: opRecord, On: true}); r.Err != "" {
		t.Fatalf("record: %s", r.Err)
	}
	if r := p.do(request{Op: opKill, Name: "b"}); r.Err != "" {
		t.Fatalf("kill b: %s", r.Err)
	}
	if r := p.do(request{Op: opKill, Name: "nobody"}); r.Err == "" {
		t.Errorf("killing an unknown agent answered without an error")
	}
	r := p.do(request{Op: opReport})
	if r.Err != "" || r.Dials != 1 || !slices.Equal(r.SamplesUS, []int64{1000, 1000}) || !slices.Equal(r.GossipLog, []string{"killed b"}) {
		t.Errorf("report = %+v, want 1 dial, two 1 ms samples, one gossip line", r)
	}
	if got := samplesFromUS(r.SamplesUS); !slices.Equal(got, []time.Duration{time.Millisecond, time.Millisecond}) {
		t.Errorf("samplesFromUS = %v", got)
	}
	if r := p.do(request{Op: opRecord, On: false}); r.Err != "" {
		t.Fatalf("record off: %s", r.Err)
	}
	if r := p.do(request{Op: opReport}); len(r.SamplesUS) != 0 {
		t.Errorf("report after recording off has %d samples", len(r.SamplesUS))
	}
	if r := p.do(request{Op: opFanWait, RV: "7", TimeoutMS: 1}); r.Err == "" {
		t.Errorf("fanout-wait without watches answered without an error: %+v", r)
	}
	if r := p.do(request{Op: opFanout, On: true}); r.Err != "" {
		t.Fatalf("fanout on: %s", r.Err)
	}
	if r := p.do(request{Op: opFanWait, RV: "7", TimeoutMS: 1}); r.Err != "" || !slices.Equal(r.ReceiptsNS, []int64{7}) || r.Missing != 1 {
		t.Errorf("fanout-wait = %+v, want a receipt at 7 for a, b missing", r)
	}
	if r := p.do(request{Op: opFanout, On: false}); r.Err != "" {
		t.Fatalf("fanout off: %s", r.Err)
	}
	p.do(request{Op: opStop})
	if err := p.exit(); err != nil {
		t.Errorf("serveControl after stop: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stops == 0 || !slices.Equal(f.killed, []string{"b"}) {
		t.Errorf("fleet after stop: stops %d, killed %v", f.stops, f.killed)
	}
}

func TestServeControlEndsWithStdin(t *testing.T) {
	p := newControlPeer(t, context.Background())
	p.next()
	p.do(request{Op: opStart, Spec: &childSpec{Nodes: []childNode{{Name: "a"}}}})
	f := <-p.fleet
	p.in.Close() // the parent went away
	if err := p.exit(); err != nil {
		t.Errorf("serveControl after stdin closed: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stops == 0 {
		t.Error("the agents were not stopped when stdin closed")
	}
}

func TestServeControlEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := newControlPeer(t, ctx)
	p.next()
	p.do(request{Op: opStart, Spec: &childSpec{Nodes: []childNode{{Name: "a"}}}})
	f := <-p.fleet
	cancel()
	if err := p.exit(); !errors.Is(err, context.Canceled) {
		t.Errorf("serveControl after cancel = %v, want context.Canceled", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stops == 0 {
		t.Error("the agents were not stopped when ctx ended")
	}
}

func TestServeControlBadInput(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serveControl(context.Background(), inR, outW, func(context.Context, childSpec) (agentFleet, error) { return &fakeFleet{}, nil })
	}()
	dec := json.NewDecoder(outR)
	var hello reply
	if err := dec.Decode(&hello); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, outR)
	if _, err := io.WriteString(inW, "{not json\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("serveControl accepted a line that is not JSON")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serveControl did not return after bad input")
	}
	inW.Close()
	outR.Close()
}

// fakeChildCommand re-runs the test binary as a child serving the control
// protocol with fake fleets (see TestMain).
func fakeChildCommand(ctx context.Context) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=fake")
	cmd.Stderr = os.Stderr
	return cmd
}

func TestProcFleetChildren(t *testing.T) {
	ctx := context.Background()
	static := nodelifecycle.NewStaticMembership()
	log := slog.New(slog.DiscardHandler)
	pf, err := spawnProcFleet(ctx, fakeChildCommand, 3, nil, static, 30*time.Second, log)
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	defer pf.stop()
	names := nodeNames(7)
	target := fleetTarget{url: "https://127.0.0.1:1", token: func(n string) string { return "t-" + n }}
	if err := pf.start(ctx, target, names); err != nil {
		t.Fatalf("start: %v", err)
	}
	alive := func() map[string]bool {
		m := map[string]bool{}
		for _, mb := range static.Members() {
			m[mb.Name] = mb.Alive
		}
		return m
	}
	for _, n := range names {
		if !alive()[n] {
			t.Errorf("%s not alive in the static membership after start", n)
		}
	}
	if err := pf.record(ctx, true); err != nil {
		t.Fatalf("record: %v", err)
	}
	if err := pf.kill(ctx, names[3]); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if alive()[names[3]] {
		t.Errorf("%s still alive after kill", names[3])
	}
	if err := pf.kill(ctx, "nobody"); err == nil {
		t.Error("killing an unknown agent succeeded")
	}
	rep, err := pf.report(ctx)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	if rep.Dials != 3 || len(rep.Samples) != len(names) || !slices.Equal(rep.GossipLog, []string{"killed " + names[3]}) {
		t.Errorf("report = %+v, want 3 dials, %d samples, one gossip line", rep, len(names))
	}
	if err := pf.fanoutWatch(ctx, true); err != nil {
		t.Fatalf("fanout on: %v", err)
	}
	got, missing, err := pf.fanoutWait(ctx, "42", time.Second)
	if err != nil || len(got) != len(names)-1 || missing != 1 || slices.ContainsFunc(got, func(at int64) bool { return at != 42 }) {
		t.Errorf("fanoutWait = %v, %d missing, %v; want %d receipts at 42, 1 missing", got, missing, err, len(names)-1)
	}
	if m, err := pf.mem(); err != nil || m.rss <= 0 || m.anon <= 0 || m.anon > m.rss {
		t.Errorf("mem = %+v, %v", m, err)
	}

	// A child that dies takes its agents with it.
	last := pf.children[2]
	if err := last.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-last.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("killed child not reaped")
	}
	pf.mu.Lock()
	lastNames := pf.names[last]
	pf.mu.Unlock()
	if len(lastNames) == 0 {
		t.Fatal("the last child ran no agents")
	}
	for _, n := range lastNames {
		if alive()[n] {
			t.Errorf("%s alive although its child died", n)
		}
	}
	if _, err := last.request(ctx, request{Op: opReport}, 5*time.Second); err == nil {
		t.Error("a dead child answered")
	}

	pf.stop()
	for i, c := range pf.children {
		select {
		case <-c.exited:
		default:
			t.Errorf("child %d still running after stop", i)
		}
	}
}

func TestChildExitsWhenStdinCloses(t *testing.T) {
	c, err := startChild(context.Background(), fakeChildCommand, nil, 30*time.Second, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	c.stdin.Close() // as if this process had died
	select {
	case <-c.exited:
		if c.waitErr != nil {
			t.Errorf("child exit: %v", c.waitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("child still running 30 s after its stdin closed")
	}
}

func TestCPULoadChild(t *testing.T) {
	c, err := startCPULoad(context.Background(), fakeChildCommand, 1, 30*time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	testkit.Eventually(t, 30*time.Second, func() error {
		if got := c.cpuSeconds(); got < 0.05 {
			return fmt.Errorf("the CPU load child used %.2f CPU s", got)
		}
		return nil
	})
	if _, err := c.request(context.Background(), request{Op: opKill, Name: "x"}, 10*time.Second); err == nil {
		t.Error("the CPU load child accepted a kill")
	}
	c.stop()
	if got := c.cpuSeconds(); got < 0.05 {
		t.Errorf("cpuSeconds after exit = %.2f", got)
	}
}

func TestProcCPUSeconds(t *testing.T) {
	if got := procCPUSeconds(os.Getpid()); got <= 0 {
		t.Errorf("procCPUSeconds(self) = %v", got)
	}
	if got := procCPUSeconds(-1); got != 0 {
		t.Errorf("procCPUSeconds(-1) = %v", got)
	}
}

func TestQuantiles(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	p50, p99, n := quantiles(d)
	if p50 != 50 || p99 != 99 || n != 100 {
		t.Errorf("quantiles = %v, %v, %d; want 50, 99, 100", p50, p99, n)
	}
	if p50, p99, n := quantiles(nil); p50 != 0 || p99 != 0 || n != 0 {
		t.Errorf("quantiles(nil) = %v, %v, %d", p50, p99, n)
	}
}

func TestGossipRecorder(t *testing.T) {
	g := newGossipRecorder(nil)
	log := slog.NewLogLogger(slog.New(g).With("member", "sim-00001").Handler(), slog.LevelDebug)
	log.Printf("[DEBUG] memberlist: Stream connection from=127.0.0.1:1")
	log.Printf("[INFO] memberlist: Suspect sim-00002 has failed, no acks received")
	slog.New(g).With("member", "bench-server").Debug("gossip: member gone", "peer", "sim-00002", "state", "dead")
	lines := g.lines()
	if len(lines) != 2 {
		t.Fatalf("lines = %q, want 2 (the debug line left out)", lines)
	}
	if want := "sim-00001: [INFO] Suspect sim-00002 has failed"; !strings.Contains(lines[0], want) {
		t.Errorf("line 0 = %q, want it to contain %q", lines[0], want)
	}
	if want := "bench-server: gossip: member gone peer=sim-00002 state=dead"; !strings.Contains(lines[1], want) {
		t.Errorf("line 1 = %q, want it to contain %q", lines[1], want)
	}
	for range maxGossipLines {
		log.Printf("[WARN] memberlist: Refuting a suspect message (from: x)")
	}
	if l := g.lines(); len(l) != maxGossipLines+1 || l[len(l)-1] != "(2 more lines not kept)" {
		t.Errorf("after overflow: %d lines, last %q", len(l), l[len(l)-1])
	}
}

func TestFloorRetry(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrTooManyRequests, true},
		{rpctypes.ErrTimeout, true},
		{fmt.Errorf("wrapped: %w", rpctypes.ErrTimeout), true},
		{rpctypes.ErrKeyNotFound, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, true},
		{nil, false},
	} {
		if got := floorRetry(context.Background(), c.err); got != c.want {
			t.Errorf("floorRetry(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	ended, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ended.Done()
	if floorRetry(ended, context.DeadlineExceeded) {
		t.Error("floorRetry retries the run's own deadline")
	}
}

// A child of one agent runs as the lean agent does (GOGC=50, GOMAXPROCS=1,
// each unless this process's environment sets it); a child of many agents
// keeps Go's defaults but for GOMAXPROCS=1 when children outnumber CPUs.
func TestChildEnviron(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	gogc := func(name string) (string, bool) { return "200", name == "GOGC" }
	for _, tc := range []struct {
		name           string
		k, nodes, cpus int
		lookupEnv      func(string) (string, bool)
		want           []string
	}{
		{"one agent each", 10, 10, 2, none, []string{"GOGC=50", "GOMAXPROCS=1"}},
		{"one agent each, fewer children than CPUs", 1, 1, 8, none, []string{"GOGC=50", "GOMAXPROCS=1"}},
		{"one agent each, GOGC given", 100, 100, 2, gogc, []string{"GOMAXPROCS=1"}},
		{"many agents each, children outnumber CPUs", 4, 10000, 2, none, []string{"GOMAXPROCS=1"}},
		{"many agents each, a CPU each", 2, 1000, 2, none, nil},
		{"no children", 0, 1000, 2, none, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := childEnviron(tc.k, tc.nodes, tc.cpus, tc.lookupEnv); !slices.Equal(got, tc.want) {
				t.Errorf("childEnviron(%d, %d, %d) = %q, want %q", tc.k, tc.nodes, tc.cpus, got, tc.want)
			}
		})
	}
}
