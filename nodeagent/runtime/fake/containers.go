package fake

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// container is one fake container; guarded by Fake.mu.
type container struct {
	id       string
	spec     runtime.ContainerSpec
	imageID  string
	state    runtime.State
	created  time.Time
	started  time.Time
	finished time.Time
	exitCode int
	reason   string

	exits     bool // the pretend process exits by itself after exitAfter
	exitAfter time.Duration
	exitWith  int

	logs []logLine
	// changed is closed and cleared on every state change or new log line;
	// it is made only when a follower waits, so idle containers hold none.
	changed chan struct{}
}

type logLine struct {
	t    time.Time
	text string
}

func (c *container) log(t time.Time, format string, args ...any) {
	c.logs = append(c.logs, logLine{t: t, text: fmt.Sprintf(format, args...)})
	c.notify()
}

func (c *container) notify() {
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

// settle applies a self-exit that is due by now.
func (c *container) settle(now time.Time) {
	if c.state != runtime.StateRunning || !c.exits {
		return
	}
	at := c.started.Add(c.exitAfter)
	if now.Before(at) {
		return
	}
	c.exit(at, c.exitWith, "")
}

func (c *container) exit(at time.Time, code int, why string) {
	c.state = runtime.StateExited
	c.finished = at
	c.exitCode = code
	c.reason = "Error"
	if code == 0 {
		c.reason = "Completed"
	}
	if why != "" {
		c.log(at, "fake: %s", why)
	}
	c.log(at, "fake: exited with code %d", code)
}

func (f *Fake) get(op, id string) (*container, error) {
	c, ok := f.containers[id]
	if !ok {
		return nil, runtime.Errorf(op, runtime.NotFound, id, "no such container")
	}
	c.settle(f.clock.Now())
	return c, nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func clonePtr(p *int64) *int64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func copySpec(s runtime.ContainerSpec) runtime.ContainerSpec {
	s.Command = slices.Clone(s.Command)
	s.Args = slices.Clone(s.Args)
	s.Env = slices.Clone(s.Env)
	s.Ports = slices.Clone(s.Ports)
	s.Mounts = slices.Clone(s.Mounts)
	s.CapAdd = slices.Clone(s.CapAdd)
	s.CapDrop = slices.Clone(s.CapDrop)
	s.RunAsUser = clonePtr(s.RunAsUser)
	s.RunAsGroup = clonePtr(s.RunAsGroup)
	s.Labels = maps.Clone(s.Labels)
	s.Annotations = maps.Clone(s.Annotations)
	return s
}

// CreateContainer stores a created container; the image must be present and
// the exit annotations well-formed (else kind Invalid).
func (f *Fake) CreateContainer(ctx context.Context, spec runtime.ContainerSpec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("CreateContainer", spec.Image); err != nil {
		return "", err
	}
	if spec.Image == "" {
		return "", runtime.Errorf("create", runtime.Invalid, spec.Name, "no image")
	}
	img, ok := f.images[normalize(spec.Image)]
	if !ok {
		return "", runtime.Errorf("create", runtime.ImageNotFound, spec.Image, "no such image in the fake store")
	}
	after, code, exits, err := parseExit(spec.Annotations, spec.Name)
	if err != nil {
		return "", &runtime.Error{Op: "create", Kind: runtime.Invalid, Subject: spec.Name, Err: err}
	}
	if spec.Init && !exits {
		// An init container's command runs to completion: by default the
		// pretend one succeeds at once.
		after, code, exits = 0, 0, true
	}
	c := &container{
		id:        newID(),
		spec:      copySpec(spec),
		imageID:   img.ID,
		state:     runtime.StateCreated,
		created:   f.clock.Now(),
		exits:     exits,
		exitAfter: after,
		exitWith:  code,
	}
	f.containers[c.id] = c
	return c.id, nil
}

// StartContainer starts a created container; its logs say what it pretends
// to run.
func (f *Fake) StartContainer(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("StartContainer", id); err != nil {
		return err
	}
	c, err := f.get("start", id)
	if err != nil {
		return err
	}
	if c.state != runtime.StateCreated {
		return runtime.Errorf("start", runtime.Other, id, "container is %s, not created", c.state)
	}
	now := f.clock.Now()
	c.state = runtime.StateRunning
	c.started = now
	argv := append(slices.Clone(c.spec.Command), c.spec.Args...)
	what := "the image's default command"
	if len(argv) > 0 {
		what = strconv.Quote(strings.Join(argv, " "))
	}
	c.log(now, "fake: pretending to run %s from image %s as container %q", what, c.spec.Image, c.spec.Name)
	if c.exits {
		c.log(now, "fake: will exit with code %d after %s (%s)", c.exitWith, c.exitAfter, AnnotationExitAfter)
	}
	c.settle(now)
	return nil
}

// StopContainer stops a running container at once (the pretend process
// honours SIGTERM immediately, exit code StopExitCode).
func (f *Fake) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("StopContainer", id); err != nil {
		return err
	}
	c, err := f.get("stop", id)
	if err != nil {
		return err
	}
	switch c.state {
	case runtime.StateRunning:
		c.exit(f.clock.Now(), StopExitCode, fmt.Sprintf("received SIGTERM (grace period %s), stopping", grace))
	case runtime.StateCreated:
		c.state = runtime.StateExited
		c.finished = f.clock.Now()
		c.notify()
	}
	return nil
}

// RemoveContainer deletes a container, running or not.
func (f *Fake) RemoveContainer(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("RemoveContainer", id); err != nil {
		return err
	}
	if c, ok := f.containers[id]; ok {
		c.state = runtime.StateExited
		c.notify()
		delete(f.containers, id)
	}
	return nil
}

// ListContainers returns the containers whose labels match filter.
func (f *Fake) ListContainers(ctx context.Context, filter runtime.Labels) ([]runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("ListContainers", ""); err != nil {
		return nil, err
	}
	now := f.clock.Now()
	var out []runtime.Container
	for _, c := range f.containers {
		if !filter.Matches(c.spec.Labels) {
			continue
		}
		c.settle(now)
		out = append(out, runtime.Container{
			ID: c.id, Image: c.spec.Image, ImageID: c.imageID, State: c.state,
			Labels: maps.Clone(c.spec.Labels), Created: c.created,
		})
	}
	return out, nil
}

// ContainerStatus inspects a container.
func (f *Fake) ContainerStatus(ctx context.Context, id string) (runtime.ContainerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("ContainerStatus", id); err != nil {
		return runtime.ContainerStatus{}, err
	}
	c, err := f.get("status", id)
	if err != nil {
		return runtime.ContainerStatus{}, err
	}
	st := runtime.ContainerStatus{
		ID: c.id, Image: c.spec.Image, ImageID: c.imageID, State: c.state,
		Labels: maps.Clone(c.spec.Labels), Annotations: maps.Clone(c.spec.Annotations),
		Created: c.created, Started: c.started, Finished: c.finished,
	}
	if c.state == runtime.StateExited {
		st.ExitCode, st.Reason = c.exitCode, c.reason
	}
	if !c.spec.HostNetwork {
		st.IP = f.ip
	}
	return st, nil
}

// Exec runs cmd in a running container through Config.Exec or the built-in
// pretend shell.
func (f *Fake) Exec(ctx context.Context, id string, cmd []string) (int, []byte, error) {
	f.mu.Lock()
	if err := f.record("Exec", id); err != nil {
		f.mu.Unlock()
		return 0, nil, err
	}
	c, err := f.get("exec", id)
	if err == nil && c.state != runtime.StateRunning {
		err = runtime.Errorf("exec", runtime.NotRunning, id, "container is %s", c.state)
	}
	exec := f.exec
	f.mu.Unlock()
	if err != nil {
		return 0, nil, err
	}
	if err := ctx.Err(); err != nil {
		return 0, nil, fmt.Errorf("runtime: exec %s: %w", id, err)
	}
	if exec != nil {
		return exec(id, slices.Clone(cmd))
	}
	return shell(cmd)
}

// ProbeHTTP answers an httpGet probe as the pretend processes would: 200
// when a running container declares the probed port among its ports (a
// process listens on what it declares), connection refused otherwise.
func (f *Fake) ProbeHTTP(ctx context.Context, u *url.URL, _ http.Header) (int, error) {
	if err := f.probePort(u.Host); err != nil {
		return 0, err
	}
	return http.StatusOK, nil
}

// ProbeTCP answers a tcpSocket probe the same way.
func (f *Fake) ProbeTCP(ctx context.Context, addr string) error { return f.probePort(addr) }

func (f *Fake) probePort(hostport string) error {
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	for _, c := range f.containers {
		if c.settle(now); c.state != runtime.StateRunning {
			continue
		}
		for _, cp := range c.spec.Ports {
			if int(cp.ContainerPort) == port {
				return nil
			}
		}
	}
	return fmt.Errorf("dial tcp %s: connect: connection refused", hostport)
}

// shell is the built-in pretend shell.
func shell(cmd []string) (int, []byte, error) {
	argv := cmd
	if len(argv) == 3 && (argv[0] == "sh" || argv[0] == "/bin/sh") && argv[1] == "-c" {
		argv = strings.Fields(argv[2])
	}
	switch {
	case len(argv) == 1 && argv[0] == "true":
		return 0, nil, nil
	case len(argv) == 1 && argv[0] == "false":
		return 1, nil, nil
	case len(argv) == 2 && argv[0] == "exit":
		code, err := strconv.Atoi(argv[1])
		if err == nil {
			return code, nil, nil
		}
	}
	return 0, []byte(fmt.Sprintf("fake: pretended to run %q\n", strings.Join(cmd, " "))), nil
}

// Logs writes the container's log lines; with Follow it then waits for new
// lines until the container stops or ctx ends.
func (f *Fake) Logs(ctx context.Context, id string, opts runtime.LogOptions, w io.Writer) error {
	f.mu.Lock()
	if err := f.record("Logs", id); err != nil {
		f.mu.Unlock()
		return err
	}
	c, err := f.get("logs", id)
	if err != nil {
		f.mu.Unlock()
		return err
	}
	lines := selectLines(c.logs, opts)
	next := len(c.logs)
	f.mu.Unlock()

	bw := bufio.NewWriter(w)
	if err := writeLines(bw, lines, opts.Timestamps); err != nil {
		return fmt.Errorf("runtime: logs %s: %w", id, err)
	}
	if !opts.Follow {
		return nil
	}
	for {
		f.mu.Lock()
		c.settle(f.clock.Now())
		lines = c.logs[next:]
		next = len(c.logs)
		running := c.state == runtime.StateRunning
		var changed chan struct{}
		var exitIn time.Duration
		if running {
			if c.changed == nil {
				c.changed = make(chan struct{})
			}
			changed = c.changed
			if c.exits {
				exitIn = c.started.Add(c.exitAfter).Sub(f.clock.Now())
			}
		}
		f.mu.Unlock()
		if err := writeLines(bw, lines, opts.Timestamps); err != nil {
			return fmt.Errorf("runtime: logs %s: %w", id, err)
		}
		if !running {
			return nil
		}
		var exitC <-chan time.Time
		if c.exits {
			exitC = f.clock.After(max(exitIn, 0))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-exitC:
		}
	}
}

func selectLines(all []logLine, opts runtime.LogOptions) []logLine {
	var out []logLine
	for _, l := range all {
		if !opts.Since.IsZero() && l.t.Before(opts.Since) {
			continue
		}
		out = append(out, l)
	}
	if opts.TailLines != nil && int64(len(out)) > *opts.TailLines {
		out = out[int64(len(out))-max(*opts.TailLines, 0):]
	}
	return out
}

func writeLines(w *bufio.Writer, lines []logLine, timestamps bool) error {
	for _, l := range lines {
		if timestamps {
			w.WriteString(l.t.UTC().Format(time.RFC3339Nano))
			w.WriteByte(' ')
		}
		w.WriteString(l.text)
		w.WriteByte('\n')
	}
	return w.Flush()
}
