package nodelabels

import (
	"slices"
	"testing"
)

// TestForbiddenOf: NodeRestriction's rule, key by key.
func TestForbiddenOf(t *testing.T) {
	labels := map[string]string{
		"zone": "edge", "example.com/disk": "ssd", // not kubernetes.io: allowed
		"kubernetes.io/hostname": "n1", "topology.kubernetes.io/zone": "z", "kubernetes.io/arch": "arm64", // kubelet's
		"kubelet.kubernetes.io/x": "1", "a.node.kubernetes.io/y": "1", // kubelet's namespaces and subdomains
		"node-role.kubernetes.io/worker":      "", // not kubelet's
		"node-restriction.kubernetes.io/pool": "a",
		"x.node-restriction.kubernetes.io/b":  "a",
		"k8s.io/other":                        "1",
		"sub.k8s.io/other":                    "1",
	}
	want := []string{"k8s.io/other", "node-restriction.kubernetes.io/pool", "node-role.kubernetes.io/worker", "sub.k8s.io/other", "x.node-restriction.kubernetes.io/b"}
	if got := ForbiddenOf(labels); !slices.Equal(got, want) {
		t.Errorf("ForbiddenOf = %q, want %q", got, want)
	}
}

// TestModified: keys added, removed or changed, sorted, once each.
func TestModified(t *testing.T) {
	got := Modified(map[string]string{"a": "1", "b": "2", "c": "3"}, map[string]string{"b": "2", "c": "4", "d": "5"})
	if want := []string{"a", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("Modified = %q, want %q", got, want)
	}
}
