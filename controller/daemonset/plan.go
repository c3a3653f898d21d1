package daemonset

import (
	"fmt"
	"maps"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/everynode/everynode/rollout"
)

// What "everynode plan" and "everynode rollout status --nodes" show
// (docs/rollouts.md §8, §9) is worked out here with the controller's own
// code: NodeShouldRunDaemonPod (eligibility.go), manage's per-node
// decision (manage.go), the RollingUpdate step (rolling.go), the rollout
// gate (rollout.go) and the revision hash (history.go). They read a
// snapshot (the DaemonSet, nodes, its pods and ControllerRevisions) and
// change nothing.

// UpdateRevisionHash is the controller-revision-hash the controller gives
// ds's template: that of the revision among revs (ds's ControllerRevisions)
// that records the template — a rollback reuses one — else the hash a new
// revision would get.
func UpdateRevisionHash(ds *appsv1.DaemonSet, revs []*appsv1.ControllerRevision) string {
	// As constructHistory and dedupCurHistories choose: of the revisions
	// that match, in name order, the last with the highest revision.
	byName := append([]*appsv1.ControllerRevision(nil), revs...)
	sort.Slice(byName, func(i, j int) bool { return byName[i].Name < byName[j].Name })
	var best *appsv1.ControllerRevision
	for _, cr := range byName {
		if ok, err := Match(ds, cr); err == nil && ok && cr.Labels[RevisionHashLabel] != "" && (best == nil || cr.Revision >= best.Revision) {
			best = cr
		}
	}
	if best != nil {
		return best.Labels[RevisionHashLabel]
	}
	return ComputeHash(&ds.Spec.Template, ds.Status.CollisionCount)
}

// snapshot is one DaemonSet's world as the controller sees it in a sync.
type snapshot struct {
	ds         *appsv1.DaemonSet
	nodes      []*corev1.Node // sorted by name
	nodeToPods map[string][]*corev1.Pod
	hash       string
	generation *int64
	elig       *eligibility
	gate       *rolloutGate
	old        []*appsv1.ControllerRevision // the revisions but the current one
	restoring  bool                         // the gate's restoring (rollback.go rolloutGate)
	reach      reachability                 // the default grace: the server's flag is not known here
}

// newSnapshot groups pods (those ds controls) by node and builds the
// gate as a sync at now would, with DefaultUnreachableGrace. revs are ds's
// ControllerRevisions.
func newSnapshot(ds *appsv1.DaemonSet, nodes []*corev1.Node, pods []*corev1.Pod, revs []*appsv1.ControllerRevision, now time.Time) *snapshot {
	s := &snapshot{ds: ds, nodeToPods: map[string][]*corev1.Pod{}, hash: UpdateRevisionHash(ds, revs), elig: newEligibility(ds),
		reach: reachability{now: now, grace: DefaultUnreachableGrace}}
	s.nodes = append([]*corev1.Node(nil), nodes...)
	sort.Slice(s.nodes, func(i, j int) bool { return s.nodes[i].Name < s.nodes[j].Name })
	for _, p := range pods {
		if isPodTerminal(p) && p.DeletionTimestamp != nil {
			continue
		}
		if node, err := targetNodeName(p); err == nil {
			s.nodeToPods[node] = append(s.nodeToPods[node], p)
		}
	}
	s.generation, _ = templateGeneration(ds)
	var cur *appsv1.ControllerRevision
	for _, cr := range revs {
		if cr.Labels[RevisionHashLabel] == s.hash {
			cur = cr
		} else {
			s.old = append(s.old, cr)
		}
	}
	s.restoring = ds.Annotations[rollout.AutoRollback] == "true" && fullyAvailable(cur)
	s.gate = newRolloutGate(ds, s.nodes, s.nodeToPods, s.hash, s.restoring, s.reach)
	return s
}

// live returns a node's pods that are not being deleted and not finished,
// the new revision's (at most one: the oldest) and the old ones.
func (s *snapshot) live(node string) (newPod *corev1.Pod, oldPods []*corev1.Pod, terminating []*corev1.Pod) {
	pods := append([]*corev1.Pod(nil), s.nodeToPods[node]...)
	sortPodsOldestFirst(pods)
	for _, p := range pods {
		switch {
		case p.DeletionTimestamp != nil:
			terminating = append(terminating, p)
		case isPodTerminal(p):
		case isPodUpdated(p, s.hash, s.generation):
			if newPod == nil {
				newPod = p
			}
		default:
			oldPods = append(oldPods, p)
		}
	}
	return newPod, oldPods, terminating
}

// held says why the gate holds node back ("" when it may update).
func (s *snapshot) held(node string) string {
	g := s.gate
	switch {
	case g.updates(node):
		return ""
	case len(g.invalid) > 0:
		return "rollout held by an invalid rollout annotation"
	case g.opts.Paused:
		return "rollout paused"
	case g.bad:
		return "revision " + s.hash + " was rolled back as failed (" + rollout.BadRevision + ")"
	}
	return "outside the canary/partition: updates on promote"
}

// PlanAction is what applying a DaemonSet does to one node.
type PlanAction string

// The plan's actions.
const (
	PlanGain   PlanAction = "gain"   // a pod is created
	PlanKeep   PlanAction = "keep"   // the pod stays as it is
	PlanUpdate PlanAction = "update" // the pod is replaced by one of the new revision
	PlanLose   PlanAction = "lose"   // the pod is deleted and none replaces it
	PlanNone   PlanAction = "none"   // no pod, before or after
)

// NodePlan is what applying a DaemonSet does to one node, and why.
type NodePlan struct {
	Node   string
	Action PlanAction
	// From is the revision hash of the pod the node runs now ("": none);
	// To the one it will run ("": none).
	From, To string
	Reason   string
}

// Plan says, node by node (sorted by name), what the controller does once
// ds is stored: ds is the DaemonSet as the API server would store it (a
// server-side dry run's answer), pods and revs the pods and
// ControllerRevisions of the DaemonSet it replaces (none for a new one).
//
// The plan is not a second copy of the rules: it runs the controller's own
// decisions — podsShouldBeOnNodeWith (manage), rollingUpdatePlan (the
// RollingUpdate budget) and the rollout gate — sync after sync on a copy
// of the fleet, in which every pod the controller creates becomes
// available and every pod it deletes goes, until nothing changes. So it
// is the end state of the rollout (maxUnavailable and maxSurge only pace
// it), assuming the new pods start (docs/rollouts.md §9).
func Plan(ds *appsv1.DaemonSet, nodes []*corev1.Node, pods []*corev1.Pod, revs []*appsv1.ControllerRevision, now time.Time) []NodePlan {
	s := newSnapshot(ds, nodes, pods, revs, now)
	// Pods already being deleted are gone by the end.
	before := map[string][]*corev1.Pod{}
	for node, ps := range s.nodeToPods {
		for _, p := range ps {
			if p.DeletionTimestamp == nil {
				before[node] = append(before[node], p)
			}
		}
	}
	after := simulate(s, before, now)
	final := newSnapshot(ds, nodes, flatten(after), revs, now)
	out := make([]NodePlan, 0, len(s.nodes))
	for _, node := range s.nodes {
		p := NodePlan{Node: node.Name}
		place := s.elig.place(node)
		was, is := representative(before[node.Name], s), representative(after[node.Name], s)
		if was != nil {
			p.From = was.Labels[RevisionHashLabel]
		}
		if is != nil {
			p.To = is.Labels[RevisionHashLabel]
		}
		held := final.held(node.Name)
		switch {
		case was == nil && is == nil:
			p.Action, p.Reason = PlanNone, place.Reason
		case was == nil:
			p.Action, p.Reason = PlanGain, "eligible"+fitDetail(ds, node)
			if p.To != s.hash && held != "" {
				p.Reason += "; gets the old revision: " + held
			}
		case is == nil:
			p.Action, p.Reason = PlanLose, place.Reason
			if place.ShouldContinueRunning {
				p.Reason += ": the update deletes the old pod and creates none"
			}
		case is.Name == was.Name:
			p.Action = PlanKeep
			switch {
			case p.From == s.hash:
				p.Reason = "already at revision " + s.hash + cordonNote(node)
				if !place.ShouldRun {
					p.Reason += "; " + place.Reason + ", the running pod stays"
				}
			case ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType:
				p.Reason = "OnDelete: the pod is replaced when you delete it"
			case held != "":
				p.Reason = held
			default:
				p.Reason = "not replaced"
			}
		default:
			p.Action, p.Reason = PlanUpdate, "template changed"+cordonNote(node)
			if p.To != s.hash {
				p.Reason = "pod replaced by one of revision " + p.To
			}
		}
		out = append(out, p)
	}
	return out
}

// representative is the pod that stands for a node's pods in a plan: the
// one of the update revision, else the oldest.
func representative(pods []*corev1.Pod, s *snapshot) *corev1.Pod {
	if len(pods) == 0 {
		return nil
	}
	ps := append([]*corev1.Pod(nil), pods...)
	sortPodsOldestFirst(ps)
	for _, p := range ps {
		if isPodUpdated(p, s.hash, s.generation) {
			return p
		}
	}
	return ps[0]
}

func flatten(m map[string][]*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, ps := range m {
		out = append(out, ps...)
	}
	return out
}

// simulate runs syncs of s's DaemonSet on a copy of nodeToPods until one
// changes nothing, and returns the pods then. A sync is what the
// controller's does (sync.go manageAndUpdate): manage, then the
// RollingUpdate step, creating pods of the revision syncNodes would give
// each node (the gate's stable revision for held-back nodes). Created pods
// are ready and available at once; deleted pods are gone.
func simulate(s *snapshot, start map[string][]*corev1.Pod, now time.Time) map[string][]*corev1.Pod {
	ds := s.ds
	nodeToPods := make(map[string][]*corev1.Pod, len(start))
	for node, ps := range start {
		nodeToPods[node] = append([]*corev1.Pod(nil), ps...)
	}
	gateNow := func() (*rolloutGate, func(node string) string) {
		g := newRolloutGate(ds, s.nodes, nodeToPods, s.hash, s.restoring, s.reach)
		if g.mayUpdate != nil {
			g.stable, _ = stableRevision(ds, nodeToPods, s.hash, s.old)
		}
		return g, func(node string) string {
			if g.stable != nil && !g.updates(node) {
				return g.stable.hash
			}
			return s.hash
		}
	}
	seq := 0
	readySince := metav1.NewTime(now.Add(-time.Duration(ds.Spec.MinReadySeconds+1) * time.Second))
	create := func(node, hash string) {
		seq++
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("planned-%d", seq), Namespace: ds.Namespace,
				Labels: map[string]string{RevisionHashLabel: hash}, CreationTimestamp: readySince},
			Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: readySince}}},
		}
		nodeToPods[node] = append(nodeToPods[node], p)
	}
	remove := func(names []string) {
		gone := make(map[string]bool, len(names))
		for _, n := range names {
			gone[n] = true
		}
		for node, ps := range nodeToPods {
			var keep []*corev1.Pod
			for _, p := range ps {
				if !gone[p.Name] {
					keep = append(keep, p)
				}
			}
			if len(keep) == 0 {
				delete(nodeToPods, node) // as getNodesToDaemonPods lists it
			} else {
				nodeToPods[node] = keep
			}
		}
	}
	backoff := flowcontrol.NewBackOff(FailedPodBackoffInitial, FailedPodBackoffMax) // read at now only
	// Each sync replaces at least one pod or ends; every node changes at
	// most a few times.
	for range 4*len(s.nodes) + 10 {
		_, hashFor := gateNow()
		var deletes, creates []string
		for _, node := range s.nodes {
			pods, exists := nodeToPods[node.Name]
			d := podsShouldBeOnNodeWith(s.elig, node, pods, exists, s.hash, backoff, now)
			if d.create {
				creates = append(creates, node.Name)
			}
			deletes = append(deletes, d.deletes...)
		}
		for _, n := range creates {
			create(n, hashFor(n))
		}
		remove(deletes)
		changed := len(creates)+len(deletes) > 0
		if ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
			g, hashFor := gateNow()
			scratch := maps.Clone(nodeToPods) // rollingUpdatePlan adds empty entries
			deletes, creates, err := rollingUpdatePlan(ds, s.nodes, scratch, s.hash, now, g.mayUpdateFunc(), g.setAsideFunc())
			if err != nil {
				break // an invalid budget; the API refuses one
			}
			for _, n := range creates {
				create(n, hashFor(n))
			}
			remove(deletes)
			changed = changed || len(creates)+len(deletes) > 0
		}
		if !changed {
			break
		}
	}
	return nodeToPods
}

// fitDetail names what made an eligible node fit, beyond "every node".
func fitDetail(ds *appsv1.DaemonSet, node *corev1.Node) string {
	spec := ds.Spec.Template.Spec
	var parts []string
	if len(spec.NodeSelector) > 0 {
		parts = append(parts, "node selector matches")
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		parts = append(parts, "node affinity matches")
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			parts = append(parts, "taints tolerated")
			break
		}
	}
	if node.Spec.Unschedulable {
		parts = append(parts, "cordoned, which daemon pods tolerate")
	}
	if len(parts) == 0 {
		return ""
	}
	out := ": " + parts[0]
	for _, p := range parts[1:] {
		out += ", " + p
	}
	return out
}

// cordonNote says that a cordoned node still runs daemon pods.
func cordonNote(node *corev1.Node) string {
	if node.Spec.Unschedulable {
		return "; cordoned, which daemon pods tolerate"
	}
	return ""
}

// NodeState is one node's place in a rollout.
type NodeState string

// The states of "rollout status --nodes", problems first.
const (
	StateFailing     NodeState = "failing"     // a pod of the node crashes or cannot pull its image
	StateUnreachable NodeState = "unreachable" // the node is not Ready
	StateUpdating    NodeState = "updating"    // a new pod is starting or the old one is going
	StatePending     NodeState = "pending"     // the node should run a pod and has none
	StateRemoving    NodeState = "removing"    // the node no longer fits; its pod goes
	StateWaiting     NodeState = "waiting"     // an old pod waits for the maxUnavailable/maxSurge budget
	StateHeld        NodeState = "held"        // paused, outside the canary, OnDelete
	StateUpdated     NodeState = "updated"     // an available pod of the update revision
)

// stateOrder ranks the states for sorting: problems first.
var stateOrder = map[NodeState]int{StateFailing: 0, StateUnreachable: 1, StateUpdating: 2, StatePending: 3,
	StateRemoving: 4, StateWaiting: 5, StateHeld: 6, StateUpdated: 7}

// Problem reports whether the state needs someone to look.
func (s NodeState) Problem() bool { return s == StateFailing || s == StateUnreachable }

// NodeProgress is one targeted node's rollout progress.
type NodeProgress struct {
	Node string
	Pod  string // the pod that decides the state ("" none)
	// Revision is that pod's controller-revision-hash; Updated says it is
	// the update revision's.
	Revision string
	Updated  bool
	State    NodeState
	Reason   string
	// Since is when the reason began (zero: not known).
	Since metav1.Time
}

// Progress returns the state of every node ds targets — nodes that should
// run its pod or still run one — problems first, then by name. pods and
// revs are ds's pods and ControllerRevisions.
func Progress(ds *appsv1.DaemonSet, nodes []*corev1.Node, pods []*corev1.Pod, revs []*appsv1.ControllerRevision, now metav1.Time) ([]NodeProgress, string) {
	s := newSnapshot(ds, nodes, pods, revs, now.Time)
	maxSurge, maxUnavailable, _, _ := updatedDesiredNodeCounts(ds, s.nodes, map[string][]*corev1.Pod{}, s.gate.setAsideFunc())
	budget := fmt.Sprintf("waiting for the update budget (maxUnavailable %d, maxSurge %d)", maxUnavailable, maxSurge)
	var out []NodeProgress
	for _, node := range s.nodes {
		place := s.elig.place(node)
		newPod, oldPods, terminating := s.live(node.Name)
		if !place.ShouldRun && newPod == nil && len(oldPods) == 0 && len(terminating) == 0 {
			continue // not targeted
		}
		np := NodeProgress{Node: node.Name}
		show := func(p *corev1.Pod) {
			np.Pod, np.Revision = p.Name, p.Labels[RevisionHashLabel]
			np.Updated = isPodUpdated(p, s.hash, s.generation)
		}
		switch {
		case newPod != nil:
			show(newPod)
		case len(oldPods) > 0:
			show(oldPods[0])
		case len(terminating) > 0:
			show(terminating[0])
		}
		if ready := nodeReady(node); ready != nil && ready.Status != corev1.ConditionTrue {
			np.State, np.Since = StateUnreachable, ready.LastTransitionTime
			np.Reason = "node unreachable"
			if ready.Status == corev1.ConditionFalse {
				np.Reason = "node not ready"
			}
			out = append(out, np)
			continue
		}
		var decisive *corev1.Pod
		if newPod != nil {
			decisive = newPod
		} else if len(oldPods) > 0 {
			decisive = oldPods[0]
		}
		if decisive != nil {
			if reason, since, ok := podFailing(decisive); ok {
				np.State, np.Reason, np.Since = StateFailing, reason, since
				out = append(out, np)
				continue
			}
		}
		held := s.held(node.Name)
		switch {
		case !place.ShouldContinueRunning:
			np.State, np.Reason = StateRemoving, place.Reason
		case newPod != nil && IsPodAvailable(newPod, ds.Spec.MinReadySeconds, now.Time):
			np.State, np.Reason = StateUpdated, "available"
			if len(oldPods) > 0 {
				np.State, np.Reason = StateUpdating, "new pod available; the old one goes next"
			}
		case newPod != nil:
			np.State, np.Reason, np.Since = StateUpdating, startingReason(newPod, ds.Spec.MinReadySeconds), newPod.CreationTimestamp
		case len(oldPods) == 0 && len(terminating) > 0:
			np.State, np.Reason, np.Since = StateUpdating, "old pod terminating", ptrTime(terminating[0].DeletionTimestamp)
		case len(oldPods) == 0:
			np.State, np.Reason = StatePending, "no pod yet"
		case ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType:
			np.State, np.Reason = StateHeld, "OnDelete: delete the pod to update it"
		case held != "":
			np.State, np.Reason = StateHeld, held
		case !place.ShouldRun:
			np.State, np.Reason = StateWaiting, place.Reason+": the update removes the pod; "+budget
		default:
			np.State, np.Reason = StateWaiting, budget
		}
		out = append(out, np)
	}
	sort.SliceStable(out, func(i, j int) bool { return stateOrder[out[i].State] < stateOrder[out[j].State] })
	return out, s.hash
}

func ptrTime(t *metav1.Time) metav1.Time {
	if t == nil {
		return metav1.Time{}
	}
	return *t
}

// nodeReady is the node's Ready condition (nil: none reported yet).
func nodeReady(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// stuckReasons are the container waiting reasons, beyond failingReasons
// (those automatic rollback counts), that need a person: the pod will not
// become ready by itself.
var stuckReasons = map[string]bool{
	"InvalidImageName": true, "CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
}

// podFailing reports a pod that fails: a container waiting for one of
// failingReasons, or the pod Failed. since is when it stopped being ready.
func podFailing(p *corev1.Pod) (reason string, since metav1.Time, ok bool) {
	if c := podReadyCondition(p); c != nil {
		since = c.LastTransitionTime
	}
	if p.Status.Phase == corev1.PodFailed {
		return "pod failed" + orEmpty(": ", p.Status.Reason), since, true
	}
	statuses := append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && (failingReasons[w.Reason] || stuckReasons[w.Reason]) {
			reason = fmt.Sprintf("container %s: %s", cs.Name, w.Reason)
			if cs.RestartCount > 0 {
				reason += fmt.Sprintf(" (%d restarts)", cs.RestartCount)
			}
			return reason, since, true
		}
	}
	return "", since, false
}

// startingReason says what a new pod that is not yet available waits for.
func startingReason(p *corev1.Pod, minReady int32) string {
	for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			if w.Reason == "ContainerCreating" {
				return "pulling image / creating container (ContainerCreating)"
			}
			return "container " + cs.Name + ": " + w.Reason
		}
	}
	switch {
	case p.Status.Phase == corev1.PodPending && len(p.Status.ContainerStatuses) == 0:
		return "pod created, waiting for the node"
	case IsPodReady(p):
		return fmt.Sprintf("ready, available after minReadySeconds (%ds)", minReady)
	}
	return "running, not ready"
}

func orEmpty(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}
