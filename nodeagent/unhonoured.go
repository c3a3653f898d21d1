package nodeagent

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// unhonoured lists, by field path, every field set in pod that the agent
// and its runtime do not honour. Values equal to Kubernetes' defaults are
// not listed, nor are fields only the scheduler or the controllers use
// (nodeSelector, affinity, tolerations, schedulerName, priority and
// priorityClassName (resolved by the API server's admission), preemptionPolicy, schedulingGates, os, resources.requests of cpu and
// memory). Fields that make a container fail with
// CreateContainerConfigError (env sources and volumes of other types) are
// listed too.
func unhonoured(pod *corev1.Pod) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	s := &pod.Spec
	for i := range s.Volumes {
		v := &s.Volumes[i]
		switch {
		case v.HostPath != nil:
		case v.EmptyDir != nil:
			if v.EmptyDir.SizeLimit != nil {
				add("spec.volumes[%d].emptyDir.sizeLimit", i)
			}
		case projectedVolume(v):
			if p := v.Projected; p != nil {
				for j, src := range p.Sources {
					if src.ConfigMap == nil && src.Secret == nil && src.DownwardAPI == nil && src.ServiceAccountToken == nil {
						add("spec.volumes[%d].projected.sources[%d]", i, j)
					}
				}
			}
		default:
			add("spec.volumes[%d] (%s: only hostPath, emptyDir, configMap, secret, downwardAPI and projected)", i, v.Name)
		}
	}
	for i := range s.InitContainers {
		out = append(out, containerUnhonoured(pod, &s.InitContainers[i], fmt.Sprintf("spec.initContainers[%d]", i))...)
	}
	for i := range s.Containers {
		out = append(out, containerUnhonoured(pod, &s.Containers[i], fmt.Sprintf("spec.containers[%d]", i))...)
	}
	if len(s.EphemeralContainers) > 0 {
		add("spec.ephemeralContainers")
	}
	if s.ActiveDeadlineSeconds != nil {
		add("spec.activeDeadlineSeconds")
	}
	if s.DNSPolicy == corev1.DNSNone {
		add("spec.dnsPolicy")
	}
	if s.DNSConfig != nil {
		add("spec.dnsConfig")
	}
	if s.HostIPC {
		add("spec.hostIPC")
	}
	if s.ShareProcessNamespace != nil && *s.ShareProcessNamespace {
		add("spec.shareProcessNamespace")
	}
	if s.HostUsers != nil && !*s.HostUsers {
		add("spec.hostUsers")
	}
	if psc := s.SecurityContext; psc != nil {
		p := "spec.securityContext."
		set := []struct {
			name string
			set  bool
		}{
			{"seLinuxOptions", psc.SELinuxOptions != nil},
			{"windowsOptions", psc.WindowsOptions != nil},
			{"supplementalGroups", len(psc.SupplementalGroups) > 0},
			{"supplementalGroupsPolicy", psc.SupplementalGroupsPolicy != nil},
			{"fsGroup", psc.FSGroup != nil},
			{"fsGroupChangePolicy", psc.FSGroupChangePolicy != nil},
			{"sysctls", len(psc.Sysctls) > 0},
			{"appArmorProfile", psc.AppArmorProfile != nil},
			{"seLinuxChangePolicy", psc.SELinuxChangePolicy != nil},
		}
		for _, f := range set {
			if f.set {
				add("%s%s", p, f.name)
			}
		}
	}
	if len(s.ImagePullSecrets) > 0 {
		add("spec.imagePullSecrets")
	}
	if s.Subdomain != "" {
		add("spec.subdomain")
	}
	if len(s.HostAliases) > 0 {
		add("spec.hostAliases")
	}
	if len(s.ReadinessGates) > 0 {
		add("spec.readinessGates")
	}
	if s.RuntimeClassName != nil {
		add("spec.runtimeClassName")
	}
	if len(s.Overhead) > 0 {
		add("spec.overhead")
	}
	if len(s.TopologySpreadConstraints) > 0 {
		add("spec.topologySpreadConstraints")
	}
	if s.SetHostnameAsFQDN != nil && *s.SetHostnameAsFQDN {
		add("spec.setHostnameAsFQDN")
	}
	if len(s.ResourceClaims) > 0 {
		add("spec.resourceClaims")
	}
	if s.Resources != nil {
		add("spec.resources")
	}
	if s.HostnameOverride != nil {
		add("spec.hostnameOverride")
	}
	if s.SchedulingGroup != nil {
		add("spec.schedulingGroup")
	}
	if len(s.EvictionResponders) > 0 {
		add("spec.evictionResponders")
	}
	return out
}

// containerUnhonoured lists the unhonoured fields of container c, whose
// field path is p.
func containerUnhonoured(pod *corev1.Pod, c *corev1.Container, p string) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, p+"."+fmt.Sprintf(format, args...)) }
	for j, e := range c.Env {
		if vf := e.ValueFrom; vf != nil && vf.FieldRef == nil && vf.ResourceFieldRef == nil && vf.ConfigMapKeyRef == nil && vf.SecretKeyRef == nil {
			add("env[%d].valueFrom", j)
		}
	}
	for _, l := range []struct {
		what string
		list corev1.ResourceList
	}{{"limits", c.Resources.Limits}, {"requests", c.Resources.Requests}} {
		var names []string
		for name := range l.list {
			if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
				names = append(names, string(name))
			}
		}
		slices.Sort(names)
		for _, n := range names {
			add("resources.%s[%s]", l.what, n)
		}
	}
	if len(c.Resources.Claims) > 0 {
		add("resources.claims")
	}
	if c.RestartPolicy != nil {
		add("restartPolicy")
	}
	if len(c.RestartPolicyRules) > 0 {
		add("restartPolicyRules")
	}
	for j, m := range c.VolumeMounts {
		if m.RecursiveReadOnly != nil && *m.RecursiveReadOnly != corev1.RecursiveReadOnlyDisabled {
			add("volumeMounts[%d].recursiveReadOnly", j)
		}
		if len(m.BindMountOptions) > 0 {
			add("volumeMounts[%d].bindMountOptions", j)
		}
		if m.SubPath != "" && memoryVolume(pod, m.Name) {
			add("volumeMounts[%d].subPath", j)
		}
	}
	if len(c.VolumeDevices) > 0 {
		add("volumeDevices")
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
		if pr.probe != nil && pr.probe.GRPC != nil {
			add("%s.grpc", pr.name)
		}
	}
	if c.Lifecycle != nil {
		add("lifecycle")
	}
	if c.TerminationMessagePath != "" && c.TerminationMessagePath != corev1.TerminationMessagePathDefault {
		add("terminationMessagePath")
	}
	if c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		add("terminationMessagePolicy")
	}
	if c.Stdin {
		add("stdin")
	}
	if c.StdinOnce {
		add("stdinOnce")
	}
	if c.TTY {
		add("tty")
	}
	if sc := c.SecurityContext; sc != nil {
		set := []struct {
			name string
			set  bool
		}{
			{"seLinuxOptions", sc.SELinuxOptions != nil},
			{"windowsOptions", sc.WindowsOptions != nil},
			{"procMount", sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount},
			{"appArmorProfile", sc.AppArmorProfile != nil},
		}
		for _, f := range set {
			if f.set {
				add("securityContext.%s", f.name)
			}
		}
	}
	return out
}

// memoryVolume reports whether the pod's volume name is a memory-backed
// emptyDir (a tmpfs, where subPath is not applied).
func memoryVolume(pod *corev1.Pod, name string) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Name == name {
			return v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory
		}
	}
	return false
}
