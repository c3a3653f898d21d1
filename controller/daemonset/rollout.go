package daemonset

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/everynode/everynode/rollout"
)

// everynode's rollout settings (docs/rollouts.md): the rollout.everynode.io/
// annotations, parsed by package rollout, gate what RollingUpdate may
// replace. A DaemonSet without them, or with the OnDelete strategy, is
// gated by nothing and behaves as Kubernetes'.

// rolloutGate is what a DaemonSet's rollout settings allow in one sync.
type rolloutGate struct {
	opts    rollout.Options
	invalid field.ErrorList // unparsable annotations: hold as paused
	// active is false for OnDelete: the settings gate RollingUpdate only.
	active bool
	// mayUpdate holds the nodes whose pods may move to the current
	// revision; nil is every node.
	mayUpdate map[string]bool
	// partition is mayUpdate's nodes, in the gate's order (limited only).
	partition []string
	// stable is the revision new pods of held-back nodes get; nil is the
	// current one. Only manage fills it.
	stable *heldRevision
	// bad: the current revision is the one annotation bad-revision names;
	// it is held as a pause would (docs/rollouts.md §6.3).
	bad bool
	// restoring: automatic rollback is on and the current revision was
	// fully available before (a rollback or an undo): partition and canary
	// selector do not hold it back (docs/rollouts.md §6.2).
	restoring bool
	// unreach: the nodes set aside as unreachable (unreachable.go); none
	// with unreachable-blocks or OnDelete.
	unreach unreachable
	// prepull is the pre-pull progress (prepull.go); nil without one.
	prepull *prePull
}

// setAsideFunc is unreach.setAside as a function, nil when no node is set aside.
func (g *rolloutGate) setAsideFunc() func(string) bool {
	if g == nil || len(g.unreach.aside) == 0 {
		return nil
	}
	return g.unreach.setAside
}

// heldRevision is an old revision's pod template and hash.
type heldRevision struct {
	hash     string
	template corev1.PodTemplateSpec
}

// held reports whether the whole rollout is held: paused, or settings
// that cannot be read.
func (g *rolloutGate) held() bool { return g.active && (g.opts.Paused || len(g.invalid) > 0 || g.bad) }

// limited reports whether a partition or canary selector applies.
func (g *rolloutGate) limited() bool {
	return g.active && !g.held() && g.opts.Limited() && !g.restoring
}

// updates reports whether node's pod may be replaced by one of the current
// revision.
func (g *rolloutGate) updates(node string) bool {
	return g == nil || g.mayUpdate == nil || g.mayUpdate[node]
}

// mayUpdateFunc is updates as a function, nil when every node may update.
func (g *rolloutGate) mayUpdateFunc() func(string) bool {
	if g == nil || g.mayUpdate == nil {
		return nil
	}
	return g.updates
}

// reachability is when a gate is decided and how long a node may be down
// before it is set aside.
type reachability struct {
	now   time.Time
	grace time.Duration
}

// newRolloutGate reads ds's rollout settings and decides which nodes may
// update this sync (docs/rollouts.md §4.1):
// paused (or unreadable settings, or a bad revision) lets none; a partition
// or canary selector, unless restoring a once fully available revision,
// lets the first N desired nodes matching the selector, nodes already
// running the current revision first, then the reachable ones by name, then
// those set aside as unreachable — stable across syncs and controller
// restarts for the same nodes. Unless unreachable-blocks, nodes down for
// longer than r.grace are set aside (docs/rollouts.md §7).
func newRolloutGate(ds *appsv1.DaemonSet, nodes []*corev1.Node, nodeToPods map[string][]*corev1.Pod, hash string, restoring bool, r reachability) *rolloutGate {
	g := &rolloutGate{active: ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType}
	g.opts, g.invalid = rollout.Parse(ds.Annotations)
	g.bad = g.opts.BadRevision != "" && g.opts.BadRevision == hash
	g.restoring = restoring && g.opts.AutoRollback
	if g.active && !g.opts.UnreachableBlocks {
		g.unreach = findUnreachable(ds, nodes, nodeToPods, hash, r.now, r.grace)
	}
	switch {
	case !g.active:
		return g
	case g.held():
		g.mayUpdate = map[string]bool{}
		return g
	case !g.limited():
		return g
	}
	generation, err := templateGeneration(ds)
	if err != nil {
		generation = nil
	}
	elig := newEligibility(ds)
	desired := 0
	var updated, rest, away []string
	for _, node := range nodes { // sorted by name
		if run, _ := elig.nodeShouldRun(node); !run {
			continue
		}
		desired++
		if sel := g.opts.CanarySelector; sel != nil && !sel.Matches(labels.Set(node.Labels)) {
			continue
		}
		switch {
		case hasUpdatedPod(nodeToPods[node.Name], hash, generation):
			updated = append(updated, node.Name)
		case g.unreach.setAside(node.Name):
			away = append(away, node.Name)
		default:
			rest = append(rest, node.Name)
		}
	}
	order := append(append(updated, rest...), away...)
	g.partition = order[:min(len(order), g.opts.PartitionCount(desired))]
	g.mayUpdate = make(map[string]bool, len(g.partition))
	for _, n := range g.partition {
		g.mayUpdate[n] = true
	}
	return g
}

func hasUpdatedPod(pods []*corev1.Pod, hash string, generation *int64) bool {
	for _, p := range pods {
		if p.DeletionTimestamp == nil && isPodUpdated(p, hash, generation) {
			return true
		}
	}
	return false
}

// stableRevision is the old revision held-back nodes get new pods of: the
// one most nodes run (ties: the newest), as the fleet's last known state
// (docs/rollouts.md §3.1). It is nil when no
// node runs an old revision whose ControllerRevision is known.
func stableRevision(ds *appsv1.DaemonSet, nodeToPods map[string][]*corev1.Pod, hash string, old []*appsv1.ControllerRevision) (*heldRevision, error) {
	generation, err := templateGeneration(ds)
	if err != nil {
		generation = nil
	}
	count := map[string]int{}
	for _, pods := range nodeToPods {
		for _, p := range pods {
			if p.DeletionTimestamp != nil || isPodTerminal(p) || isPodUpdated(p, hash, generation) {
				continue
			}
			if h := p.Labels[RevisionHashLabel]; h != "" {
				count[h]++
			}
		}
	}
	var best *appsv1.ControllerRevision
	for _, cr := range old {
		n := count[cr.Labels[RevisionHashLabel]]
		if n == 0 {
			continue
		}
		if best == nil || n > count[best.Labels[RevisionHashLabel]] ||
			n == count[best.Labels[RevisionHashLabel]] && cr.Revision > best.Revision {
			best = cr
		}
	}
	if best == nil {
		return nil, nil
	}
	t, err := RevisionTemplate(best)
	if err != nil {
		return nil, err
	}
	return &heldRevision{hash: best.Labels[RevisionHashLabel], template: t}, nil
}

// RevisionTemplate decodes the pod template a ControllerRevision of a
// DaemonSet records (the strategic merge patch RevisionData makes).
func RevisionTemplate(cr *appsv1.ControllerRevision) (corev1.PodTemplateSpec, error) {
	var data struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(cr.Data.Raw, &data); err != nil {
		return corev1.PodTemplateSpec{}, fmt.Errorf("decode revision %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	return data.Spec.Template, nil
}

// canaryProgress counts the partition's nodes that run an available pod
// of the current revision.
func canaryProgress(ds *appsv1.DaemonSet, g *rolloutGate, nodeToPods map[string][]*corev1.Pod, hash string, now time.Time) (done, target int) {
	generation, err := templateGeneration(ds)
	if err != nil {
		generation = nil
	}
	for _, n := range g.partition {
		for _, p := range nodeToPods[n] {
			if p.DeletionTimestamp == nil && isPodUpdated(p, hash, generation) && IsPodAvailable(p, ds.Spec.MinReadySeconds, now) {
				done++
				break
			}
		}
	}
	return done, len(g.partition)
}

// progress is what the Progressing condition needs beyond the counters.
type progress struct {
	now time.Time
	// revision names the current ControllerRevision.
	revision string
	// lastAvailable returns when the last updated pod became available
	// (zero: none is available). It is a pass over every pod, so it is
	// called only when a progress deadline is being judged.
	lastAvailable func() time.Time
}

// rolloutCondition is the Progressing condition ds should carry (without
// its transition time), or nil to leave its conditions as they are: a
// DaemonSet that never used a rollout setting gets none, as in Kubernetes.
// requeue, when not zero, is when the progress deadline passes unless an
// updated pod becomes available first (docs/rollouts.md §5).
func rolloutCondition(ds *appsv1.DaemonSet, g *rolloutGate, s statusCounts, canaryDone, canaryTarget int, p progress) (c *appsv1.DaemonSetCondition, requeue time.Duration) {
	next := baseCondition(ds, g, s, canaryDone, canaryTarget, p.revision)
	complete := s.updated == s.desired && s.available == s.desired
	if !g.active || complete || g.opts.ProgressDeadline == 0 {
		return next, 0
	}
	return applyDeadline(getCondition(ds.Status, rollout.ConditionProgressing), next, g.opts.ProgressDeadline, p)
}

func newCondition(status corev1.ConditionStatus, reason, msg string) *appsv1.DaemonSetCondition {
	return &appsv1.DaemonSetCondition{Type: rollout.ConditionProgressing, Status: status, Reason: reason, Message: msg}
}

// baseCondition is rolloutCondition before the progress deadline.
func baseCondition(ds *appsv1.DaemonSet, g *rolloutGate, s statusCounts, canaryDone, canaryTarget int, revision string) *appsv1.DaemonSetCondition {
	cond := newCondition
	if !g.active {
		return nil
	}
	complete := s.updated == s.desired && s.available == s.desired
	prev := getCondition(ds.Status, rollout.ConditionProgressing)
	// tracked: the settings that need the condition during any rollout.
	tracked := g.opts.ProgressDeadline > 0 || g.opts.AutoRollback
	switch {
	case len(g.invalid) > 0:
		return cond(corev1.ConditionUnknown, rollout.ReasonInvalidAnnotation,
			"rollout held: "+g.invalid.ToAggregate().Error())
	case g.opts.Paused:
		return cond(corev1.ConditionUnknown, rollout.ReasonPaused, "DaemonSet is paused")
	case g.prepull.waiting():
		return cond(corev1.ConditionTrue, rollout.ReasonPrePulling, g.prepull.message())
	case prev != nil && prev.Reason == rollout.ReasonRolledBack && g.restoring:
		return nil // says why until the template changes
	case g.bad && !complete:
		return cond(corev1.ConditionFalse, rollout.ReasonBadRevision, fmt.Sprintf(
			"ControllerRevision %q was rolled back as failed and is not rolled out again until the template changes or annotation %s is removed",
			revision, rollout.BadRevision))
	case g.limited() && s.updated < s.desired:
		if canaryDone == canaryTarget {
			return cond(corev1.ConditionUnknown, rollout.ReasonWaitingForPromote, rollout.CanaryMessage(canaryDone, canaryTarget))
		}
		return cond(corev1.ConditionTrue, rollout.ReasonCanaryUpdating, rollout.CanaryMessage(canaryDone, canaryTarget))
	case complete && len(g.unreach.pending()) > 0:
		return cond(corev1.ConditionTrue, rollout.ReasonUnreachablePending, pendingMessage(g.unreach.pending()))
	case prev == nil && !tracked:
		return nil
	case complete:
		return cond(corev1.ConditionTrue, rollout.ReasonNewRevisionAvailable, fmt.Sprintf("daemon set %q has successfully progressed", ds.Name))
	case prev != nil && (prev.Reason == rollout.ReasonPaused || prev.Reason == rollout.ReasonInvalidAnnotation):
		return cond(corev1.ConditionUnknown, rollout.ReasonResumed, "DaemonSet is resumed")
	case prev != nil && (prev.Reason == rollout.ReasonWaitingForPromote || prev.Reason == rollout.ReasonCanaryUpdating):
		return cond(corev1.ConditionTrue, rollout.ReasonPromoted, "canary promoted: updating every node")
	case !tracked && !rollout.Failed(prev) && prev.Reason != rollout.ReasonUnreachablePending:
		return nil // a pending list is not left standing over a new rollout
	}
	return cond(corev1.ConditionTrue, rollout.ReasonUpdating, fmt.Sprintf("rolling out ControllerRevision %q", revision))
}

// moving reports whether a condition with reason says the rollout is
// under way, so that the progress deadline runs.
func moving(reason string) bool {
	switch reason {
	case rollout.ReasonUpdating, rollout.ReasonCanaryUpdating, rollout.ReasonResumed, rollout.ReasonPromoted, rollout.ReasonPrePulling:
		return true
	}
	return false
}

// exceededMessage is the ProgressDeadlineExceeded message of a rollout
// whose Progressing message was msg.
func exceededMessage(msg string, d time.Duration) string {
	return fmt.Sprintf("%s: no updated pod became available for %ds", msg, int64(d/time.Second))
}

// applyDeadline turns next (nil: prev stays) into ProgressDeadlineExceeded
// when the rollout it describes made no progress for d: progress is the
// condition changing (status, reason or message: a new revision, a resume,
// a promote, a canary count) or an updated pod becoming available, as a
// Deployment counts it from its condition's lastUpdateTime
// (k8s.io/kubernetes pkg/controller/deployment/util/deployment_util.go
// DeploymentTimedOut). The deadline passes at exactly since+d.
func applyDeadline(prev, next *appsv1.DaemonSetCondition, d time.Duration, p progress) (*appsv1.DaemonSetCondition, time.Duration) {
	if prev != nil && prev.Reason == rollout.ReasonProgressDeadlineExceeded && next != nil && moving(next.Reason) &&
		prev.Message == exceededMessage(next.Message, d) && !p.lastAvailable().After(prev.LastTransitionTime.Time) {
		return nil, 0 // still no progress; an updated pod becoming available ends it
	}
	eff := next
	if eff == nil {
		eff = prev
	}
	if eff == nil || !moving(eff.Reason) {
		return next, 0
	}
	since := p.now
	if prev != nil && (next == nil || sameCondition(prev, next)) {
		since = prev.LastTransitionTime.Time
		if last := p.lastAvailable(); last.After(since) {
			since = last
		}
	}
	deadline := since.Add(d)
	if !p.now.Before(deadline) {
		return newCondition(corev1.ConditionFalse, rollout.ReasonProgressDeadlineExceeded, exceededMessage(eff.Message, d)), 0
	}
	return next, deadline.Sub(p.now)
}

func sameCondition(a, b *appsv1.DaemonSetCondition) bool {
	return a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}

// lastUpdatedAvailable is when the last updated pod of ds became
// available: its Ready transition plus minReadySeconds.
func lastUpdatedAvailable(ds *appsv1.DaemonSet, nodeToPods map[string][]*corev1.Pod, hash string, now time.Time) time.Time {
	generation, err := templateGeneration(ds)
	if err != nil {
		generation = nil
	}
	var last time.Time
	for _, pods := range nodeToPods {
		for _, p := range pods {
			if p.DeletionTimestamp != nil || !isPodUpdated(p, hash, generation) || !IsPodAvailable(p, ds.Spec.MinReadySeconds, now) {
				continue
			}
			t := podReadyCondition(p).LastTransitionTime.Add(time.Duration(ds.Spec.MinReadySeconds) * time.Second)
			if t.After(last) {
				last = t
			}
		}
	}
	return last
}

func getCondition(st appsv1.DaemonSetStatus, t appsv1.DaemonSetConditionType) *appsv1.DaemonSetCondition {
	return rollout.Condition(st, t)
}

// conditionUnchanged reports whether st already carries c (nil: nothing to set).
func conditionUnchanged(st appsv1.DaemonSetStatus, c *appsv1.DaemonSetCondition) bool {
	if c == nil {
		return true
	}
	cur := getCondition(st, c.Type)
	return cur != nil && sameCondition(cur, c)
}

// setCondition puts c into st with now as its transition time unless st
// carries it already. The Progressing condition's lastTransitionTime is
// thus when it last changed status, reason or message — the role of a
// Deployment condition's lastUpdateTime, which a DaemonSet condition lacks
// — and the progress deadline counts from it (docs/rollouts.md §2).
func setCondition(st *appsv1.DaemonSetStatus, c *appsv1.DaemonSetCondition, now time.Time) {
	if c == nil {
		return
	}
	next := *c
	next.LastTransitionTime = metav1.NewTime(now)
	if cur := getCondition(*st, c.Type); cur != nil && sameCondition(cur, c) {
		next.LastTransitionTime = cur.LastTransitionTime
	}
	out := st.Conditions[:0:0]
	for _, x := range st.Conditions {
		if x.Type != c.Type {
			out = append(out, x)
		}
	}
	st.Conditions = append(out, next)
	sort.SliceStable(st.Conditions, func(i, j int) bool { return st.Conditions[i].Type < st.Conditions[j].Type })
}

// conditionEvent is the event type recorded when a condition takes reason.
func conditionEvent(reason string) string {
	switch reason {
	case rollout.ReasonInvalidAnnotation, rollout.ReasonProgressDeadlineExceeded, rollout.ReasonRolledBack, rollout.ReasonBadRevision:
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}
