package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/go-connections/nat"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// Container log rotation: json-file, at most logMaxFiles files of logMaxSize.
const (
	logMaxSize  = "10m"
	logMaxFiles = "3"
)

// CreateContainer creates (does not start) a container from spec, named and
// labelled for this node. The image must be present (else kind
// ImageNotFound); a field the engine cannot honour is kind Invalid.
func (r *Runtime) CreateContainer(ctx context.Context, spec runtime.ContainerSpec) (string, error) {
	for _, m := range spec.Mounts {
		if m.HostPathType == "" {
			continue
		}
		if err := runtime.CheckHostPath(m.HostPath, m.HostPathType); err != nil {
			return "", &runtime.Error{Op: "create", Kind: runtime.MountFailed, Subject: m.Volume, Err: err}
		}
	}
	imageUser := ""
	if spec.RunAsGroup != nil && spec.RunAsUser == nil {
		// Docker's User is "user:group": keep the image's user.
		img, err := r.ImageStatus(ctx, spec.Image)
		if err != nil {
			return "", err
		}
		imageUser = img.User
	}
	cfg, hc, err := r.configs(spec, imageUser)
	if err != nil {
		return "", err
	}
	for _, p := range spec.Ports {
		if spec.HostNetwork && p.HostIP != "" {
			// As kubelet: with host networking the process binds what it binds.
			r.log.Warn("hostIP has no effect with hostNetwork; the process chooses its own address",
				"container", spec.Name, "port", p.ContainerPort, "hostIP", p.HostIP)
		}
	}
	name := containerName(r.node, spec)
	resp, err := r.cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if cerrdefs.IsConflict(err) {
		// The name is taken (an interrupted create left it, or names collapsed
		// when sanitized): keep the readable part, make it unique.
		name += "_" + randomSuffix()
		resp, err = r.cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	}
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", &runtime.Error{Op: "create", Kind: runtime.ImageNotFound, Subject: spec.Image, Err: err}
		}
		return "", ctxErr(ctx, "create", name, err)
	}
	var discarded []string
	for _, w := range resp.Warnings {
		if strings.Contains(w, "discarded") {
			discarded = append(discarded, w)
			continue
		}
		r.log.Warn("container created with a warning", "container", name, "id", resp.ID, "warning", w)
	}
	if len(discarded) > 0 {
		_ = r.remove(context.WithoutCancel(ctx), resp.ID)
		return "", runtime.Errorf("create", runtime.Invalid, name, "the engine cannot honour the spec: %s", strings.Join(discarded, "; "))
	}
	r.addFresh(resp.ID)
	return resp.ID, nil
}

// configs maps spec onto the engine's container and host configuration;
// imageUser is the image's configured user, used only with RunAsGroup
// without RunAsUser.
func (r *Runtime) configs(spec runtime.ContainerSpec, imageUser string) (*container.Config, *container.HostConfig, error) {
	invalid := func(format string, args ...any) error {
		return runtime.Errorf("create", runtime.Invalid, spec.Name, format, args...)
	}
	if spec.Image == "" {
		return nil, nil, invalid("no image")
	}
	if n, ok := spec.Labels[runtime.LabelNode]; ok && n != r.node {
		return nil, nil, invalid("label %s=%q, but this runtime serves node %q", runtime.LabelNode, n, r.node)
	}
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = make(map[string]string)
	}
	labels[runtime.LabelNode] = r.node
	labels[labelImage] = spec.Image
	if len(spec.Annotations) > 0 {
		b, err := json.Marshal(spec.Annotations)
		if err != nil {
			return nil, nil, invalid("annotations: %v", err)
		}
		labels[labelAnnotations] = string(b)
	}
	cfg := &container.Config{
		Image:      spec.Image,
		Hostname:   spec.Hostname,
		WorkingDir: spec.WorkingDir,
		Labels:     labels,
	}
	if len(spec.Command) > 0 {
		cfg.Entrypoint = slices.Clone(spec.Command)
	}
	if len(spec.Args) > 0 {
		cfg.Cmd = slices.Clone(spec.Args)
	}
	for _, e := range spec.Env {
		if e.Name == "" || strings.Contains(e.Name, "=") {
			return nil, nil, invalid("env name %q", e.Name)
		}
		cfg.Env = append(cfg.Env, e.Name+"="+e.Value)
	}
	switch {
	case spec.RunAsUser != nil && spec.RunAsGroup != nil:
		cfg.User = strconv.FormatInt(*spec.RunAsUser, 10) + ":" + strconv.FormatInt(*spec.RunAsGroup, 10)
	case spec.RunAsUser != nil:
		cfg.User = strconv.FormatInt(*spec.RunAsUser, 10)
	case spec.RunAsGroup != nil:
		user, _, _ := strings.Cut(imageUser, ":")
		if user == "" {
			user = "0"
		}
		cfg.User = user + ":" + strconv.FormatInt(*spec.RunAsGroup, 10)
	}
	if (spec.RunAsUser != nil && *spec.RunAsUser < 0) || (spec.RunAsGroup != nil && *spec.RunAsGroup < 0) {
		return nil, nil, invalid("negative runAsUser or runAsGroup")
	}
	hc := &container.HostConfig{
		Privileged:     spec.Privileged,
		ReadonlyRootfs: spec.ReadOnlyRootFilesystem,
		// The agent restarts containers itself, as new attempts.
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		CapAdd:        slices.Clone(spec.CapAdd),
		CapDrop:       slices.Clone(spec.CapDrop),
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{
			"max-size": logMaxSize, "max-file": logMaxFiles,
		}},
		Resources: container.Resources{
			NanoCPUs: spec.Resources.CPUMillis * 1_000_000,
			Memory:   spec.Resources.MemoryBytes,
		},
	}
	if spec.Resources.MemoryBytes > 0 {
		// No swap beyond the limit, as kubelet: the limit is what the
		// container may use, else it is OOM-killed.
		hc.MemorySwap = spec.Resources.MemoryBytes
	}
	if spec.Resources.CPUMillis < 0 || spec.Resources.MemoryBytes < 0 {
		return nil, nil, invalid("negative resource limit")
	}
	if spec.NoNewPrivileges {
		hc.SecurityOpt = append(hc.SecurityOpt, "no-new-privileges")
	}
	if opt, err := seccompOpt(spec.Seccomp); err != nil {
		return nil, nil, invalid("%v", err)
	} else if opt != "" {
		hc.SecurityOpt = append(hc.SecurityOpt, opt)
	}
	if spec.HostNetwork {
		hc.NetworkMode = "host"
	}
	if spec.HostPID {
		hc.PidMode = "host"
	}
	if err := mapPorts(spec, cfg, hc); err != nil {
		return nil, nil, invalid("%v", err)
	}
	if err := mapMounts(spec.Mounts, hc); err != nil {
		return nil, nil, invalid("%v", err)
	}
	return cfg, hc, nil
}

// seccompOpt is the engine's security option for a seccomp profile: none
// for the runtime's default (Docker's default profile), "seccomp=unconfined",
// or the JSON of a profile file on the node (the engine wants the content).
func seccompOpt(profile string) (string, error) {
	switch profile {
	case "", runtime.SeccompRuntimeDefault:
		return "", nil
	case runtime.SeccompUnconfined:
		return "seccomp=unconfined", nil
	}
	if !filepath.IsAbs(profile) {
		return "", fmt.Errorf("seccomp profile %q: want RuntimeDefault, Unconfined or an absolute file path", profile)
	}
	b, err := os.ReadFile(profile)
	if err != nil {
		return "", fmt.Errorf("seccomp profile: %w (put the Localhost profile there)", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return "", fmt.Errorf("seccomp profile %s: not JSON: %w", profile, err)
	}
	return "seccomp=" + buf.String(), nil
}

func mapPorts(spec runtime.ContainerSpec, cfg *container.Config, hc *container.HostConfig) error {
	for _, p := range spec.Ports {
		proto := strings.ToLower(p.Protocol)
		switch proto {
		case "":
			proto = "tcp"
		case "tcp", "udp", "sctp":
		default:
			return fmt.Errorf("port %d: protocol %q (want TCP, UDP or SCTP)", p.ContainerPort, p.Protocol)
		}
		if p.ContainerPort < 1 || p.ContainerPort > 65535 || p.HostPort < 0 || p.HostPort > 65535 {
			return fmt.Errorf("port %d: hostPort %d: out of range", p.ContainerPort, p.HostPort)
		}
		port, err := nat.NewPort(proto, strconv.Itoa(int(p.ContainerPort)))
		if err != nil {
			return fmt.Errorf("port %d: %w", p.ContainerPort, err)
		}
		if cfg.ExposedPorts == nil {
			cfg.ExposedPorts = nat.PortSet{}
		}
		cfg.ExposedPorts[port] = struct{}{}
		if p.HostPort == 0 {
			continue
		}
		if spec.HostNetwork {
			// The container binds the host's ports itself; nothing to publish.
			if p.HostPort != p.ContainerPort {
				return fmt.Errorf("port %d: hostPort %d must equal the container port with hostNetwork", p.ContainerPort, p.HostPort)
			}
			continue
		}
		if hc.PortBindings == nil {
			hc.PortBindings = nat.PortMap{}
		}
		hc.PortBindings[port] = append(hc.PortBindings[port], nat.PortBinding{
			HostIP: p.HostIP, HostPort: strconv.Itoa(int(p.HostPort)),
		})
	}
	return nil
}

func mapMounts(mounts []runtime.Mount, hc *container.HostConfig) error {
	for _, m := range mounts {
		if !filepath.IsAbs(m.Target) || strings.Contains(m.Target, ":") {
			return fmt.Errorf("mount target %q: want an absolute path without ':'", m.Target)
		}
		switch m.Type {
		case runtime.MountBind, runtime.MountEmptyDir:
			if m.Source == "" && m.Type == runtime.MountEmptyDir {
				hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Target: m.Target, ReadOnly: m.ReadOnly})
				continue
			}
			if !filepath.IsAbs(m.Source) || strings.Contains(m.Source, ":") {
				return fmt.Errorf("%s mount %q: source %q: want an absolute host path without ':'", m.Type, m.Target, m.Source)
			}
			var opts []string
			if m.ReadOnly {
				opts = append(opts, "ro")
			}
			switch m.Propagation {
			case runtime.PropagationNone:
			case runtime.PropagationHostToContainer, runtime.PropagationBidirectional:
				opts = append(opts, string(m.Propagation))
			default:
				return fmt.Errorf("mount %q: propagation %q", m.Target, m.Propagation)
			}
			bind := m.Source + ":" + m.Target
			if len(opts) > 0 {
				bind += ":" + strings.Join(opts, ",")
			}
			hc.Binds = append(hc.Binds, bind)
		case runtime.MountTmpfs:
			if hc.Tmpfs == nil {
				hc.Tmpfs = map[string]string{}
			}
			opts := ""
			if m.ReadOnly {
				opts = "ro"
			}
			hc.Tmpfs[m.Target] = opts
		default:
			return fmt.Errorf("mount %q: type %q", m.Target, m.Type)
		}
	}
	return nil
}

// containerName is everynode_<node>_<namespace>_<pod>_<container>_<attempt>,
// each part sanitized; missing parts are left out.
func containerName(node string, spec runtime.ContainerSpec) string {
	cname := spec.Name
	if cname == "" {
		cname = spec.Labels[runtime.LabelContainer]
	}
	attempt := spec.Labels[runtime.LabelAttempt]
	if attempt == "" {
		attempt = "0"
	}
	parts := []string{"everynode", node, spec.Labels[runtime.LabelPodNamespace], spec.Labels[runtime.LabelPodName], cname, attempt}
	var out []string
	for _, p := range parts {
		if p = sanitize(p); p != "" {
			out = append(out, p)
		}
	}
	name := strings.Join(out, "_")
	if len(name) > 200 {
		name = name[:200]
	}
	return name
}

// sanitize maps s onto Docker's name alphabet [a-zA-Z0-9_.-].
func sanitize(s string) string {
	return strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-':
			return c
		}
		return '-'
	}, s)
}

func randomSuffix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
