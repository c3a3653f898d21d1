package daemonset

import (
	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Well-known taint keys the daemon pods tolerate automatically (REFERENCE §1.3).
const (
	TaintNodeNotReady           = "node.kubernetes.io/not-ready"
	TaintNodeUnreachable        = "node.kubernetes.io/unreachable"
	TaintNodeDiskPressure       = "node.kubernetes.io/disk-pressure"
	TaintNodeMemoryPressure     = "node.kubernetes.io/memory-pressure"
	TaintNodePIDPressure        = "node.kubernetes.io/pid-pressure"
	TaintNodeUnschedulable      = "node.kubernetes.io/unschedulable"
	TaintNodeNetworkUnavailable = "node.kubernetes.io/network-unavailable"
)

// discard is the logger handed to component-helpers, which only log at high verbosity.
var discard = logr.Discard()

// NodeShouldRunDaemonPod reports whether a daemon pod of ds should be created
// on node (shouldRun) and whether an existing one may stay (shouldContinueRunning),
// exactly as REFERENCE §1.1: the template's nodeName, nodeSelector and required
// node affinity must match, and NoSchedule/NoExecute taints must be tolerated
// (with the automatic daemon tolerations); an untolerated NoSchedule taint alone
// lets existing pods stay. Node readiness, unschedulable, resources and host
// ports are not considered.
func NodeShouldRunDaemonPod(node *corev1.Node, ds *appsv1.DaemonSet) (shouldRun, shouldContinueRunning bool) {
	pod := hypotheticalPod(ds, node.Name)
	if ds.Spec.Template.Spec.NodeName != "" && ds.Spec.Template.Spec.NodeName != node.Name {
		return false, false
	}
	fitsNodeName, fitsNodeAffinity, fitsTaints := predicates(pod, node)
	if !fitsNodeName || !fitsNodeAffinity {
		return false, false
	}
	if !fitsTaints {
		_, untolerated := v1helper.FindMatchingUntoleratedTaint(discard, node.Spec.Taints, pod.Spec.Tolerations,
			func(t *corev1.Taint) bool { return t.Effect == corev1.TaintEffectNoExecute }, false)
		return false, !untolerated
	}
	return true, true
}

// hypotheticalPod is the pod the eligibility rules are evaluated for.
func hypotheticalPod(ds *appsv1.DaemonSet, nodeName string) *corev1.Pod {
	pod := &corev1.Pod{Spec: *ds.Spec.Template.Spec.DeepCopy()}
	pod.ObjectMeta = *ds.Spec.Template.ObjectMeta.DeepCopy()
	pod.Namespace = ds.Namespace
	pod.Spec.NodeName = nodeName
	AddOrUpdateDaemonPodTolerations(&pod.Spec)
	return pod
}

func predicates(pod *corev1.Pod, node *corev1.Node) (fitsNodeName, fitsNodeAffinity, fitsTaints bool) {
	fitsNodeName = pod.Spec.NodeName == "" || pod.Spec.NodeName == node.Name
	// A parse error is ignored, as Kubernetes does for backwards compatibility.
	fitsNodeAffinity, _ = nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	_, untolerated := v1helper.FindMatchingUntoleratedTaint(discard, node.Spec.Taints, pod.Spec.Tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoExecute || t.Effect == corev1.TaintEffectNoSchedule
		}, false)
	return fitsNodeName, fitsNodeAffinity, !untolerated
}

// AddOrUpdateDaemonPodTolerations adds the tolerations every daemon pod gets
// (REFERENCE §1.3): not-ready and unreachable NoExecute; disk, memory and pid
// pressure and unschedulable NoSchedule; network-unavailable NoSchedule only
// with hostNetwork. An existing toleration with the same key, operator, value
// and effect is replaced.
func AddOrUpdateDaemonPodTolerations(spec *corev1.PodSpec) {
	add := func(key string, effect corev1.TaintEffect) {
		addOrUpdateToleration(spec, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: effect})
	}
	add(TaintNodeNotReady, corev1.TaintEffectNoExecute)
	add(TaintNodeUnreachable, corev1.TaintEffectNoExecute)
	add(TaintNodeDiskPressure, corev1.TaintEffectNoSchedule)
	add(TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule)
	add(TaintNodePIDPressure, corev1.TaintEffectNoSchedule)
	add(TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)
	if spec.HostNetwork {
		add(TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)
	}
}

// addOrUpdateToleration is v1helper.AddOrUpdateTolerationInPodSpec.
func addOrUpdateToleration(spec *corev1.PodSpec, t corev1.Toleration) {
	var out []corev1.Toleration
	updated := false
	for i := range spec.Tolerations {
		if t.MatchToleration(&spec.Tolerations[i]) {
			if spec.Tolerations[i] == t {
				return
			}
			out = append(out, t)
			updated = true
			continue
		}
		out = append(out, spec.Tolerations[i])
	}
	if !updated {
		out = append(out, t)
	}
	spec.Tolerations = out
}
