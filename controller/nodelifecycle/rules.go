package nodelifecycle

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons written on the Ready condition.
const (
	ReasonMemberAlive   = "MemberAlive"
	ReasonStatusUnknown = "NodeStatusUnknown"
	// ReasonMemberLeft: the node's agent stopped gracefully (Ready=False).
	ReasonMemberLeft = "MemberLeft"
)

func readyCondition(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// desiredReady returns the Ready condition membership implies for node and
// whether it differs from the current one:
//   - a live member is Ready=True, unless the node itself reported
//     Ready=False (its agent knows better than gossip; a False this
//     controller wrote because the member had left does not count);
//   - a member that left gracefully is Ready=False (reason MemberLeft);
//   - a member that is not alive, or a node membership has not known for
//     longer than grace since its creation or since started (when this
//     controller began: members need time to rejoin a restarted server), is
//     Ready=Unknown;
//   - a node unknown to membership within that grace is left alone;
//   - so is a node that is not a live member but is Connected: gossip is a
//     hint, and the node's own authenticated stream says it is there (its
//     condition, whatever it is, stays until gossip agrees).
func desiredReady(node *corev1.Node, m Member, known bool, now time.Time, grace time.Duration, started time.Time) (corev1.NodeCondition, bool) {
	cur := readyCondition(node)
	want := corev1.NodeCondition{Type: corev1.NodeReady}
	since := node.CreationTimestamp.Time
	if started.After(since) {
		since = started
	}
	switch {
	case m.Connected && !(known && m.Alive):
		if cur == nil {
			return corev1.NodeCondition{}, false
		}
		return *cur, false
	case known && m.Alive:
		if cur != nil && cur.Status == corev1.ConditionFalse && cur.Reason != ReasonMemberLeft {
			return *cur, false
		}
		want.Status, want.Reason, want.Message = corev1.ConditionTrue, ReasonMemberAlive, "node is a live member of the cluster"
	case known && m.Left:
		want.Status, want.Reason = corev1.ConditionFalse, ReasonMemberLeft
		want.Message = "node's agent stopped gracefully (left the cluster)"
	case !known && now.Sub(since) < grace:
		if cur == nil {
			return corev1.NodeCondition{}, false
		}
		return *cur, false
	default:
		want.Status, want.Reason = corev1.ConditionUnknown, ReasonStatusUnknown
		want.Message = "node is not a live member of the cluster"
		if !known {
			want.Message = "node is unknown to the cluster membership"
		}
	}
	if cur != nil && cur.Status == want.Status && (want.Status != corev1.ConditionFalse || cur.Reason == want.Reason) {
		return *cur, false
	}
	t := metav1.NewTime(now)
	want.LastHeartbeatTime, want.LastTransitionTime = t, t
	return want, true
}

// setCondition replaces or appends cond in node's status.
func setCondition(node *corev1.Node, cond corev1.NodeCondition) {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == cond.Type {
			node.Status.Conditions[i] = cond
			return
		}
	}
	node.Status.Conditions = append(node.Status.Conditions, cond)
}

// desiredTaints returns taints with exactly the NoExecute lifecycle taint
// (k8s.io/api's well-known corev1.TaintNodeNotReady and TaintNodeUnreachable)
// matching ready (not-ready for False, unreachable for Unknown, none for True
// or no condition), keeping every other taint and the TimeAdded of kept ones.
func desiredTaints(taints []corev1.Taint, ready *corev1.NodeCondition, now time.Time) ([]corev1.Taint, bool) {
	want := ""
	if ready != nil {
		switch ready.Status {
		case corev1.ConditionFalse:
			want = corev1.TaintNodeNotReady
		case corev1.ConditionUnknown:
			want = corev1.TaintNodeUnreachable
		}
	}
	var out []corev1.Taint
	changed, have := false, false
	for _, t := range taints {
		owned := t.Effect == corev1.TaintEffectNoExecute && (t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable)
		switch {
		case owned && t.Key == want && !have:
			have = true
			out = append(out, t)
		case owned:
			changed = true
		default:
			out = append(out, t)
		}
	}
	if want != "" && !have {
		added := metav1.NewTime(now)
		out = append(out, corev1.Taint{Key: want, Effect: corev1.TaintEffectNoExecute, TimeAdded: &added})
		changed = true
	}
	return out, changed
}

// evictionTime says whether pod must leave a node with taints and when:
// at once if a NoExecute taint is not tolerated; at the latest tolerated
// taint's TimeAdded plus the smallest tolerationSeconds of the tolerations
// used; never when those tolerations have no tolerationSeconds (Kubernetes'
// taint manager rules; daemon pods tolerate not-ready and unreachable forever).
func evictionTime(pod *corev1.Pod, taints []corev1.Taint, now time.Time) (time.Time, bool) {
	var minSeconds *int64
	var start time.Time
	found := false
	for i := range taints {
		taint := &taints[i]
		if taint.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		found = true
		tolerated := false
		for j := range pod.Spec.Tolerations {
			tol := &pod.Spec.Tolerations[j]
			if !tol.ToleratesTaint(discard, taint, false) {
				continue
			}
			tolerated = true
			if tol.TolerationSeconds != nil && (minSeconds == nil || *tol.TolerationSeconds < *minSeconds) {
				s := *tol.TolerationSeconds
				minSeconds = &s
			}
		}
		if !tolerated {
			return now, true
		}
		added := now
		if taint.TimeAdded != nil {
			added = taint.TimeAdded.Time
		}
		if added.After(start) {
			start = added
		}
	}
	if !found || minSeconds == nil {
		return time.Time{}, false
	}
	if *minSeconds <= 0 {
		return now, true
	}
	return start.Add(time.Duration(*minSeconds) * time.Second), true
}
