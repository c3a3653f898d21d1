// Package fake is an in-memory container runtime for tests and simulated
// fleets. It keeps real state (images, containers, logs), records every call,
// can fail any method on demand, and lets pod annotations drive what the
// pretend processes do:
//
//	fake.everynode.io/exit-after: "30s"   the process exits 30s after it starts
//	fake.everynode.io/exit-code:  "1"     ... with this code (default 0)
//
// Either key suffixed with ".<container name>" applies to that container
// only and wins over the plain key (e.g. an init container that exits while
// the main container runs on: "fake.everynode.io/exit-after.setup": "2s").
// Without them an init container (ContainerSpec.Init) exits 0 at once, as
// the command of a published manifest's init container would finish, and
// any other runs until stopped.
//
// It has no host filesystem: hostPath types are not checked (the Docker
// runtime checks them with runtime.CheckHostPath); a test that wants the
// agent to see a failed mount injects a MountFailed error into
// CreateContainer. Image users come from Config.ImageUsers.
//
// Time comes from an injected clock (k8s.io/utils/clock), so a test with a
// fake clock drives crash loops without sleeping. A Fake starts no goroutines:
// exits are computed when a container is inspected or listed, so thousands of
// Fakes with many containers each cost only their memory.
package fake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// Annotations (on the pod, passed through ContainerSpec.Annotations) that
// drive a fake container.
const (
	// AnnotationExitAfter is a Go duration after which the container's process
	// exits by itself ("0s" exits at once). Absent: it runs until stopped.
	AnnotationExitAfter = "fake.everynode.io/exit-after"
	// AnnotationExitCode is the exit code used with AnnotationExitAfter
	// (decimal, default 0: the container still counts as exited).
	AnnotationExitCode = "fake.everynode.io/exit-code"
)

// Name is the runtime name, and the containerID scheme ("fake://…").
const Name = "fake"

// Version is the version the fake reports.
const Version = "0.1.0"

// StopExitCode is the exit code of a container stopped by StopContainer or
// removed while running: its pretend process dies of SIGTERM.
const StopExitCode = 143

// maxCalls bounds the call log; older half is dropped when exceeded, so a
// long-running simulated fleet does not grow without bound.
const maxCalls = 4096

// Config configures a Fake. The zero value is usable.
type Config struct {
	// Clock is the time source; nil means the real clock.
	Clock clock.Clock
	// Images are preloaded into the image store ("busybox", "app:v2").
	Images []string
	// ImageUsers gives the user an image's config runs as (Image.User), by
	// reference as in Images or as pulled; images not listed run as root
	// (empty User), as most do.
	ImageUsers map[string]string
	// Unpullable is a path.Match glob; pulls of matching references fail
	// with kind PullFailed. Empty: every pull succeeds.
	Unpullable string
	// IP is the address containers report (not with host networking);
	// empty: none.
	IP string
	// Exec, when set, answers Exec calls for running containers; nil uses
	// the built-in shell: "true", "false", "exit N" and "sh -c 'exit N'" exit
	// accordingly, anything else exits 0 saying what it pretended to run.
	Exec func(id string, cmd []string) (exitCode int, output []byte, err error)
}

// Call is one recorded method call.
type Call struct {
	// Method is the Runtime method name ("PullImage").
	Method string
	// Subject is the image reference or container ID, empty when none.
	Subject string
}

// Fake is an in-memory runtime.Runtime. It is safe for concurrent use.
type Fake struct {
	clock      clock.Clock
	unpullable string
	ip         string
	exec       func(string, []string) (int, []byte, error)
	imageUsers map[string]string // by normalised reference

	mu         sync.Mutex
	images     map[string]runtime.Image // by normalised reference
	containers map[string]*container
	calls      []Call
	errs       map[string][]error
}

var _ runtime.Runtime = (*Fake)(nil)

// New returns a Fake with cfg's images preloaded.
func New(cfg Config) *Fake {
	f := &Fake{
		clock:      cfg.Clock,
		unpullable: cfg.Unpullable,
		ip:         cfg.IP,
		exec:       cfg.Exec,
		imageUsers: make(map[string]string),
		images:     make(map[string]runtime.Image),
		containers: make(map[string]*container),
		errs:       make(map[string][]error),
	}
	if f.clock == nil {
		f.clock = clock.RealClock{}
	}
	for ref, u := range cfg.ImageUsers {
		f.imageUsers[normalize(ref)] = u
	}
	for _, ref := range cfg.Images {
		f.addImage(ref)
	}
	return f
}

// Calls returns a copy of the call log, oldest first (at most the last few
// thousand calls are kept).
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// CountCalls returns how many logged calls have the given method.
func (f *Fake) CountCalls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.Method == method {
			n++
		}
	}
	return n
}

// ResetCalls clears the call log.
func (f *Fake) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

// InjectError makes the next len(errs) calls of method return these errors,
// in order, before doing anything (a nil entry lets that call proceed).
func (f *Fake) InjectError(method string, errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[method] = append(f.errs[method], errs...)
}

// AddImage puts ref into the image store as if pulled.
func (f *Fake) AddImage(ref string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addImage(ref)
}

// RemoveImage deletes ref from the image store.
func (f *Fake) RemoveImage(ref string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.images, normalize(ref))
}

func (f *Fake) addImage(ref string) runtime.Image {
	n := normalize(ref)
	if img, ok := f.images[n]; ok {
		return img
	}
	sum := sha256.Sum256([]byte(n))
	img := runtime.Image{ID: "sha256:" + hex.EncodeToString(sum[:]), Refs: []string{n}, Size: 1 << 20, User: f.imageUsers[n]}
	f.images[n] = img
	return img
}

// record logs the call and pops an injected error; f.mu must be held.
func (f *Fake) record(method, subject string) error {
	if len(f.calls) >= maxCalls {
		f.calls = append(f.calls[:0], f.calls[maxCalls/2:]...)
	}
	f.calls = append(f.calls, Call{Method: method, Subject: subject})
	q := f.errs[method]
	if len(q) == 0 {
		return nil
	}
	err := q[0]
	if len(q) == 1 {
		delete(f.errs, method)
	} else {
		f.errs[method] = q[1:]
	}
	return err
}

// normalize adds ":latest" to a reference without tag or digest.
func normalize(ref string) string {
	if strings.Contains(ref, "@") {
		return ref
	}
	if !strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":") {
		return ref + ":latest"
	}
	return ref
}

// Version reports {Name: "fake", Version: Version}.
func (f *Fake) Version(ctx context.Context) (runtime.VersionInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("Version", ""); err != nil {
		return runtime.VersionInfo{}, err
	}
	return runtime.VersionInfo{Name: Name, Version: Version, APIVersion: "v1"}, nil
}

// ImageStatus reports a preloaded or pulled image.
func (f *Fake) ImageStatus(ctx context.Context, ref string) (runtime.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("ImageStatus", ref); err != nil {
		return runtime.Image{}, err
	}
	img, ok := f.images[normalize(ref)]
	if !ok {
		return runtime.Image{}, runtime.Errorf("image status", runtime.ImageNotFound, ref, "no such image in the fake store")
	}
	return img, nil
}

// PullImage adds ref to the store unless it matches Config.Unpullable.
func (f *Fake) PullImage(ctx context.Context, ref string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("PullImage", ref); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", &runtime.Error{Op: "pull", Kind: runtime.PullFailed, Subject: ref, Err: err}
	}
	if f.unpullable != "" {
		m1, _ := path.Match(f.unpullable, ref)
		m2, _ := path.Match(f.unpullable, normalize(ref))
		if m1 || m2 {
			return "", runtime.Errorf("pull", runtime.PullFailed, ref, "fake registry refuses references matching %q", f.unpullable)
		}
	}
	return f.addImage(ref).ID, nil
}

// annotation returns the container-specific value of key, else the plain one.
func annotation(ann map[string]string, key, container string) (string, string, bool) {
	if v, ok := ann[key+"."+container]; ok {
		return key + "." + container, v, true
	}
	v, ok := ann[key]
	return key, v, ok
}

// parseExit reads the exit annotations for container; ok is false when it
// runs until stopped.
func parseExit(ann map[string]string, container string) (after time.Duration, code int, ok bool, err error) {
	k, v, has := annotation(ann, AnnotationExitAfter, container)
	if !has {
		return 0, 0, false, nil
	}
	after, err = time.ParseDuration(v)
	if err != nil || after < 0 {
		return 0, 0, false, fmt.Errorf("annotation %s=%q: want a non-negative Go duration", k, v)
	}
	if k, c, has := annotation(ann, AnnotationExitCode, container); has {
		code, err = strconv.Atoi(c)
		if err != nil || code < 0 || code > 255 {
			return 0, 0, false, fmt.Errorf("annotation %s=%q: want an integer 0-255", k, c)
		}
	}
	return after, code, true, nil
}
