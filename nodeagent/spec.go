package nodeagent

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// containerSpec maps a pod container onto the runtime's terms. An error
// names a field the agent cannot honour (reported as
// CreateContainerConfigError).
func (a *Agent) containerSpec(pod *corev1.Pod, c *corev1.Container, attempt int) (runtime.ContainerSpec, error) {
	env, err := a.resolveEnv(pod, c)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	vars := make(map[string]string, len(env))
	for _, e := range env {
		vars[e.Name] = e.Value
	}
	mounts, err := a.mounts(pod, c)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	spec := runtime.ContainerSpec{
		Name:        c.Name,
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
	if err := mapSecurity(pod, c, &spec); err != nil {
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
// runAsGroup and runAsNonRoot, and readOnlyRootFilesystem and
// allowPrivilegeEscalation. As kubelet, a runAsNonRoot container whose
// runAsUser is 0 is refused; runAsNonRoot without runAsUser cannot be checked
// against the image and is reported by unhonoured instead. runAsGroup without
// runAsUser is left to the image's user (also reported).
func mapSecurity(pod *corev1.Pod, c *corev1.Container, spec *runtime.ContainerSpec) error {
	uid, gid, nonRoot := effectiveUser(pod, c)
	if uid != nil {
		v := *uid
		spec.RunAsUser = &v
		if gid != nil {
			g := *gid
			spec.RunAsGroup = &g
		}
	}
	if nonRoot != nil && *nonRoot && uid != nil && *uid == 0 {
		return fmt.Errorf("container %q: container's runAsUser breaks non-root policy (runAsNonRoot with runAsUser 0)", c.Name)
	}
	if sc := c.SecurityContext; sc != nil {
		spec.ReadOnlyRootFilesystem = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		spec.NoNewPrivileges = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
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

// resolveEnv evaluates env (value, $(VAR) references, fieldRef and
// resourceFieldRef); secrets, config maps and envFrom are not served.
func (a *Agent) resolveEnv(pod *corev1.Pod, c *corev1.Container) ([]runtime.EnvVar, error) {
	if len(c.EnvFrom) > 0 {
		return nil, fmt.Errorf("container %q: envFrom is not supported (no config maps or secrets in everynode)", c.Name)
	}
	vars := make(map[string]string, len(c.Env))
	out := make([]runtime.EnvVar, 0, len(c.Env))
	for _, e := range c.Env {
		v := expand(e.Value, vars)
		if src := e.ValueFrom; src != nil {
			var err error
			switch {
			case src.FieldRef != nil:
				v, err = a.fieldRef(pod, src.FieldRef.FieldPath)
			case src.ResourceFieldRef != nil:
				v, err = resourceFieldRef(c, src.ResourceFieldRef)
			default:
				err = fmt.Errorf("only fieldRef and resourceFieldRef are supported")
			}
			if err != nil {
				return nil, fmt.Errorf("container %q: env %s: %w", c.Name, e.Name, err)
			}
		}
		vars[e.Name] = v
		out = append(out, runtime.EnvVar{Name: e.Name, Value: v})
	}
	return out, nil
}

func (a *Agent) fieldRef(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return a.cfg.NodeIP, nil
	case "status.podIP":
		if pod.Spec.HostNetwork {
			return a.cfg.NodeIP, nil
		}
		return pod.Status.PodIP, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if rest, ok := strings.CutPrefix(path, prefix+"['"); ok && strings.HasSuffix(rest, "']") {
			return m[strings.TrimSuffix(rest, "']")], nil
		}
	}
	return "", fmt.Errorf("unsupported fieldPath %q", path)
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

// mounts maps the container's volume mounts; only hostPath and emptyDir
// volumes are served.
func (a *Agent) mounts(pod *corev1.Pod, c *corev1.Container) ([]runtime.Mount, error) {
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
		m := runtime.Mount{Target: vm.MountPath, ReadOnly: vm.ReadOnly}
		switch {
		case vol.HostPath != nil:
			m.Type = runtime.MountBind
			m.Source = vol.HostPath.Path
		case vol.EmptyDir != nil:
			m.Type = runtime.MountEmptyDir
			if vol.EmptyDir.Medium == corev1.StorageMediumMemory {
				m.Type = runtime.MountTmpfs
				break
			}
			if a.cfg.DataDir != "" {
				m.Source = filepath.Join(a.podDir(pod.UID), "volumes", vol.Name)
				if err := os.MkdirAll(m.Source, 0o755); err != nil {
					return nil, fmt.Errorf("container %q: emptyDir %q: %w", c.Name, vol.Name, err)
				}
			}
		default:
			return nil, fmt.Errorf("container %q: volume %q: only hostPath and emptyDir volumes are supported", c.Name, vol.Name)
		}
		if vm.SubPath != "" && m.Source != "" {
			m.Source = filepath.Join(m.Source, vm.SubPath)
		}
		out = append(out, m)
	}
	return out, nil
}
