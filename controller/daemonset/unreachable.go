package daemonset

import (
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// Unreachable nodes do not block (docs/rollouts.md §7): a RollingUpdate
// sets aside the desired nodes that have been NotReady or Unknown for
// longer than a grace. Their pods do not count against maxUnavailable or
// maxSurge, the controller leaves them alone, and the status counters skip
// them, so the rollout completes on the reachable nodes; the Progressing
// condition names the ones still pending. A node comes back into the
// rollout as soon as it is Ready again. Annotation
// rollout.everynode.io/unreachable-blocks "true" keeps Kubernetes' rules.
//
// One exception keeps a bad revision from marching across the fleet: a node
// lost while its own update was in flight — a pod of the current revision
// created before the node went down, whose containers were not ready — is
// not set aside; it counts as in Kubernetes, since the update may be what
// took it down.

// DefaultUnreachableGrace is how long a node must have been NotReady or
// Unknown before a rollout sets it aside (docs/rollouts.md §7).
const DefaultUnreachableGrace = 30 * time.Second

// maxListedNodes bounds the nodes a condition message names.
const maxListedNodes = 10

// nodeDown reports since when node has been NotReady or Unknown: the
// earliest of its Ready condition's lastTransitionTime (when Ready is not
// True) and the timeAdded of its node.kubernetes.io/not-ready and
// unreachable taints. ok is false for a Ready node, and for a down node
// without any such time (nothing says since when).
func nodeDown(node *corev1.Node) (since time.Time, ok bool) {
	for _, t := range node.Spec.Taints {
		if (t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable) && t.TimeAdded != nil && !t.TimeAdded.IsZero() {
			if !ok || t.TimeAdded.Time.Before(since) {
				since, ok = t.TimeAdded.Time, true
			}
		}
	}
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return time.Time{}, false // Ready: a stale taint does not make it down
		}
		if !c.LastTransitionTime.IsZero() && (!ok || c.LastTransitionTime.Time.Before(since)) {
			since, ok = c.LastTransitionTime.Time, true
		}
	}
	return since, ok
}

// isDown reports whether node is NotReady or Unknown (for event handling).
func isDown(node *corev1.Node) bool {
	_, ok := nodeDown(node)
	return ok
}

// downNode is a node set aside: down since then.
type downNode struct {
	name  string
	since time.Time
	// pending: no live pod of the current revision ran ready there (none
	// was made, or one was made after the node went away).
	pending bool
}

// unreachable is which nodes one sync sets aside.
type unreachable struct {
	aside map[string]downNode
	// recheck, when not zero, is when the next down node's grace passes.
	recheck time.Duration
}

// setAside reports whether node is set aside this sync.
func (u unreachable) setAside(node string) bool {
	_, ok := u.aside[node]
	return ok
}

// pending lists the desired nodes set aside that still wait for the
// current revision, by name.
func (u unreachable) pending() []downNode {
	var out []downNode
	for _, d := range u.aside {
		if d.pending {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// findUnreachable sets aside the desired nodes down for longer than grace
// at now, except those lost while their update was in flight.
func findUnreachable(ds *appsv1.DaemonSet, nodes []*corev1.Node, nodeToPods map[string][]*corev1.Pod, hash string, now time.Time, grace time.Duration) unreachable {
	u := unreachable{}
	generation, err := templateGeneration(ds)
	if err != nil {
		generation = nil
	}
	elig := newEligibility(ds)
	for _, node := range nodes {
		since, down := nodeDown(node)
		if !down {
			continue
		}
		if run, _ := elig.nodeShouldRun(node); !run {
			continue
		}
		if wait := since.Add(grace).Sub(now); wait >= 0 {
			// Within the grace: Kubernetes' rules still apply. Look again
			// just after it passes (a down node sends no more events).
			if wait += time.Millisecond; u.recheck == 0 || wait < u.recheck {
				u.recheck = wait
			}
			continue
		}
		pending := true
		inFlight := false
		for _, p := range nodeToPods[node.Name] {
			if p.DeletionTimestamp != nil || !isPodUpdated(p, hash, generation) {
				continue
			}
			switch {
			case containersReady(p):
				pending = false // it ran the current revision
			case p.CreationTimestamp.Time.Before(since):
				inFlight = true
			}
		}
		if inFlight {
			continue
		}
		if u.aside == nil {
			u.aside = map[string]downNode{}
		}
		u.aside[node.Name] = downNode{name: node.Name, since: since, pending: pending}
	}
	return u
}

// containersReady reports whether the pod's ContainersReady condition is
// True: the agent last saw every container ready (the node lifecycle
// controller marks only Ready false when the node goes away).
func containersReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.ContainersReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pendingMessage is the Progressing message of a rollout complete on the
// reachable nodes with pending still to update.
func pendingMessage(pending []downNode) string {
	var b strings.Builder
	noun := "nodes"
	if len(pending) == 1 {
		noun = "node"
	}
	fmt.Fprintf(&b, "rolled out to every reachable node; %d unreachable %s pending, updated when back: ", len(pending), noun)
	for i, d := range pending {
		if i == maxListedNodes {
			fmt.Fprintf(&b, " and %d more", len(pending)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (down since %s)", d.name, d.since.UTC().Format(time.RFC3339))
	}
	return b.String()
}
