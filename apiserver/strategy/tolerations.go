package strategy

import corev1 "k8s.io/api/core/v1"

// DefaultTolerationSeconds is the tolerationSeconds of the not-ready and
// unreachable tolerations a new pod gets (DefaultTolerationSeconds).
const DefaultTolerationSeconds = int64(300)

// DefaultTolerations is Kubernetes' DefaultTolerationSeconds admission
// plugin (k8s.io/kubernetes plugin/pkg/admission/defaulttolerationseconds),
// on the v1 Pod the API server holds rather than the internal one the
// plugin takes: a pod that does not already tolerate the
// node.kubernetes.io/not-ready or node.kubernetes.io/unreachable NoExecute
// taint (a toleration with that key or no key, and effect NoExecute or
// none) gets a toleration for it with tolerationSeconds 300. So a pod stays
// 5 minutes on a node that turned NotReady before it is evicted. DaemonSet
// pods tolerate both taints forever already (their controller adds the
// tolerations) and are left alone, as in Kubernetes.
func DefaultTolerations(pod *corev1.Pod) {
	notReady, unreachable := false, false
	for _, t := range pod.Spec.Tolerations {
		if t.Effect != corev1.TaintEffectNoExecute && t.Effect != "" {
			continue
		}
		notReady = notReady || t.Key == corev1.TaintNodeNotReady || t.Key == ""
		unreachable = unreachable || t.Key == corev1.TaintNodeUnreachable || t.Key == ""
	}
	add := func(key string) {
		s := DefaultTolerationSeconds
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{
			Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &s})
	}
	if !notReady {
		add(corev1.TaintNodeNotReady)
	}
	if !unreachable {
		add(corev1.TaintNodeUnreachable)
	}
}
