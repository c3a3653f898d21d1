// Package docker is the node agent's container runtime on a Docker Engine,
// through the Engine API client (github.com/docker/docker/client). It
// implements runtime.Runtime.
//
// Ownership. Every container it creates carries runtime.LabelNode with the
// Runtime's NodeName, and the Runtime only lists, inspects, starts, stops,
// execs into, reads and removes containers carrying its own node label: an ID
// of any other container is reported as kind NotFound. So several agents can
// share one engine (the docker-compose demo) without touching each other's
// containers. The Runtime keeps no state of its own: after an agent restart a
// new Runtime with the same NodeName sees the same containers.
//
// Names. Containers are named everynode_<node>_<namespace>_<pod>_<container>_<attempt>
// from the everynode.io labels, each part reduced to Docker's name alphabet;
// when the name is taken (a leftover of an interrupted create), a short
// random suffix is added.
//
// Mapping of runtime.ContainerSpec (Runtime.configs):
//
//	Command, Args         Entrypoint, Cmd (empty keeps the image's)
//	Env, WorkingDir       Env, WorkingDir
//	Hostname              Hostname
//	Ports                 ExposedPorts; HostPort > 0 → PortBindings (HostIP, HostPort);
//	                      with HostNetwork the container port is the host port
//	                      and HostIP has no effect (logged, as kubelet ignores it)
//	HostNetwork, HostPID  NetworkMode "host", PidMode "host"
//	Mounts                bind and emptyDir with a Source → Binds "src:dst[:ro]";
//	                      emptyDir without Source → an anonymous volume (lives
//	                      as long as the container, removed with it);
//	                      tmpfs → Tmpfs
//	Resources             NanoCPUs (CPUMillis × 10⁶), Memory (bytes) and
//	                      MemorySwap = Memory (no swap beyond the limit)
//	Privileged, CapAdd/Drop  Privileged, CapAdd, CapDrop
//	Labels                Labels
//	Annotations           the label everynode.io/annotations (JSON), returned by
//	                      ContainerStatus and hidden from Labels
//
// Host paths (bind and emptyDir sources) are paths on the engine's host, not
// in the agent's file system: an agent that runs in a container must see its
// data directory at the same path as the host does. A missing bind source
// directory is created by the engine, as `docker run -v` does.
//
// A field Docker cannot honour fails CreateContainer with kind Invalid naming
// it: a relative host path, a path containing ':', a host port other than the
// container port with host networking, an unknown protocol, and any limit the
// engine says it discarded (a create warning "… discarded"). Other create
// warnings are logged. The restart policy is "no": the agent restarts a
// container as a new attempt. Containers log through the json-file driver with
// rotation (logMaxSize × logMaxFiles), so Logs works whatever the engine's
// default driver is.
package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// Name is the runtime's name and the containerID scheme ("docker://…").
const Name = "docker"

// Labels the runtime adds for itself; ContainerStatus and ListContainers
// hide them from the labels they return.
const (
	// labelImage keeps ContainerSpec.Image as given: the engine reports an
	// image ID instead once the tag moves to another image.
	labelImage = "everynode.io/image"
	// labelAnnotations keeps ContainerSpec.Annotations, JSON-encoded.
	labelAnnotations = "everynode.io/annotations"
)

// Config configures a Runtime.
type Config struct {
	// Host is the engine's address ("unix:///var/run/docker.sock",
	// "tcp://host:2375"). Empty: from the environment (DOCKER_HOST,
	// DOCKER_TLS_VERIFY, DOCKER_CERT_PATH), else the local socket.
	Host string
	// NodeName is the node whose containers this Runtime owns (required).
	NodeName string
	// Logger receives pull progress and create warnings; nil discards.
	Logger *slog.Logger
}

// Runtime is runtime.Runtime on a Docker Engine. It is safe for concurrent
// use. Close releases its connection.
type Runtime struct {
	cli  *client.Client
	node string
	log  *slog.Logger

	// fresh holds the containers this Runtime created and has not started
	// or removed yet: they are this node's, so starting one needs no
	// inspect first (one engine round trip less between create and start).
	mu    sync.Mutex
	fresh map[string]struct{}
}

var _ runtime.Runtime = (*Runtime)(nil)

// New connects to the engine and checks that it answers (negotiating the API
// version). ctx bounds that check.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("docker: a node name is required")
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker: client for %q: %w", cfg.Host, err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker: engine at %s does not answer (is Docker running? set DOCKER_HOST or --docker-host): %w", cli.DaemonHost(), err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runtime{cli: cli, node: cfg.NodeName, log: log.With("runtime", Name, "node", cfg.NodeName)}, nil
}

// Close releases the engine connection. Containers keep running.
func (r *Runtime) Close() error {
	return r.cli.Close()
}

// Version reports the engine's version and the API version spoken.
func (r *Runtime) Version(ctx context.Context) (runtime.VersionInfo, error) {
	v, err := r.cli.ServerVersion(ctx)
	if err != nil {
		return runtime.VersionInfo{}, wrap("version", "", err)
	}
	return runtime.VersionInfo{Name: Name, Version: v.Version, APIVersion: r.cli.ClientVersion()}, nil
}

// wrap turns an engine error into a *runtime.Error for op on subject:
// not-found becomes kind NotFound, a not-running conflict NotRunning, an
// invalid argument Invalid; a failure because ctx ended wraps ctx's error.
func wrap(op, subject string, err error) error {
	kind := runtime.Other
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
	case cerrdefs.IsNotFound(err):
		kind = runtime.NotFound
	case cerrdefs.IsInvalidArgument(err):
		kind = runtime.Invalid
	}
	return &runtime.Error{Op: op, Kind: kind, Subject: subject, Err: err}
}

// ctxErr returns an error wrapping ctx's error when ctx has ended, else err.
func ctxErr(ctx context.Context, op, subject string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return &runtime.Error{Op: op, Subject: subject, Err: fmt.Errorf("%w (%v)", cerr, err)}
	}
	return wrap(op, subject, err)
}
