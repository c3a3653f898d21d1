package cli

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// podTemplateText is kubectl's DescribePodTemplate, as "rollout history
// --revision N" prints it: tab-separated, not aligned, two spaces per level.
// Probes, env-from and the rarer volume kinds are summarised.
func podTemplateText(t *corev1.PodTemplateSpec) string {
	var b strings.Builder
	w := func(level int, format string, args ...any) {
		b.WriteString(strings.Repeat("  ", level))
		fmt.Fprintf(&b, format, args...)
	}
	w(0, "Pod Template:\n")
	multiline(w, "  Labels", labelPairs(t.Labels))
	if len(t.Annotations) > 0 {
		var pairs []string
		for _, k := range sortedKeys(t.Annotations) {
			if k != LastAppliedAnnotation {
				pairs = append(pairs, k+": "+t.Annotations[k])
			}
		}
		multiline(w, "  Annotations", pairs)
	}
	if t.Spec.ServiceAccountName != "" {
		w(1, "Service Account:\t%s\n", t.Spec.ServiceAccountName)
	}
	if len(t.Spec.InitContainers) > 0 {
		templateContainers(w, "Init Containers", t.Spec.InitContainers)
	}
	templateContainers(w, "Containers", t.Spec.Containers)
	templateVolumes(w, t.Spec.Volumes)
	if t.Spec.PriorityClassName != "" {
		w(1, "Priority Class Name:\t%s\n", t.Spec.PriorityClassName)
	}
	multiline(w, "  Node-Selectors", labelPairs(t.Spec.NodeSelector))
	tols := append([]corev1.Toleration{}, t.Spec.Tolerations...)
	sort.SliceStable(tols, func(i, j int) bool { return tols[i].Key < tols[j].Key })
	var ts []string
	for _, tol := range tols {
		ts = append(ts, kubectlToleration(tol))
	}
	multiline(w, "  Tolerations", ts)
	return b.String()
}

type writeFunc func(level int, format string, args ...any)

// multiline is kubectl's printLabelsMultiline: "title:\tfirst", then
// "\tnext" per line, or "title:\t<none>".
func multiline(w writeFunc, title string, lines []string) {
	if len(lines) == 0 {
		w(0, "%s:\t<none>\n", title)
		return
	}
	for i, l := range lines {
		if i == 0 {
			w(0, "%s:\t%s\n", title, l)
		} else {
			w(0, "\t%s\n", l)
		}
	}
}

func labelPairs(m map[string]string) []string {
	var out []string
	for _, k := range sortedKeys(m) {
		out = append(out, k+"="+m[k])
	}
	return out
}

func templateContainers(w writeFunc, label string, cs []corev1.Container) {
	if len(cs) == 0 {
		w(1, "%s: <none>\n", label)
		return
	}
	w(1, "%s:\n", label)
	for _, c := range cs {
		w(1, " %s:\n", c.Name)
		w(2, "Image:\t%s\n", c.Image)
		var ports, hostPorts []string
		for _, p := range c.Ports {
			proto := orDefault(string(p.Protocol), "TCP")
			ports = append(ports, fmt.Sprintf("%d/%s", p.ContainerPort, proto))
			hostPorts = append(hostPorts, fmt.Sprintf("%d/%s", p.HostPort, proto))
		}
		portLine(w, "Port", ports)
		portLine(w, "Host Port", hostPorts)
		if len(c.Command) > 0 {
			w(2, "Command:\n")
			for _, s := range c.Command {
				w(3, "%s\n", s)
			}
		}
		if len(c.Args) > 0 {
			w(2, "Args:\n")
			for _, s := range c.Args {
				w(3, "%s\n", s)
			}
		}
		resourceLines(w, "Limits", c.Resources.Limits)
		resourceLines(w, "Requests", c.Resources.Requests)
		probeLine(w, "Liveness", c.LivenessProbe)
		probeLine(w, "Readiness", c.ReadinessProbe)
		probeLine(w, "Startup", c.StartupProbe)
		if len(c.Env) == 0 {
			w(2, "Environment:\t<none>\n")
		} else {
			w(2, "Environment:\n")
			for _, e := range c.Env {
				v := e.Value
				if e.ValueFrom != nil {
					v = "<set from a reference>"
				}
				w(3, "%s:\t%s\n", e.Name, v)
			}
		}
		if len(c.VolumeMounts) == 0 {
			w(2, "Mounts:\t<none>\n")
			continue
		}
		w(2, "Mounts:\n")
		mounts := append([]corev1.VolumeMount{}, c.VolumeMounts...)
		sort.SliceStable(mounts, func(i, j int) bool { return mounts[i].MountPath < mounts[j].MountPath })
		for _, m := range mounts {
			flags := []string{"rw"}
			if m.ReadOnly {
				flags[0] = "ro"
			}
			if m.SubPath != "" {
				flags = append(flags, fmt.Sprintf("path=%q", m.SubPath))
			}
			w(3, "%s from %s (%s)\n", m.MountPath, m.Name, strings.Join(flags, ","))
		}
	}
}

// portLine prints "Port:\tX" or, for several, "Ports:\tX, Y".
func portLine(w writeFunc, title string, ports []string) {
	if len(ports) > 1 {
		w(2, "%ss:\t%s\n", title, strings.Join(ports, ", "))
		return
	}
	w(2, "%s:\t%s\n", title, orNone(strings.Join(ports, "")))
}

func resourceLines(w writeFunc, title string, rl corev1.ResourceList) {
	if len(rl) == 0 {
		return
	}
	w(2, "%s:\n", title)
	names := make([]string, 0, len(rl))
	for n := range rl {
		names = append(names, string(n))
	}
	sort.Strings(names)
	for _, n := range names {
		q := rl[corev1.ResourceName(n)]
		w(3, "%s:\t%s\n", n, q.String())
	}
}

func probeLine(w writeFunc, title string, p *corev1.Probe) {
	if p == nil {
		return
	}
	var what string
	switch {
	case p.HTTPGet != nil:
		what = fmt.Sprintf("http-get %s://:%s%s", strings.ToLower(orDefault(string(p.HTTPGet.Scheme), "HTTP")), p.HTTPGet.Port.String(), p.HTTPGet.Path)
	case p.TCPSocket != nil:
		what = fmt.Sprintf("tcp-socket :%s", p.TCPSocket.Port.String())
	case p.Exec != nil:
		what = fmt.Sprintf("exec %v", p.Exec.Command)
	case p.GRPC != nil:
		what = fmt.Sprintf("grpc <pod>:%d", p.GRPC.Port)
	default:
		what = "unknown"
	}
	w(2, "%s:\t%s delay=%ds timeout=%ds period=%ds #success=%d #failure=%d\n", title, what,
		p.InitialDelaySeconds, p.TimeoutSeconds, p.PeriodSeconds, p.SuccessThreshold, p.FailureThreshold)
}

func templateVolumes(w writeFunc, vs []corev1.Volume) {
	if len(vs) == 0 {
		w(1, "Volumes:\t<none>\n")
		return
	}
	w(1, "Volumes:\n")
	for _, v := range vs {
		w(1, " %s:\n", v.Name)
		switch {
		case v.HostPath != nil:
			typ := "<none>"
			if v.HostPath.Type != nil {
				typ = string(*v.HostPath.Type)
			}
			w(2, "Type:\tHostPath (bare host directory volume)\n")
			w(2, "Path:\t%s\n", v.HostPath.Path)
			w(2, "HostPathType:\t%s\n", typ)
		case v.EmptyDir != nil:
			limit := "<unset>"
			if v.EmptyDir.SizeLimit != nil && v.EmptyDir.SizeLimit.Cmp(resource.Quantity{}) > 0 {
				limit = v.EmptyDir.SizeLimit.String()
			}
			w(2, "Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)\n")
			w(2, "Medium:\t%s\n", v.EmptyDir.Medium)
			w(2, "SizeLimit:\t%s\n", limit)
		case v.ConfigMap != nil:
			w(2, "Type:\tConfigMap (a volume populated by a ConfigMap)\n")
			w(2, "Name:\t%s\n", v.ConfigMap.Name)
		case v.Secret != nil:
			w(2, "Type:\tSecret (a volume populated by a Secret)\n")
			w(2, "SecretName:\t%s\n", v.Secret.SecretName)
		default:
			w(2, "Type:\t<unknown>\n")
		}
	}
}

// kubectlToleration is one line of kubectl's printTolerationsMultiline.
func kubectlToleration(t corev1.Toleration) string {
	s := t.Key
	if t.Value != "" {
		s += "=" + t.Value
	}
	if t.Effect != "" {
		s += ":" + string(t.Effect)
	}
	if t.Operator == corev1.TolerationOpExists && t.Value == "" {
		if t.Key != "" || t.Effect != "" {
			s += " op=Exists"
		} else {
			s += "op=Exists"
		}
	}
	if t.TolerationSeconds != nil {
		s += fmt.Sprintf(" for %ds", *t.TolerationSeconds)
	}
	return s
}
