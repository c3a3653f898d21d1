// Package nodelabels is the rule of which labels a node may set on its own
// Node (Kubernetes' NodeRestriction admission): the API server enforces it,
// and agents check their --labels against it before they try. It depends on
// nothing of the API server, so the lean agent binary can link it.
package nodelabels

import (
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Modified are the keys whose presence or value differs between a and b,
// sorted.
func Modified(a, b map[string]string) []string {
	var keys []string
	for k, v := range a {
		if w, ok := b[k]; !ok || v != w {
			keys = append(keys, k)
		}
	}
	for k, v := range b {
		if w, ok := a[k]; !ok || v != w {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return slices.Compact(keys)
}

// Forbidden are the keys a node may not add, change or remove:
// node-restriction.kubernetes.io/ ones, and kubernetes.io and k8s.io ones
// that are not kubelet's (kubeletLabel), as NodeRestriction decides.
// node-role labels fall under the second rule.
func Forbidden(keys []string) []string {
	var bad []string
	for _, k := range keys {
		ns, _, found := strings.Cut(k, "/")
		if !found {
			continue
		}
		restricted := ns == corev1.LabelNamespaceNodeRestriction || strings.HasSuffix(ns, "."+corev1.LabelNamespaceNodeRestriction)
		kube := ns == "kubernetes.io" || strings.HasSuffix(ns, ".kubernetes.io") || ns == "k8s.io" || strings.HasSuffix(ns, ".k8s.io")
		if restricted || (kube && !kubeletLabel(k, ns)) {
			bad = append(bad, k)
		}
	}
	return bad
}

// ForbiddenOf returns the label keys of labels a node may not set on itself
// (sorted).
func ForbiddenOf(labels map[string]string) []string {
	return Forbidden(Modified(labels, nil))
}

// kubeletLabels are the kubernetes.io labels a kubelet may set on its own
// Node, and kubeletLabelNamespaces the label namespaces (with their
// subdomains) it may use: k8s.io/kubelet/pkg/apis' KubeletLabels and
// KubeletLabelNamespaces.
func kubeletLabel(key, ns string) bool {
	switch key {
	case corev1.LabelHostname, corev1.LabelTopologyZone, corev1.LabelTopologyRegion,
		corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion,
		corev1.LabelInstanceType, corev1.LabelInstanceTypeStable, corev1.LabelOSStable, corev1.LabelArchStable,
		"beta.kubernetes.io/os", "beta.kubernetes.io/arch":
		return true
	}
	for _, allowed := range []string{corev1.LabelNamespaceSuffixKubelet, corev1.LabelNamespaceSuffixNode} {
		if ns == allowed || strings.HasSuffix(ns, "."+allowed) {
			return true
		}
	}
	return false
}
