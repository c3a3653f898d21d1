package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/kubernetes/pkg/fieldpath"
	"k8s.io/kubernetes/pkg/kubelet/util/format"

	"github.com/everynode/everynode/nodeagent/runtime"
	resources "github.com/everynode/everynode/resources/core"
)

// containerSpec maps a pod container onto the runtime's terms. An error
// names a field the agent cannot honour (reported as
// CreateContainerConfigError).
func (a *Agent) containerSpec(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt int) (runtime.ContainerSpec, error) {
	env, err := a.resolveEnv(ctx, pod, c)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	vars := make(map[string]string, len(env))
	for _, e := range env {
		vars[e.Name] = e.Value
	}
	mounts, err := a.mounts(ctx, pod, c, vars)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	spec := runtime.ContainerSpec{
		Name:        c.Name,
		Init:        isInitContainer(pod, c.Name),
		Image:       c.Image,
		Command:     expandAll(c.Command, vars),
		Args:        expandAll(c.Args, vars),
		Env:         env,
		WorkingDir:  c.WorkingDir,
		Hostname:    pod.Name,
		HostNetwork: pod.Spec.HostNetwork,
		HostPID:     pod.Spec.HostPID,
		Mounts:      mounts,
		Labels: map[string]string{
			runtime.LabelNode:         a.cfg.NodeName,
			runtime.LabelPodNamespace: pod.Namespace,
			runtime.LabelPodName:      pod.Name,
			runtime.LabelPodUID:       string(pod.UID),
			runtime.LabelContainer:    c.Name,
			runtime.LabelAttempt:      strconv.Itoa(attempt),
		},
		Annotations: maps.Clone(pod.Annotations),
	}
	if pod.Spec.Hostname != "" {
		spec.Hostname = pod.Spec.Hostname
	}
	if pod.Spec.HostNetwork {
		spec.Hostname = a.cfg.NodeName
	}
	for _, p := range c.Ports {
		spec.Ports = append(spec.Ports, runtime.Port{
			Name: p.Name, ContainerPort: p.ContainerPort, HostPort: p.HostPort, HostIP: p.HostIP, Protocol: string(p.Protocol),
		})
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		spec.Resources.CPUMillis = q.MilliValue()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		spec.Resources.MemoryBytes = q.Value()
	}
	if err := a.mapSecurity(pod, c, &spec); err != nil {
		return runtime.ContainerSpec{}, err
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.Privileged != nil {
			spec.Privileged = *sc.Privileged
		}
		if sc.Capabilities != nil {
			for _, cp := range sc.Capabilities.Add {
				spec.CapAdd = append(spec.CapAdd, string(cp))
			}
			for _, cp := range sc.Capabilities.Drop {
				spec.CapDrop = append(spec.CapDrop, string(cp))
			}
		}
	}
	return spec, nil
}

// mapSecurity maps the effective (container over pod) runAsUser,
// runAsGroup, seccompProfile, and readOnlyRootFilesystem and
// allowPrivilegeEscalation. runAsNonRoot is checked by verifyNonRoot, against
// the image's user when runAsUser is not set.
func (a *Agent) mapSecurity(pod *corev1.Pod, c *corev1.Container, spec *runtime.ContainerSpec) error {
	uid, gid, _ := effectiveUser(pod, c)
	if uid != nil {
		v := *uid
		spec.RunAsUser = &v
	}
	if gid != nil {
		g := *gid
		spec.RunAsGroup = &g
	}
	if sc := c.SecurityContext; sc != nil {
		spec.ReadOnlyRootFilesystem = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		spec.NoNewPrivileges = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
	}
	profile := (*corev1.SeccompProfile)(nil)
	if psc := pod.Spec.SecurityContext; psc != nil {
		profile = psc.SeccompProfile
	}
	if sc := c.SecurityContext; sc != nil && sc.SeccompProfile != nil {
		profile = sc.SeccompProfile
	}
	if profile != nil {
		switch profile.Type {
		case corev1.SeccompProfileTypeRuntimeDefault:
			spec.Seccomp = runtime.SeccompRuntimeDefault
		case corev1.SeccompProfileTypeUnconfined:
			spec.Seccomp = runtime.SeccompUnconfined
		case corev1.SeccompProfileTypeLocalhost:
			// kubelet's <root-dir>/seccomp/<localhostProfile>.
			if profile.LocalhostProfile == nil || a.cfg.DataDir == "" {
				return fmt.Errorf("container %q: seccompProfile Localhost needs localhostProfile and an agent data dir", c.Name)
			}
			rel := filepath.Clean(*profile.LocalhostProfile)
			if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
				return fmt.Errorf("container %q: seccompProfile localhostProfile %q must be relative, inside the seccomp directory", c.Name, *profile.LocalhostProfile)
			}
			spec.Seccomp = filepath.Join(a.cfg.DataDir, "seccomp", rel)
		default:
			return fmt.Errorf("container %q: seccompProfile type %q", c.Name, profile.Type)
		}
	}
	return nil
}

// verifyNonRoot is kubelet's verifyRunAsNonRoot, with its messages: with
// runAsNonRoot, a runAsUser of 0, an image whose user is root (or unset),
// or an image with a user name (not checkable) is refused.
func verifyNonRoot(pod *corev1.Pod, c *corev1.Container, img runtime.Image) error {
	uid, _, nonRoot := effectiveUser(pod, c)
	if nonRoot == nil || !*nonRoot {
		return nil
	}
	if uid != nil {
		if *uid == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", format.Pod(pod), c.Name)
		}
		return nil
	}
	user, _, _ := strings.Cut(img.User, ":")
	if user == "" {
		user = "0" // an image without a user runs as root
	}
	n, err := strconv.ParseInt(user, 10, 64)
	switch {
	case err != nil:
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", user, format.Pod(pod), c.Name)
	case n == 0:
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", format.Pod(pod), c.Name)
	}
	return nil
}

// effectiveUser is the container's runAsUser, runAsGroup and runAsNonRoot,
// each falling back to the pod's securityContext.
func effectiveUser(pod *corev1.Pod, c *corev1.Container) (uid, gid *int64, nonRoot *bool) {
	if psc := pod.Spec.SecurityContext; psc != nil {
		uid, gid, nonRoot = psc.RunAsUser, psc.RunAsGroup, psc.RunAsNonRoot
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
	}
	return uid, gid, nonRoot
}

// resolveEnv evaluates envFrom, then env (value, $(VAR) references,
// fieldRef, resourceFieldRef, configMapKeyRef and secretKeyRef), as kubelet.
// A missing non-optional ConfigMap, Secret or key is kubelet's error.
func (a *Agent) resolveEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container) ([]runtime.EnvVar, error) {
	vars := make(map[string]string, len(c.Env))
	var order []string
	set := func(name, v string) {
		if _, ok := vars[name]; !ok {
			order = append(order, name)
		}
		vars[name] = v
	}
	for _, e := range a.serviceEnv(pod) {
		set(e.Name, e.Value)
	}
	for _, ef := range c.EnvFrom {
		var r objectRef
		var optional *bool
		switch {
		case ef.ConfigMapRef != nil:
			r, optional = objectRef{resources.ConfigMaps, pod.Namespace, ef.ConfigMapRef.Name}, ef.ConfigMapRef.Optional
		case ef.SecretRef != nil:
			r, optional = objectRef{resources.Secrets, pod.Namespace, ef.SecretRef.Name}, ef.SecretRef.Optional
		default:
			continue
		}
		obj, err := a.objects.get(ctx, r)
		if apierrors.IsNotFound(err) && optional != nil && *optional {
			continue
		}
		if err != nil {
			return nil, err
		}
		data := objectData(obj)
		keys := slices.Sorted(maps.Keys(data))
		for _, k := range keys {
			set(ef.Prefix+k, string(data[k]))
		}
	}
	for _, e := range c.Env {
		v := expand(e.Value, vars)
		if src := e.ValueFrom; src != nil {
			var err error
			switch {
			case src.FieldRef != nil:
				v, err = a.fieldRef(pod, src.FieldRef.FieldPath)
			case src.ResourceFieldRef != nil:
				v, err = resourceFieldRef(c, src.ResourceFieldRef)
			case src.ConfigMapKeyRef != nil:
				ref := src.ConfigMapKeyRef
				var ok bool
				v, ok, err = a.keyRef(ctx, objectRef{resources.ConfigMaps, pod.Namespace, ref.Name}, ref.Key, ref.Optional, "ConfigMap")
				if !ok && err == nil {
					continue
				}
			case src.SecretKeyRef != nil:
				ref := src.SecretKeyRef
				var ok bool
				v, ok, err = a.keyRef(ctx, objectRef{resources.Secrets, pod.Namespace, ref.Name}, ref.Key, ref.Optional, "Secret")
				if !ok && err == nil {
					continue
				}
			default:
				err = fmt.Errorf("only fieldRef, resourceFieldRef, configMapKeyRef and secretKeyRef are supported")
			}
			if err != nil {
				if src.ConfigMapKeyRef != nil || src.SecretKeyRef != nil {
					return nil, err // kubelet's message as is: configmap "x" not found
				}
				return nil, fmt.Errorf("container %q: env %s: %w", c.Name, e.Name, err)
			}
		}
		set(e.Name, v)
	}
	out := make([]runtime.EnvVar, 0, len(order))
	for _, name := range order {
		out = append(out, runtime.EnvVar{Name: name, Value: vars[name]})
	}
	return out, nil
}

// keyRef is one key of a ConfigMap or Secret; ok is false when it is
// missing and optional (the variable is then not set).
func (a *Agent) keyRef(ctx context.Context, r objectRef, key string, optional *bool, kind string) (string, bool, error) {
	opt := optional != nil && *optional
	obj, err := a.objects.get(ctx, r)
	if apierrors.IsNotFound(err) && opt {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	v, ok := objectData(obj)[key]
	if !ok {
		if opt {
			return "", false, nil
		}
		return "", false, fmt.Errorf("couldn't find key %s in %s %s/%s", key, kind, r.Namespace, r.Name)
	}
	return string(v), true, nil
}

// fieldRef is the value of a downward API field path, as kubelet's.
func (a *Agent) fieldRef(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return a.cfg.NodeIP, nil
	case "status.podIP", "status.podIPs":
		if pod.Spec.HostNetwork {
			return a.cfg.NodeIP, nil
		}
		if path == "status.podIPs" && len(pod.Status.PodIPs) > 0 {
			ips := make([]string, len(pod.Status.PodIPs))
			for i, ip := range pod.Status.PodIPs {
				ips[i] = ip.IP
			}
			return strings.Join(ips, ","), nil
		}
		return pod.Status.PodIP, nil
	}
	// metadata.name, namespace, uid, labels, annotations (whole or one key).
	v, err := fieldpath.ExtractFieldPathAsString(pod, path)
	if err != nil {
		return "", fmt.Errorf("unsupported fieldPath %q: %w", path, err)
	}
	return v, nil
}

func resourceFieldRef(c *corev1.Container, r *corev1.ResourceFieldSelector) (string, error) {
	div := r.Divisor
	if div.IsZero() {
		div = resource.MustParse("1")
	}
	switch r.Resource {
	case "limits.cpu":
		q := c.Resources.Limits[corev1.ResourceCPU]
		return strconv.FormatInt(ceilDiv(q.MilliValue(), div.MilliValue()), 10), nil
	case "requests.cpu":
		q := c.Resources.Requests[corev1.ResourceCPU]
		return strconv.FormatInt(ceilDiv(q.MilliValue(), div.MilliValue()), 10), nil
	case "limits.memory":
		q := c.Resources.Limits[corev1.ResourceMemory]
		return strconv.FormatInt(ceilDiv(q.Value(), div.Value()), 10), nil
	case "requests.memory":
		q := c.Resources.Requests[corev1.ResourceMemory]
		return strconv.FormatInt(ceilDiv(q.Value(), div.Value()), 10), nil
	}
	return "", fmt.Errorf("unsupported resource %q", r.Resource)
}

func ceilDiv(a, b int64) int64 {
	if b <= 0 {
		return a
	}
	return (a + b - 1) / b
}

// expand replaces $(NAME) with defined variables and $$ with $, as kubelet.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				name := s[i+2 : i+2+end]
				if v, ok := vars[name]; ok {
					b.WriteString(v)
				} else {
					b.WriteString(s[i : i+3+end])
				}
				i += 2 + end
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func expandAll(in []string, vars map[string]string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expand(s, vars)
	}
	return out
}

// mounts maps the container's volume mounts: hostPath, emptyDir, and the
// volumes the agent writes (configMap, secret, downwardAPI, projected),
// bound read-only. subPath and subPathExpr (expanded with the container's
// env) select a path inside the volume; a subPath of an agent-written volume
// binds the file as it is now, so later updates do not reach it (as with
// kubelet).
func (a *Agent) mounts(ctx context.Context, pod *corev1.Pod, c *corev1.Container, vars map[string]string) ([]runtime.Mount, error) {
	var out []runtime.Mount
	for _, vm := range c.VolumeMounts {
		var vol *corev1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == vm.Name {
				vol = &pod.Spec.Volumes[i]
			}
		}
		if vol == nil {
			return nil, fmt.Errorf("container %q: volumeMount %q: no such volume", c.Name, vm.Name)
		}
		m := runtime.Mount{Target: vm.MountPath, ReadOnly: vm.ReadOnly, Volume: vol.Name}
		if err := mountPropagation(c, vm, &m); err != nil {
			return nil, err
		}
		switch {
		case vol.HostPath != nil:
			m.Type = runtime.MountBind
			m.Source = vol.HostPath.Path
			m.HostPath = vol.HostPath.Path
			if t := vol.HostPath.Type; t != nil {
				m.HostPathType = runtime.HostPathType(*t)
			}
		case vol.EmptyDir != nil:
			m.Type = runtime.MountEmptyDir
			if vol.EmptyDir.Medium == corev1.StorageMediumMemory {
				m.Type = runtime.MountTmpfs
				break
			}
			if a.cfg.DataDir != "" {
				src, err := a.makeVolumeDir(pod, vol.Name, emptyDirMode)
				if err != nil {
					return nil, fmt.Errorf("container %q: emptyDir %q: %w", c.Name, vol.Name, err)
				}
				m.Source = src
			}
		case projectedVolume(vol):
			dir, err := a.setUpVolume(ctx, pod, vol)
			if err != nil {
				return nil, err
			}
			m.Type, m.Source, m.ReadOnly = runtime.MountBind, dir, true
		default:
			return nil, fmt.Errorf("container %q: volume %q: only hostPath, emptyDir, configMap, secret, downwardAPI and projected volumes are supported", c.Name, vol.Name)
		}
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			sub = expand(vm.SubPathExpr, vars)
		}
		if sub != "" {
			if filepath.IsAbs(sub) || slices.Contains(strings.Split(filepath.ToSlash(sub), "/"), "..") {
				return nil, fmt.Errorf("container %q: volumeMount %q: subPath %q must be a relative path without '..'", c.Name, vm.Name, sub)
			}
			if m.Source == "" {
				return nil, fmt.Errorf("container %q: volumeMount %q: subPath needs a host directory (memory-backed volumes and emptyDir without a data dir have none)", c.Name, vm.Name)
			}
			p := filepath.Join(m.Source, sub)
			if projectedVolume(vol) {
				// Bind what the path resolves to now (inside the volume).
				real, err := filepath.EvalSymlinks(p)
				if err != nil {
					return nil, fmt.Errorf("container %q: volumeMount %q: subPath %q: %w", c.Name, vm.Name, sub, err)
				}
				p = real
			} else {
				// A typed hostPath is checked (a DirectoryOrCreate one made)
				// before its subPath, as kubelet sets the volume up before the
				// container: a failure is the volume's (FailedMount), not
				// the subPath's.
				if vol.HostPath != nil && m.HostPathType != "" {
					if err := runtime.CheckHostPath(m.Source, m.HostPathType); err != nil {
						return nil, &runtime.Error{Op: "mount", Kind: runtime.MountFailed, Subject: vol.Name, Err: err}
					}
				}
				prepared, err := prepareSubPath(m.Source, sub)
				if err != nil {
					// The pod's status gets kubelet's message, which names
					// no host path; the log has the cause.
					a.log.Warn("subPath not prepared", "pod", podRef(pod), "container", c.Name, "volumeMount", vm.Name, "subPath", sub, "err", err)
					if errors.Is(err, errSubPathDirs) {
						return nil, fmt.Errorf("failed to create subPath directory for volumeMount %q of container %q", vm.Name, c.Name)
					}
					return nil, fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q", vm.Name, c.Name)
				}
				p = prepared
			}
			m.Source = p
			m.ReadOnly = vm.ReadOnly || projectedVolume(vol)
		}
		out = append(out, m)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return filepath.Clean(vm.MountPath) == serviceAccountMountPath || strings.HasPrefix(serviceAccountMountPath, filepath.Clean(vm.MountPath)+"/")
	}) && a.automountToken(ctx, pod) {
		dir, err := a.setUpServiceAccountVolume(ctx, pod)
		if err != nil {
			return nil, err
		}
		out = append(out, runtime.Mount{Type: runtime.MountBind, Source: dir, Target: serviceAccountMountPath, ReadOnly: true})
	}
	return out, nil
}

// mountPropagation maps a mount's propagation; Bidirectional needs a
// privileged container, as Kubernetes' validation says.
func mountPropagation(c *corev1.Container, vm corev1.VolumeMount, m *runtime.Mount) error {
	if vm.MountPropagation == nil {
		return nil
	}
	switch *vm.MountPropagation {
	case corev1.MountPropagationNone:
	case corev1.MountPropagationHostToContainer:
		m.Propagation = runtime.PropagationHostToContainer
	case corev1.MountPropagationBidirectional:
		if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
			return fmt.Errorf("container %q: volumeMount %q: Bidirectional mount propagation is available only to privileged containers", c.Name, vm.Name)
		}
		m.Propagation = runtime.PropagationBidirectional
	default:
		return fmt.Errorf("container %q: volumeMount %q: mountPropagation %q", c.Name, vm.Name, *vm.MountPropagation)
	}
	return nil
}
