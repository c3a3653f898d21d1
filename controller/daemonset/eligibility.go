package daemonset

import (
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// discard is the logger handed to component-helpers, which only log at high verbosity.
var discard = logr.Discard()

// NodeShouldRunDaemonPod reports whether a daemon pod of ds should be created
// on node (shouldRun) and whether an existing one may stay (shouldContinueRunning),
// as docs/daemonset.md "Which nodes run a pod" says (k8s.io/kubernetes
// pkg/controller/daemon/daemon_controller.go NodeShouldRunDaemonPod): the
// template's nodeName, nodeSelector and required node affinity must match,
// and NoSchedule/NoExecute taints must be tolerated
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
	shouldRun, shouldContinueRunning, _ = e.check(node)
	return shouldRun, shouldContinueRunning
}

// misfit is why a node does not (fully) fit a DaemonSet: the first rule
// of NodeShouldRunDaemonPod it fails, and the taint for the taint rules.
type misfit struct {
	cause misfitCause
	taint corev1.Taint
}

type misfitCause uint8

const (
	fits misfitCause = iota
	misfitNodeName
	misfitNodeSelector
	misfitNodeAffinity
	misfitNoSchedule // an untolerated NoSchedule taint: running pods stay
	misfitNoExecute
)

// check is nodeShouldRun with the rule the node fails. The reason is
// worked out only on a misfit, so the common path allocates nothing.
func (e *eligibility) check(node *corev1.Node) (shouldRun, shouldContinueRunning bool, why misfit) {
	if e.ds.Spec.Template.Spec.NodeName != "" && e.ds.Spec.Template.Spec.NodeName != node.Name {
		return false, false, misfit{cause: misfitNodeName}
	}
	// The hypothetical pod is bound to node, so its nodeName always fits.
	// A parse error is ignored, as Kubernetes does for backwards compatibility.
	fitsNodeAffinity, _ := e.affinity.Match(node)
	if !fitsNodeAffinity {
		if sel := e.pod.Spec.NodeSelector; len(sel) > 0 && !labels.SelectorFromSet(sel).Matches(labels.Set(node.Labels)) {
			return false, false, misfit{cause: misfitNodeSelector}
		}
		return false, false, misfit{cause: misfitNodeAffinity}
	}
	tolerations := e.pod.Spec.Tolerations
	taint, untolerated := v1helper.FindMatchingUntoleratedTaint(discard, node.Spec.Taints, tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoExecute || t.Effect == corev1.TaintEffectNoSchedule
		}, false)
	if untolerated {
		noExecute, untoleratedNoExecute := v1helper.FindMatchingUntoleratedTaint(discard, node.Spec.Taints, tolerations,
			func(t *corev1.Taint) bool { return t.Effect == corev1.TaintEffectNoExecute }, false)
		if untoleratedNoExecute {
			return false, false, misfit{cause: misfitNoExecute, taint: noExecute}
		}
		return false, true, misfit{cause: misfitNoSchedule, taint: taint}
	}
	return true, true, misfit{}
}

// reason says in words why node does not fit ds ("" when it fits).
func (m misfit) reason(ds *appsv1.DaemonSet) string {
	switch m.cause {
	case misfitNodeName:
		return fmt.Sprintf("the template's nodeName is %q", ds.Spec.Template.Spec.NodeName)
	case misfitNodeSelector:
		return fmt.Sprintf("node selector %s does not match the node's labels", labels.FormatLabels(ds.Spec.Template.Spec.NodeSelector))
	case misfitNodeAffinity:
		return "required node affinity does not match the node"
	case misfitNoSchedule, misfitNoExecute:
		return fmt.Sprintf("taint %s not tolerated", m.taint.ToString())
	}
	return ""
}

// Placement is NodeShouldRunDaemonPod's verdict for one node with its
// reason in words.
type Placement struct {
	// ShouldRun: a daemon pod is created on the node when it has none.
	ShouldRun bool
	// ShouldContinueRunning: a daemon pod already there may stay.
	ShouldContinueRunning bool
	// Reason is why the node does not fit ("" when ShouldRun): the first
	// rule it fails, e.g. "taint gpu=true:NoSchedule not tolerated".
	Reason string
}

// PlaceDaemonPod is NodeShouldRunDaemonPod with the reason: the rules the
// controller applies, for "everynode plan" and "rollout status --nodes".
func PlaceDaemonPod(node *corev1.Node, ds *appsv1.DaemonSet) Placement {
	return newEligibility(ds).place(node)
}

func (e *eligibility) place(node *corev1.Node) Placement {
	run, cont, why := e.check(node)
	return Placement{ShouldRun: run, ShouldContinueRunning: cont, Reason: why.reason(e.ds)}
}

// AddOrUpdateDaemonPodTolerations adds the tolerations every daemon pod gets
// (docs/daemonset.md "Taints and tolerations"; the keys are k8s.io/api's
// well-known taints): not-ready and unreachable NoExecute; disk, memory and pid
// pressure and unschedulable NoSchedule; network-unavailable NoSchedule only
// with hostNetwork. An existing toleration with the same key, operator, value
// and effect is replaced.
func AddOrUpdateDaemonPodTolerations(spec *corev1.PodSpec) {
	add := func(key string, effect corev1.TaintEffect) {
		addOrUpdateToleration(spec, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: effect})
	}
	add(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute)
	add(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)
	add(corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule)
	add(corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule)
	add(corev1.TaintNodePIDPressure, corev1.TaintEffectNoSchedule)
	add(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)
	if spec.HostNetwork {
		add(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)
	}
}

// addOrUpdateToleration is k8s.io/kubernetes pkg/apis/core/v1/helper
// AddOrUpdateTolerationInPodSpec (not importable; component-helpers does not
// carry it).
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
