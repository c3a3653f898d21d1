package daemonset

import (
	"context"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// UnavailableCount is maxUnavailable scaled to desired nodes, percentages
// rounded up; 0 unless the strategy is RollingUpdate
// (docs/controller-rules.md §3.3).
func UnavailableCount(ds *appsv1.DaemonSet, desired int) (int, error) {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil {
		return 0, nil
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, desired, true)
	if err != nil {
		return 0, fmt.Errorf("invalid value for MaxUnavailable: %w", err)
	}
	return n, nil
}

// SurgeCount is maxSurge scaled to desired nodes, percentages rounded up; 0
// unless the strategy is RollingUpdate with maxSurge set
// (docs/controller-rules.md §3.3).
func SurgeCount(ds *appsv1.DaemonSet, desired int) (int, error) {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxSurge == nil {
		return 0, nil
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxSurge, desired, true)
	if err != nil {
		return 0, fmt.Errorf("invalid value for MaxSurge: %w", err)
	}
	return n, nil
}

// AllowsSurge reports whether any non-zero maxSurge is configured.
func AllowsSurge(ds *appsv1.DaemonSet) bool {
	n, err := SurgeCount(ds, 1)
	return err == nil && n > 0
}

// updatedDesiredNodeCounts returns maxSurge, maxUnavailable and the desired
// node count, adding an empty entry to nodeToPods for every desired node
// without pods (docs/controller-rules.md §3.3). With both budgets zero it
// allows one unavailable. Nodes aside reports (unreachable ones,
// docs/rollouts.md §7; nil: none) are not desired here, as in the status.
func updatedDesiredNodeCounts(ds *appsv1.DaemonSet, nodes []*corev1.Node, nodeToPods map[string][]*corev1.Pod, aside func(string) bool) (maxSurge, maxUnavailable, desired int, err error) {
	elig := newEligibility(ds)
	for _, node := range nodes {
		if run, _ := elig.nodeShouldRun(node); !run || aside != nil && aside(node.Name) {
			continue
		}
		desired++
		if _, ok := nodeToPods[node.Name]; !ok {
			nodeToPods[node.Name] = nil
		}
	}
	if maxUnavailable, err = UnavailableCount(ds, desired); err != nil {
		return 0, 0, 0, err
	}
	if maxSurge, err = SurgeCount(ds, desired); err != nil {
		return 0, 0, 0, err
	}
	if desired > 0 && maxUnavailable == 0 && maxSurge == 0 {
		maxUnavailable = 1
	}
	return maxSurge, maxUnavailable, desired, nil
}

// findUpdatedPodsOnNode splits a node's live pods into at most one new and one
// old; ok is false when there are more of either
// (docs/controller-rules.md §3.4).
func findUpdatedPodsOnNode(ds *appsv1.DaemonSet, pods []*corev1.Pod, hash string) (newPod, oldPod *corev1.Pod, ok bool) {
	generation, err := templateGeneration(ds)
	if err != nil {
		generation = nil
	}
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if isPodUpdated(pod, hash, generation) {
			if newPod != nil {
				return nil, nil, false
			}
			newPod = pod
		} else {
			if oldPod != nil {
				return nil, nil, false
			}
			oldPod = pod
		}
	}
	return newPod, oldPod, true
}

func sortedKeys(m map[string][]*corev1.Pod) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// rollingUpdatePlan computes the pods to delete and the nodes to create on for
// one RollingUpdate step (docs/controller-rules.md §3.5 for maxSurge 0, §3.6
// otherwise). nodeToPods is modified (desired nodes without pods are added).
// Nodes are visited in name order (Kubernetes iterates a Go map, i.e.
// randomly). mayUpdate, when not nil, names the nodes whose old pods may be
// replaced (the rollout settings, docs/rollouts.md); the others keep their
// pods and still count against maxUnavailable when unavailable. aside, when
// not nil, names the nodes set aside as unreachable (docs/rollouts.md §7):
// their pods are left alone and count against no budget.
func rollingUpdatePlan(ds *appsv1.DaemonSet, nodes []*corev1.Node, nodeToPods map[string][]*corev1.Pod, hash string, now time.Time, mayUpdate, aside func(node string) bool) (deletes, creates []string, err error) {
	maxSurge, maxUnavailable, desired, err := updatedDesiredNodeCounts(ds, nodes, nodeToPods, aside)
	if err != nil {
		return nil, nil, fmt.Errorf("couldn't get unavailable numbers: %w", err)
	}
	minReady := ds.Spec.MinReadySeconds
	available := func(p *corev1.Pod) bool { return IsPodAvailable(p, minReady, now) }

	if maxSurge == 0 {
		numUnavailable := 0
		var allowedReplacement, candidates []string
		for _, name := range sortedKeys(nodeToPods) {
			if aside != nil && aside(name) {
				continue
			}
			newPod, oldPod, ok := findUpdatedPodsOnNode(ds, nodeToPods[name], hash)
			if !ok {
				numUnavailable++
				continue
			}
			switch {
			case oldPod == nil && newPod == nil, oldPod != nil && newPod != nil:
				numUnavailable++
			case newPod != nil:
				if !available(newPod) {
					numUnavailable++
				}
			default:
				switch {
				case mayUpdate != nil && !mayUpdate(name):
					if !available(oldPod) {
						numUnavailable++
					}
				case !available(oldPod):
					allowedReplacement = append(allowedReplacement, oldPod.Name)
					numUnavailable++
				case numUnavailable >= maxUnavailable:
				default:
					candidates = append(candidates, oldPod.Name)
				}
			}
		}
		remaining := max(0, min(maxUnavailable-numUnavailable, len(candidates)))
		return append(allowedReplacement, candidates[:remaining]...), nil, nil
	}

	byName := make(map[string]*corev1.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
	}
	elig := newEligibility(ds)
	shouldRun := func(nodeName string) bool {
		n, ok := byName[nodeName]
		if !ok {
			return false
		}
		run, _ := elig.nodeShouldRun(n)
		return run
	}
	var oldPodsToDelete, shouldNotRunPodsToDelete, candidateNewNodes, allowedNewNodes []string
	numSurge, numAvailable := 0, 0
	for _, name := range sortedKeys(nodeToPods) {
		if aside != nil && aside(name) {
			continue
		}
		newPod, oldPod, ok := findUpdatedPodsOnNode(ds, nodeToPods[name], hash)
		if !ok {
			numSurge++
			continue
		}
		if oldPod != nil {
			if available(oldPod) {
				numAvailable++
			}
		} else if newPod != nil && available(newPod) {
			numAvailable++
		}
		switch {
		case oldPod == nil:
			// manage handles it
		case newPod == nil && mayUpdate != nil && !mayUpdate(name) && shouldRun(name):
			// held back by the rollout settings
		case newPod == nil:
			if !available(oldPod) {
				if !shouldRun(name) {
					oldPodsToDelete = append(oldPodsToDelete, oldPod.Name)
					continue
				}
				allowedNewNodes = append(allowedNewNodes, name)
				continue
			}
			if !shouldRun(name) {
				shouldNotRunPodsToDelete = append(shouldNotRunPodsToDelete, oldPod.Name)
				continue
			}
			if numSurge >= maxSurge {
				continue
			}
			candidateNewNodes = append(candidateNewNodes, name)
		default:
			if !available(newPod) {
				numSurge++
				continue
			}
			oldPodsToDelete = append(oldPodsToDelete, oldPod.Name)
		}
	}
	if deletable := numAvailable - desired; deletable > 0 {
		deletable = min(deletable, len(shouldNotRunPodsToDelete))
		oldPodsToDelete = append(oldPodsToDelete, shouldNotRunPodsToDelete[:deletable]...)
	}
	remaining := max(0, min(maxSurge-numSurge, len(candidateNewNodes)))
	return oldPodsToDelete, append(allowedNewNodes, candidateNewNodes[:remaining]...), nil
}

// rollingUpdate runs one RollingUpdate step for ds.
func (c *Controller) rollingUpdate(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, hash string, pods *syncPods) error {
	nodeToPods, err := pods.get(ctx, c, ds)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemonset %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	gate := c.rolloutGate(ds, nodes, nodeToPods, hash)
	if err := c.requestPrePulls(ctx, ds, nodes, gate.prepull); err != nil {
		return err
	}
	deletes, creates, err := rollingUpdatePlan(ds, nodes, nodeToPods, hash, c.clock.Now(), gate.mayUpdateFunc(), gate.setAsideFunc())
	if err != nil {
		return err
	}
	return c.syncNodes(ctx, ds, deletes, creates, hash, gate, pods)
}
