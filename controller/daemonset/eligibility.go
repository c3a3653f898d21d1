package daemonset

import (
	"slices"

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
	return newEligibility(ds).nodeShouldRun(node)
}

// eligibility evaluates NodeShouldRunDaemonPod for one DaemonSet against
// many nodes: the hypothetical pod (with the daemon tolerations) and its
// required node affinity are built once, not once per node — a sync looks
// at every node, several times. The DaemonSet must not change while it is
// used.
type eligibility struct {
	ds       *appsv1.DaemonSet
	pod      *corev1.Pod // hypothetical pod without nodeName; read-only
	affinity nodeaffinity.RequiredNodeAffinity
}

func newEligibility(ds *appsv1.DaemonSet) *eligibility {
	// A shallow copy of the template: only the tolerations are changed,
	// and they are cloned first.
	pod := &corev1.Pod{ObjectMeta: ds.Spec.Template.ObjectMeta, Spec: ds.Spec.Template.Spec}
	pod.Namespace = ds.Namespace
	pod.Spec.Tolerations = slices.Clone(pod.Spec.Tolerations)
	AddOrUpdateDaemonPodTolerations(&pod.Spec)
	return &eligibility{ds: ds, pod: pod, affinity: nodeaffinity.GetRequiredNodeAffinity(pod)}
}

// nodeShouldRun is NodeShouldRunDaemonPod(node, e.ds).
func (e *eligibility) nodeShouldRun(node *corev1.Node) (shouldRun, shouldContinueRunning bool) {
	if e.ds.Spec.Template.Spec.NodeName != "" && e.ds.Spec.Template.Spec.NodeName != node.Name {
		return false, false
	}
	// The hypothetical pod is bound to node, so its nodeName always fits.
	// A parse error is ignored, as Kubernetes does for backwards compatibility.
	fitsNodeAffinity, _ := e.affinity.Match(node)
	if !fitsNodeAffinity {
		return false, false
	}
	tolerations := e.pod.Spec.Tolerations
	_, untolerated := v1helper.FindMatchingUntoleratedTaint(discard, node.Spec.Taints, tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoExecute || t.Effect == corev1.TaintEffectNoSchedule
		}, false)
	if untolerated {
		_, untoleratedNoExecute := v1helper.FindMatchingUntoleratedTaint(discard, node.Spec.Taints, tolerations,
			func(t *corev1.Taint) bool { return t.Effect == corev1.TaintEffectNoExecute }, false)
		return false, !untoleratedNoExecute
	}
	return true, true
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
