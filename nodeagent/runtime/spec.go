package runtime

// ContainerSpec is a pod container mapped onto runtime-neutral terms by the
// agent: env is resolved (valueFrom already evaluated), volumes are host paths
// the agent prepared. A runtime that cannot honour a field fails
// CreateContainer with an error of kind Invalid naming the field (kind
// MountFailed for a hostPath whose type check fails); it never drops a field
// silently.
type ContainerSpec struct {
	// Name is the container's name in the pod.
	Name string
	// Init marks one of the pod's initContainers, which run to completion
	// before the app containers start. Docker runs it as any other; the fake
	// runtime's pretend process exits 0 at once unless annotated otherwise.
	Init bool
	// Image is the image reference to run.
	Image string
	// Command overrides the image's entrypoint when not empty.
	Command []string
	// Args overrides the image's cmd when not empty.
	Args []string
	// Env is the container's environment, in order, resolved.
	Env []EnvVar
	// WorkingDir overrides the image's working directory when not empty.
	WorkingDir string
	// Hostname is the container's host name (the pod name, or the node's
	// name with host networking).
	Hostname string
	// Ports the container exposes; HostPort > 0 publishes on the host.
	Ports []Port
	// HostNetwork runs the container in the host's network namespace.
	HostNetwork bool
	// HostPID runs the container in the host's PID namespace.
	HostPID bool
	// Mounts are the volumes, in order.
	Mounts []Mount
	// Resources are the limits.
	Resources Resources
	// Privileged gives the container all capabilities and devices.
	Privileged bool
	// CapAdd and CapDrop adjust the default capability set ("NET_ADMIN").
	CapAdd, CapDrop []string
	// RunAsUser, when set, is the uid the container's process runs as;
	// RunAsGroup, when set, its primary gid (without RunAsUser: the image's
	// user with this group).
	RunAsUser, RunAsGroup *int64
	// ReadOnlyRootFilesystem mounts the container's root filesystem read-only.
	ReadOnlyRootFilesystem bool
	// NoNewPrivileges sets no_new_privs on the process
	// (allowPrivilegeEscalation: false).
	NoNewPrivileges bool
	// Seccomp is the container's seccomp profile: SeccompRuntimeDefault
	// (also when empty), SeccompUnconfined, or the absolute path of a JSON
	// profile on the node (Kubernetes' Localhost type).
	Seccomp string
	// Labels are stored on the container and returned by List and Status; the
	// agent puts the everynode.io labels here.
	Labels map[string]string
	// Annotations are the pod's annotations, stored and returned by Status;
	// the fake runtime reads its behaviour from them.
	Annotations map[string]string
}

// EnvVar is one environment variable.
type EnvVar struct {
	Name, Value string
}

// Port is one container port.
type Port struct {
	// Name is the port's name in the pod spec, may be empty.
	Name string
	// ContainerPort is the port inside the container.
	ContainerPort int32
	// HostPort publishes the port on the host when > 0.
	HostPort int32
	// HostIP binds the host port to this address when not empty.
	HostIP string
	// Protocol is "TCP", "UDP" or "SCTP".
	Protocol string
}

// MountType says what backs a mount.
type MountType string

// Mount types.
const (
	// MountBind binds Source, a host path, into the container.
	MountBind MountType = "bind"
	// MountEmptyDir is scratch space that lives as long as the pod. Source is
	// a host directory the agent made for it; when empty, the runtime picks
	// its own storage.
	MountEmptyDir MountType = "emptyDir"
	// MountTmpfs is a memory-backed emptyDir (medium: Memory).
	MountTmpfs MountType = "tmpfs"
)

// Seccomp profiles other than a Localhost file's path.
const (
	SeccompRuntimeDefault = "RuntimeDefault"
	SeccompUnconfined     = "Unconfined"
)

// Propagation is a bind mount's propagation, as Kubernetes'
// mountPropagation.
type Propagation string

// Mount propagations.
const (
	// PropagationNone (private): no mount events cross either way.
	PropagationNone Propagation = ""
	// PropagationHostToContainer (rslave): mounts the host makes under the
	// source later appear in the container.
	PropagationHostToContainer Propagation = "rslave"
	// PropagationBidirectional (rshared): mounts also go from the container
	// to the host; only privileged containers may ask for it.
	PropagationBidirectional Propagation = "rshared"
)

// HostPathType is a hostPath volume's type, as Kubernetes' (empty: no check).
type HostPathType string

// Mount is one volume mount.
type Mount struct {
	Type MountType
	// Source is the host path (bind, emptyDir); unused for tmpfs.
	Source string
	// Target is the path inside the container.
	Target string
	// ReadOnly mounts it read-only.
	ReadOnly bool
	// Volume is the pod volume's name, for error messages.
	Volume string
	// HostPath and HostPathType, for a bind of a hostPath volume, are the
	// volume's path (Source may lie below it, with a subPath) and type:
	// checked (for DirectoryOrCreate and FileOrCreate, created) on the node
	// before the container is created, as kubelet does; see CheckHostPath.
	HostPath     string
	HostPathType HostPathType
	// Propagation of a bind mount.
	Propagation Propagation
}

// Resources are container limits; zero means unlimited.
type Resources struct {
	// CPUMillis is the CPU limit in thousandths of a CPU.
	CPUMillis int64
	// MemoryBytes is the memory limit in bytes.
	MemoryBytes int64
}
