package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/internal/agentruntime"
)

// startGossipBatch is how many children with gossip start their agents at
// once: one, so each child has joined before the next starts. Each join is a
// full state exchange with the server's member plus an alive message every
// member retransmits. A hundred single-agent processes joining at once on two
// cores (batches of 4 too) delayed each other's probe answers past the
// 150 ms probe timeout, and the suspicions, refutations and retransmits that
// followed kept the machine saturated: the members flapped for minutes.
// Started one by one they settle and then idle at about 4 ms of CPU a second
// each (bench fleet --idle-cpu).
const startGossipBatch = 1

// childStopTimeout bounds how long a child may take to stop its agents and
// exit before it is killed.
const childStopTimeout = 15 * time.Second

// procChild is one child process speaking the control protocol (see
// control.go). Requests are serialised; every wait is bounded.
type procChild struct {
	cmd   *exec.Cmd
	pid   int
	stdin *os.File
	enc   *json.Encoder
	log   *slog.Logger
	// onExit runs once the child has exited and was reaped, before exited
	// closes.
	onExit func(*procChild)

	replies chan reply    // from the reader goroutine; closed when stdout ends
	quit    chan struct{} // closed by stop: nobody reads replies any more
	exited  chan struct{} // closed once the child was reaped
	waitErr error         // set before exited closes

	mu       sync.Mutex // one request at a time
	stopOnce sync.Once
}

// startChild starts the command build returns as a child, with its stdin and
// stdout as the control channel, and waits for its hello. env is added to
// the child's environment (a later entry wins over an inherited one).
func startChild(ctx context.Context, build func(context.Context) *exec.Cmd, env []string, timeout time.Duration, log *slog.Logger, onExit func(*procChild)) (*procChild, error) {
	cmd := build(ctx)
	if len(env) > 0 {
		cmd.Env = append(cmd.Environ(), env...)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("bench: child stdin: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("bench: child stdout: %w", err)
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("bench: start agent child %s: %w", cmd.Path, err)
	}
	c := &procChild{cmd: cmd, pid: cmd.Process.Pid, stdin: inW, enc: json.NewEncoder(inW), log: log.With("child", cmd.Process.Pid),
		onExit: onExit, replies: make(chan reply), quit: make(chan struct{}), exited: make(chan struct{})}
	go c.read(outR)
	hello, err := c.await(ctx, opHello, timeout)
	if err != nil {
		c.stop()
		return nil, err
	}
	if hello.PID != c.pid {
		c.log.Warn("child's hello names another pid", "hello_pid", hello.PID)
	}
	return c, nil
}

// read forwards the child's replies until its stdout ends, then reaps it.
func (c *procChild) read(out *os.File) {
	dec := json.NewDecoder(out)
	for {
		var r reply
		if err := dec.Decode(&r); err != nil {
			break
		}
		select {
		case c.replies <- r:
		case <-c.quit:
		}
	}
	close(c.replies)
	out.Close()
	c.waitErr = c.cmd.Wait()
	if c.onExit != nil {
		c.onExit(c)
	}
	close(c.exited)
}

// await waits for the reply to op.
func (c *procChild) await(ctx context.Context, op string, timeout time.Duration) (reply, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r, ok := <-c.replies:
		if !ok {
			select {
			case <-c.exited:
				return reply{}, fmt.Errorf("bench: agent child %d exited before answering %s: %v", c.pid, op, c.waitErr)
			case <-t.C:
				return reply{}, fmt.Errorf("bench: agent child %d closed its stdout before answering %s", c.pid, op)
			}
		}
		if r.Op != op {
			return reply{}, fmt.Errorf("bench: agent child %d answered %q to %q", c.pid, r.Op, op)
		}
		if r.Err != "" {
			return r, fmt.Errorf("bench: agent child %d: %s: %s", c.pid, op, r.Err)
		}
		return r, nil
	case <-t.C:
		return reply{}, fmt.Errorf("bench: agent child %d did not answer %s within %s", c.pid, op, timeout)
	case <-ctx.Done():
		return reply{}, fmt.Errorf("bench: agent child %d: %s: %w", c.pid, op, ctx.Err())
	}
}

// request sends r and waits (at most timeout) for its reply.
func (c *procChild) request(ctx context.Context, r request, timeout time.Duration) (reply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stdin.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return reply{}, fmt.Errorf("bench: agent child %d: %w", c.pid, err)
	}
	if err := c.enc.Encode(r); err != nil {
		return reply{}, fmt.Errorf("bench: agent child %d: send %s: %w", c.pid, r.Op, err)
	}
	return c.await(ctx, r.Op, timeout)
}

// stop asks the child to stop, closes its stdin, and kills it if it has not
// exited within childStopTimeout. It is idempotent and returns once the
// child was reaped.
func (c *procChild) stop() {
	c.stopOnce.Do(func() {
		select {
		case <-c.exited:
		default:
			if _, err := c.request(context.Background(), request{Op: opStop}, childStopTimeout); err != nil {
				c.log.Warn("agent child did not stop cleanly", "err", err)
			}
		}
		close(c.quit)
		c.stdin.Close()
		select {
		case <-c.exited:
			return
		case <-time.After(childStopTimeout):
		}
		c.log.Warn("agent child still running: killing it")
		_ = c.cmd.Process.Kill()
		<-c.exited
	})
}

// cpuSeconds is the CPU time the child used so far (until it exited).
func (c *procChild) cpuSeconds() float64 {
	select {
	case <-c.exited:
		if st := c.cmd.ProcessState; st != nil {
			return (st.UserTime() + st.SystemTime()).Seconds()
		}
		return 0
	default:
		return procCPUSeconds(c.pid)
	}
}

// procFleet is the simulated nodes run by child processes: K children, each
// running its share of the agents through the in-process fleet's code path
// (its own HTTP/2 transport; a gossip member per agent with gossip).
type procFleet struct {
	children []*procChild
	timeout  time.Duration
	log      *slog.Logger
	static   *nodelifecycle.StaticMembership // nil with gossip
	stopping atomic.Bool

	mu     sync.Mutex
	byName map[string]*procChild
	names  map[*procChild][]string

	stopOnce sync.Once
}

var _ agentFleet = (*procFleet)(nil)

// childEnviron is what the agent children add to their environment, for k
// children running nodes agents on a machine of cpus CPUs. A child that runs
// one agent stands for one agent process: it runs with the lean agent's
// runtime settings (agentruntime: GOGC=50, GOMAXPROCS=1), each unless this
// process's environment (lookupEnv) sets it, as the agent would be told. A
// child of many agents is a load generator with Go's defaults, except that
// when the children outnumber the CPUs each gets GOMAXPROCS=1: a second P in
// each of a hundred processes on two cores only adds threads that wake and
// spin looking for work.
func childEnviron(k, nodes, cpus int, lookupEnv func(string) (string, bool)) []string {
	if k > 0 && k >= nodes {
		return agentruntime.Environ(lookupEnv)
	}
	if k > cpus {
		return []string{"GOMAXPROCS=1"}
	}
	return nil
}

// spawnProcFleet starts k children, with env added to their environment
// (childEnviron), and waits for each one's hello; no agent runs yet (see
// start).
func spawnProcFleet(ctx context.Context, build func(context.Context) *exec.Cmd, k int, env []string, static *nodelifecycle.StaticMembership, timeout time.Duration, log *slog.Logger) (*procFleet, error) {
	p := &procFleet{children: make([]*procChild, k), timeout: timeout, log: log, static: static,
		byName: map[string]*procChild{}, names: map[*procChild][]string{}}
	errs := make([]error, k)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range k {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			p.children[i], errs[i] = startChild(ctx, build, env, timeout, log, p.childExited)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// childExited marks the agents of a child that exited on its own dead.
func (p *procFleet) childExited(c *procChild) {
	if p.stopping.Load() {
		return
	}
	p.mu.Lock()
	names := p.names[c]
	p.mu.Unlock()
	p.log.Warn("agent child exited", "agents", len(names), "err", c.waitErr)
	if p.static != nil {
		for _, n := range names {
			p.static.SetAlive(n, false)
		}
	}
}

// start gives each child a contiguous share of names and waits until every
// child started its agents. With gossip, at most startGossipBatch children
// start (and join) at a time.
func (p *procFleet) start(ctx context.Context, t fleetTarget, names []string) error {
	k := len(p.children)
	n := 16
	if t.gossipKey != nil {
		n = startGossipBatch
	}
	return p.eachN(n, func(i int, c *procChild) error {
		share := names[i*len(names)/k : (i+1)*len(names)/k]
		spec := childSpec{Server: t.url, CAPEM: t.caPEM, GossipKey: t.gossipKey, Seeds: t.seeds, GossipProfile: t.gossipProfile,
			RealHeartbeat: t.realHeartbeat, OwnConnections: t.ownConns, Nodes: make([]childNode, len(share))}
		for j, n := range share {
			spec.Nodes[j] = childNode{Name: n, Token: t.token(n)}
		}
		p.mu.Lock()
		p.names[c] = share
		for _, n := range share {
			p.byName[n] = c
		}
		p.mu.Unlock()
		if _, err := c.request(ctx, request{Op: opStart, Spec: &spec}, p.timeout); err != nil {
			return err
		}
		if p.static != nil {
			for _, n := range share {
				p.static.SetAlive(n, true)
			}
		}
		return nil
	})
}

// each runs f for every child, a few at a time, and joins the errors.
func (p *procFleet) each(f func(i int, c *procChild) error) error {
	return p.eachN(16, f)
}

// eachN is each with at most n calls of f at a time.
func (p *procFleet) eachN(n int, f func(i int, c *procChild) error) error {
	errs := make([]error, len(p.children))
	var wg sync.WaitGroup
	sem := make(chan struct{}, n)
	for i, c := range p.children {
		if c == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f(i, c)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (p *procFleet) record(ctx context.Context, on bool) error {
	return p.each(func(_ int, c *procChild) error {
		_, err := c.request(ctx, request{Op: opRecord, On: on}, p.timeout)
		return err
	})
}

func (p *procFleet) report(ctx context.Context) (fleetReport, error) {
	reps := make([]reply, len(p.children))
	err := p.each(func(i int, c *procChild) error {
		var err error
		reps[i], err = c.request(ctx, request{Op: opReport}, p.timeout)
		return err
	})
	var fr fleetReport
	for _, r := range reps {
		fr.Dials += r.Dials
		fr.Samples = append(fr.Samples, samplesFromUS(r.SamplesUS)...)
		fr.GossipLog = append(fr.GossipLog, r.GossipLog...)
		if r.Traffic != nil {
			fr.Traffic = fr.Traffic.add(*r.Traffic)
		}
	}
	return fr, err
}

func (p *procFleet) kill(ctx context.Context, name string) error {
	p.mu.Lock()
	c := p.byName[name]
	p.mu.Unlock()
	if c == nil {
		return fmt.Errorf("bench: no agent child runs %s", name)
	}
	if p.static != nil {
		p.static.SetAlive(name, false)
	}
	_, err := c.request(ctx, request{Op: opKill, Name: name}, p.timeout)
	return err
}

func (p *procFleet) fanoutWatch(ctx context.Context, on bool) error {
	return p.each(func(_ int, c *procChild) error {
		_, err := c.request(ctx, request{Op: opFanout, On: on}, p.timeout)
		return err
	})
}

func (p *procFleet) fanoutWait(ctx context.Context, rv string, timeout time.Duration) ([]int64, int, error) {
	reps := make([]reply, len(p.children))
	err := p.eachN(len(p.children), func(i int, c *procChild) error {
		var err error
		reps[i], err = c.request(ctx, request{Op: opFanWait, RV: rv, TimeoutMS: timeout.Milliseconds()}, timeout+p.timeout)
		return err
	})
	var got []int64
	missing := 0
	for _, r := range reps {
		got = append(got, r.ReceiptsNS...)
		missing += r.Missing
	}
	return got, missing, err
}

// stop stops every child (bounded: a child that does not exit is killed).
func (p *procFleet) stop() {
	p.stopOnce.Do(func() {
		p.stopping.Store(true)
		_ = p.each(func(_ int, c *procChild) error {
			c.stop()
			return nil
		})
	})
}

// childMem is the children's memory, summed, in MiB.
type childMem struct{ rss, anon float64 }

// mem reads the children's VmRSS and RssAnon.
func (p *procFleet) mem() (childMem, error) {
	var m childMem
	for _, c := range p.children {
		rss, err := procStatusKB(c.pid, "VmRSS")
		if err != nil {
			return m, fmt.Errorf("bench: agent child memory: %w", err)
		}
		anon, err := procStatusKB(c.pid, "RssAnon")
		if err != nil {
			return m, fmt.Errorf("bench: agent child memory: %w", err)
		}
		m.rss += float64(rss) / 1024
		m.anon += float64(anon) / 1024
	}
	return m, nil
}

// cpuSeconds is the CPU time the children used so far.
func (p *procFleet) cpuSeconds() float64 {
	s := 0.0
	for _, c := range p.children {
		s += c.cpuSeconds()
	}
	return s
}

// startCPULoad starts a child that keeps n goroutines spinning (with
// GOMAXPROCS n, so each can have a CPU) until stop.
func startCPULoad(ctx context.Context, build func(context.Context) *exec.Cmd, n int, timeout time.Duration, log *slog.Logger) (*procChild, error) {
	c, err := startChild(ctx, build, []string{"GOMAXPROCS=" + strconv.Itoa(n)}, timeout, log.With("role", "cpu-load"), nil)
	if err != nil {
		return nil, err
	}
	if _, err := c.request(ctx, request{Op: opStart, Spec: &childSpec{Burn: n}}, timeout); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// pids returns the children's process ids.
func (p *procFleet) pids() []int {
	out := make([]int, len(p.children))
	for i, c := range p.children {
		out[i] = c.pid
	}
	return out
}

// profiler returns a function that starts (true) and stops (false) a CPU
// profile of the first child written to path, sampling hz times a second (0:
// IdleProfileHz); nil when path is empty.
func (p *procFleet) profiler(path string, hz int) func(ctx context.Context, on bool) error {
	if path == "" {
		return nil
	}
	return func(ctx context.Context, on bool) error {
		_, err := p.children[0].request(ctx, request{Op: opProfile, On: on, Path: path, Hz: hz}, p.timeout)
		return err
	}
}
