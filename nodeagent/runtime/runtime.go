// Package runtime is the contract between the node agent and a container
// engine: a CRI-sized interface (pull, create, start, stop, remove, list,
// inspect, exec, logs), the runtime-neutral ContainerSpec the agent builds from
// a pod container, the labels that mark everynode's containers, and typed
// errors the agent maps onto Kubernetes' waiting reasons.
//
// Implementations live in sibling packages: runtime/fake (in-memory, for tests
// and simulated fleets) and runtime/docker (Docker Engine API).
//
// The agent never restarts a container in place: a restart is a new container
// with the next attempt number (LabelAttempt), as kubelet does, so the
// previous container stays inspectable for lastState and previous logs until
// the agent removes it. After an agent restart, the agent re-adopts its
// containers by listing them by LabelNode; runtimes keep no agent state of
// their own beyond the labels they were given.
package runtime

import (
	"context"
	"io"
	"time"
)

// Labels every container created by the agent carries. Several agents may share
// one engine: each only lists, inspects and removes containers labelled with
// its own node name.
const (
	// LabelNode names the node (agent) that owns the container.
	LabelNode = "everynode.io/node"
	// LabelPodNamespace is the namespace of the owning pod.
	LabelPodNamespace = "everynode.io/pod-namespace"
	// LabelPodName is the name of the owning pod.
	LabelPodName = "everynode.io/pod-name"
	// LabelPodUID is the UID of the owning pod.
	LabelPodUID = "everynode.io/pod-uid"
	// LabelContainer is the container's name in the pod spec.
	LabelContainer = "everynode.io/container"
	// LabelAttempt is the container's restart attempt (0 for the first run),
	// decimal. The pod status restartCount is the attempt of the newest container.
	LabelAttempt = "everynode.io/attempt"
)

// Labels is a set of container labels. As a filter, a container matches when
// it carries every key with the same value.
type Labels map[string]string

// Matches reports whether have carries every label of l (an empty l matches all).
func (l Labels) Matches(have map[string]string) bool {
	for k, v := range l {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// State is a container's lifecycle state.
type State string

// Container states.
const (
	// StateCreated: created, never started.
	StateCreated State = "created"
	// StateRunning: its process runs.
	StateRunning State = "running"
	// StateExited: it ran and stopped (by itself or by StopContainer); the
	// exit code and finish time are known.
	StateExited State = "exited"
	// StateUnknown: the runtime cannot tell.
	StateUnknown State = "unknown"
)

// Runtime is a container engine as the agent uses it.
//
// All methods are safe for concurrent use. Every method blocks until the
// operation is done or ctx ends; none keeps running after it returns, except
// that a started container keeps running. A method that fails because ctx
// ended returns an error wrapping ctx.Err().
type Runtime interface {
	// Version names the runtime and its version, e.g. {Name: "docker",
	// Version: "28.5.2"}; Name is the scheme of containerIDs ("docker://…").
	Version(ctx context.Context) (VersionInfo, error)

	// ImageStatus reports a locally present image; an absent one is an error
	// of kind ImageNotFound.
	ImageStatus(ctx context.Context, ref string) (Image, error)
	// PullImage fetches ref into the local store and returns its image ID.
	// Failures are of kind PullFailed (registry unreachable, denied) or
	// ImageNotFound (the registry does not know it). Pull policy is the
	// caller's business: PullImage always pulls.
	PullImage(ctx context.Context, ref string) (imageID string, err error)

	// CreateContainer creates (does not start) a container from spec. The
	// image must be present (else kind ImageNotFound).
	CreateContainer(ctx context.Context, spec ContainerSpec) (id string, err error)
	// StartContainer starts a created container.
	StartContainer(ctx context.Context, id string) error
	// StopContainer asks the container to stop, waits up to grace, then kills
	// it. Stopping a container that is not running is not an error.
	StopContainer(ctx context.Context, id string, grace time.Duration) error
	// RemoveContainer removes a container, killing it if it still runs.
	// Removing an absent container is not an error.
	RemoveContainer(ctx context.Context, id string) error
	// ListContainers returns the containers (any state) carrying every label
	// of filter, in no particular order. It does not change filter.
	ListContainers(ctx context.Context, filter Labels) ([]Container, error)
	// ContainerStatus inspects one container; an absent one is kind NotFound.
	ContainerStatus(ctx context.Context, id string) (ContainerStatus, error)

	// Exec runs cmd inside a running container and returns its exit code and
	// combined output (possibly truncated). err is set only when the command
	// could not be run at all (container not running: kind NotFound or
	// NotRunning); a non-zero exit is not an error. ctx bounds the command.
	Exec(ctx context.Context, id string, cmd []string) (exitCode int, output []byte, err error)
	// Logs writes the container's output to w as opts say. With Follow it
	// blocks until the container stops or ctx ends (then returns nil).
	Logs(ctx context.Context, id string, opts LogOptions, w io.Writer) error
}

// VersionInfo names a runtime.
type VersionInfo struct {
	// Name is the runtime's name, used as the containerID scheme ("docker", "fake").
	Name string
	// Version is the engine's version.
	Version string
	// APIVersion is the engine API version spoken, if any.
	APIVersion string
}

// Image is a locally present image.
type Image struct {
	// ID is the image's content ID ("sha256:…").
	ID string
	// Refs are the references (repo:tag, repo@digest) naming it.
	Refs []string
	// Size in bytes, 0 when unknown.
	Size int64
	// User is the user the image's config runs as ("1000", "1000:1000",
	// "nobody"); empty means root.
	User string
}

// Container is one entry of ListContainers.
type Container struct {
	ID string
	// Image is ContainerSpec.Image exactly as given at creation: the agent
	// compares it with the pod spec to notice an image change.
	Image   string
	ImageID string
	State   State
	Labels  map[string]string
	Created time.Time
}

// ContainerStatus is what ContainerStatus reports.
type ContainerStatus struct {
	ID string
	// Image is ContainerSpec.Image exactly as given at creation.
	Image string
	// ImageID is the image's content ID, reported as the pod's imageID.
	ImageID string
	State   State
	// Labels and Annotations as given in the ContainerSpec.
	Labels      map[string]string
	Annotations map[string]string
	Created     time.Time
	// Started is zero until the container starts.
	Started time.Time
	// Finished is zero until the container exits.
	Finished time.Time
	// ExitCode is meaningful in StateExited.
	ExitCode int
	// Reason is a short machine-readable cause for StateExited ("Completed",
	// "Error", "OOMKilled"), empty otherwise.
	Reason string
	// Message is a human-readable detail, may be empty.
	Message string
	// IP is the container's address on its network; empty with host
	// networking or when the runtime gives none.
	IP string
}

// LogOptions select the output Logs returns, as PodLogOptions does.
type LogOptions struct {
	// Follow keeps streaming until the container stops or ctx ends.
	Follow bool
	// TailLines, when not nil, limits the output to the last lines.
	TailLines *int64
	// Timestamps prefixes each line with its RFC3339Nano time and a space.
	Timestamps bool
	// Since, when not zero, drops lines written before it.
	Since time.Time
}
