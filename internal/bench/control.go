package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"time"
)

// The control protocol between the benchmark (parent) and a child process
// running simulated agents ("everynode bench agents"): one JSON value per
// line, requests on the child's stdin, replies on its stdout. The child
// first writes a hello; then every request gets exactly one reply with the
// request's op, in order:
//
//	child  → {"op":"hello","pid":1234}
//	parent → {"op":"start","spec":{"server":…,"ca_pem":…,"nodes":[{"name":…,"token":…}],…}}
//	child  → {"op":"start"}                       (every agent started; or "err")
//	parent → {"op":"record","on":true}            (time pod status writes, or stop timing)
//	parent → {"op":"kill","name":"sim-00050"}     (that agent crashes: no gossip leave)
//	parent → {"op":"report"}
//	child  → {"op":"report","dials":3,"samples_us":[…],"gossip_log":[…],"traffic":{"api_in":…,…}}
//	parent → {"op":"profile","on":true,"path":F}  (write a CPU profile of this process to F, until
//	                                               {"op":"profile"} without "on": an idle window's)
//	parent → {"op":"fanout","on":true}            (open a Services watch per agent; "on" false: close them)
//	parent → {"op":"fanout-wait","rv":"123","timeout_ms":60000}
//	child  → {"op":"fanout-wait","receipts_ns":[…],"missing":0}  (when each watch saw that version)
//	parent → {"op":"stop"}                        (the child stops its agents, replies, exits)
//
// A child whose stdin closes stops its agents and exits too, so a parent
// that dies leaves no orphans. A start spec with "burn": N and no nodes
// makes the child a CPU load instead: N goroutines spinning until stop.
const (
	opHello   = "hello"
	opStart   = "start"
	opRecord  = "record"
	opKill    = "kill"
	opReport  = "report"
	opStop    = "stop"
	opProfile = "profile"
	opFanout  = "fanout"
	opFanWait = "fanout-wait"
)

// IdleProfileHz is the sampling rate of a child's CPU profile: an idle agent
// runs a few ms a second, which pprof's default 100 Hz would sample about
// once every two seconds.
const IdleProfileHz = 1000

// pprofDefaultHz is the rate runtime/pprof.StartCPUProfile sets.
const pprofDefaultHz = 100

// childSpec is what a child runs: agents for Nodes against Server, or a CPU
// burner of Burn goroutines.
type childSpec struct {
	Server string `json:"server,omitempty"`
	CAPEM  []byte `json:"ca_pem,omitempty"`
	// GossipKey, when set, makes every agent a gossip member joining Seeds.
	GossipKey []byte   `json:"gossip_key,omitempty"`
	Seeds     []string `json:"seeds,omitempty"`
	// GossipProfile is the members' profile ("" is lan).
	GossipProfile string `json:"gossip_profile,omitempty"`
	// RealHeartbeat: post Node status at the real agent's period.
	RealHeartbeat bool `json:"real_heartbeat,omitempty"`
	// OwnConnections: one HTTP/2 connection per agent.
	OwnConnections bool        `json:"own_connections,omitempty"`
	Nodes          []childNode `json:"nodes,omitempty"`
	Burn           int         `json:"burn,omitempty"`
}

// childNode is one simulated node: its name and node credential.
type childNode struct {
	Name  string `json:"name"`
	Token string `json:"token"`
}

// request is a parent → child message.
type request struct {
	Op   string     `json:"op"`
	Spec *childSpec `json:"spec,omitempty"`
	On   bool       `json:"on,omitempty"`
	Name string     `json:"name,omitempty"`
	// Path is where a profile request writes the profile, sampling Hz
	// times a second (0: IdleProfileHz).
	Path string `json:"path,omitempty"`
	Hz   int    `json:"hz,omitempty"`
	// RV and TimeoutMS: a fanout-wait request's version and bound.
	RV        string `json:"rv,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
}

// reply is a child → parent message.
type reply struct {
	Op  string `json:"op"`
	Err string `json:"err,omitempty"`
	PID int    `json:"pid,omitempty"`
	// Dials, SamplesUS (microseconds) and GossipLog answer a report.
	Dials     int      `json:"dials,omitempty"`
	SamplesUS []int64  `json:"samples_us,omitempty"`
	GossipLog []string `json:"gossip_log,omitempty"`
	// Traffic answers a report: the child's agents' bytes so far.
	Traffic *Traffic `json:"traffic,omitempty"`
	// ReceiptsNS and Missing answer a fanout-wait.
	ReceiptsNS []int64 `json:"receipts_ns,omitempty"`
	Missing    int     `json:"missing,omitempty"`
}

// startFunc starts what a child spec describes.
type startFunc func(ctx context.Context, spec childSpec) (agentFleet, error)

// ServeAgents is the child side of the control protocol ("everynode bench
// agents"): it reads requests from in and writes replies to out until a stop
// request, the end of in, or the end of ctx (which closes in), and stops
// every agent it started before returning. Its simulated agents take the
// same code path as the in-process ones. Logs go to log; out carries
// nothing but replies.
func ServeAgents(ctx context.Context, in io.ReadCloser, out io.Writer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return serveControl(ctx, in, out, func(ctx context.Context, spec childSpec) (agentFleet, error) {
		if spec.Burn > 0 {
			return startBurner(spec.Burn), nil
		}
		t := fleetTarget{url: spec.Server, caPEM: spec.CAPEM, gossipKey: spec.GossipKey, seeds: spec.Seeds,
			gossipProfile: spec.GossipProfile, realHeartbeat: spec.RealHeartbeat, ownConns: spec.OwnConnections}
		tokens := make(map[string]string, len(spec.Nodes))
		names := make([]string, len(spec.Nodes))
		for i, n := range spec.Nodes {
			tokens[n.Name], names[i] = n.Token, n.Name
		}
		t.token = func(name string) string { return tokens[name] }
		return startFleet(ctx, t, names, log.With("side", "agent"))
	})
}

// serveControl runs the child's request loop over in and out; start makes
// the fleet a start request asks for.
func serveControl(ctx context.Context, in io.ReadCloser, out io.Writer, start startFunc) (err error) {
	enc := json.NewEncoder(out)
	// The reader goroutine ends when in ends or the loop returns (which
	// closes quit and in).
	reqs := make(chan request)
	readErr := make(chan error, 1)
	readDone, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(reqs)
		dec := json.NewDecoder(in)
		for {
			var r request
			if err := dec.Decode(&r); err != nil {
				if !errors.Is(err, io.EOF) {
					readErr <- err
				}
				return
			}
			select {
			case reqs <- r:
			case <-quit:
				return
			}
		}
	}()
	var fl agentFleet
	var prof cpuProfile
	defer func() {
		prof.stop()
		close(quit)
		if fl != nil {
			fl.stop()
		}
		in.Close()
		<-readDone
	}()
	if err := enc.Encode(reply{Op: opHello, PID: os.Getpid()}); err != nil {
		return fmt.Errorf("bench agents: write hello: %w", err)
	}
	for {
		var r request
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case r, ok = <-reqs:
		}
		if !ok {
			select {
			case err := <-readErr:
				return fmt.Errorf("bench agents: read request: %w", err)
			default:
				return nil // stdin closed: the parent is gone or done
			}
		}
		rep := reply{Op: r.Op}
		var err error
		switch {
		case r.Op == opStart && fl != nil:
			err = errors.New("already started")
		case r.Op == opStart && r.Spec == nil:
			err = errors.New("start without a spec")
		case r.Op == opStart:
			fl, err = start(ctx, *r.Spec)
		case r.Op == opProfile && r.On:
			err = prof.start(r.Path, r.Hz)
		case r.Op == opProfile:
			err = prof.stop()
		case r.Op == opStop:
			if fl != nil {
				fl.stop()
			}
			if err := enc.Encode(rep); err != nil {
				return fmt.Errorf("bench agents: write reply: %w", err)
			}
			return nil
		case fl == nil:
			err = fmt.Errorf("%q before start", r.Op)
		case r.Op == opRecord:
			err = fl.record(ctx, r.On)
		case r.Op == opKill:
			err = fl.kill(ctx, r.Name)
		case r.Op == opFanout:
			err = fl.fanoutWatch(ctx, r.On)
		case r.Op == opFanWait:
			rep.ReceiptsNS, rep.Missing, err = fl.fanoutWait(ctx, r.RV, time.Duration(r.TimeoutMS)*time.Millisecond)
		case r.Op == opReport:
			var fr fleetReport
			if fr, err = fl.report(ctx); err == nil {
				rep.Dials, rep.GossipLog, rep.Traffic = fr.Dials, fr.GossipLog, &fr.Traffic
				rep.SamplesUS = make([]int64, len(fr.Samples))
				for i, d := range fr.Samples {
					rep.SamplesUS[i] = d.Microseconds()
				}
			}
		default:
			err = fmt.Errorf("unknown op %q", r.Op)
		}
		if err != nil {
			rep.Err = err.Error()
		}
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("bench agents: write reply: %w", err)
		}
	}
}

// cpuProfile is a child's CPU profile, written to a file while it runs.
type cpuProfile struct{ f *os.File }

func (p *cpuProfile) start(path string, hz int) error {
	if p.f != nil {
		return errors.New("a CPU profile is already running")
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	// StartCPUProfile keeps a rate set before it (and says so on stderr);
	// its own is pprofDefaultHz.
	if hz == 0 {
		hz = IdleProfileHz
	}
	if hz != pprofDefaultHz {
		runtime.SetCPUProfileRate(hz)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("cpu profile: %w", err)
	}
	p.f = f
	return nil
}

// stop ends the profile, if one runs.
func (p *cpuProfile) stop() error {
	if p.f == nil {
		return nil
	}
	pprof.StopCPUProfile()
	err := p.f.Close()
	p.f = nil
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	return nil
}

// burner is a child's CPU load: goroutines spinning until stop.
type burner struct {
	quit     chan struct{}
	wg       sync.WaitGroup
	stopOnce sync.Once
}

var _ agentFleet = (*burner)(nil)

func startBurner(n int) *burner {
	b := &burner{quit: make(chan struct{})}
	for range n {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			for x := 0; ; x++ {
				if x%(1<<16) == 0 {
					select {
					case <-b.quit:
						return
					default:
					}
				}
			}
		}()
	}
	return b
}

func (b *burner) record(context.Context, bool) error { return nil }

func (b *burner) report(context.Context) (fleetReport, error) { return fleetReport{}, nil }

func (b *burner) kill(context.Context, string) error {
	return errors.New("a CPU burner runs no agents")
}

func (b *burner) fanoutWatch(context.Context, bool) error {
	return errors.New("a CPU burner runs no agents")
}

func (b *burner) fanoutWait(context.Context, string, time.Duration) ([]int64, int, error) {
	return nil, 0, errors.New("a CPU burner runs no agents")
}

func (b *burner) stop() {
	b.stopOnce.Do(func() {
		close(b.quit)
		b.wg.Wait()
	})
}

// samplesFromUS converts a reply's microsecond samples.
func samplesFromUS(us []int64) []time.Duration {
	out := make([]time.Duration, len(us))
	for i, u := range us {
		out[i] = time.Duration(u) * time.Microsecond
	}
	return out
}
