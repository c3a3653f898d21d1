package daemonset

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/rollout"
)

// Automatic rollback (docs/rollouts.md §6): with annotation
// rollout.everynode.io/auto-rollback "true", a revision that was never
// fully available and fails — its progress deadline passed, or K of its
// pods fail — is rolled back to the last revision that was fully available,
// by rewriting .spec.template as `kubectl rollout undo` does. The failed
// revision's hash goes into annotation bad-revision, and that template is
// not rolled out again. A revision that was fully available once is never
// rolled back from, so two revisions cannot take turns.

// failingReasons are the container waiting reasons that count an updated
// pod as failed.
var failingReasons = map[string]bool{"CrashLoopBackOff": true, "ErrImagePull": true, "ImagePullBackOff": true}

// podFailure says why pod fails ("" when it does not): the first init or
// app container waiting for one of failingReasons.
func podFailure(p *corev1.Pod) string {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			if w := cs.State.Waiting; w != nil && failingReasons[w.Reason] {
				return fmt.Sprintf("pod %s on node %s: container %s: %s", p.Name, p.Spec.NodeName, cs.Name, w.Reason)
			}
		}
	}
	return ""
}

// failingUpdatedPods lists why each failing pod of the current revision
// fails, in node order.
func failingUpdatedPods(ds *appsv1.DaemonSet, nodeToPods map[string][]*corev1.Pod, hash string) []string {
	generation, err := templateGeneration(ds)
	if err != nil {
		generation = nil
	}
	var out []string
	for _, node := range sortedKeys(nodeToPods) {
		for _, p := range nodeToPods[node] {
			if p.DeletionTimestamp != nil || !isPodUpdated(p, hash, generation) {
				continue
			}
			if why := podFailure(p); why != "" {
				out = append(out, why)
			}
		}
	}
	return out
}

// failureThreshold is K, the number of failing updated pods that rolls an
// update back: as many as the update may have in flight at once —
// max(maxUnavailable, maxSurge) scaled to the desired nodes, at least 1 —
// and at most the partition or canary's size, so one failing canary of one
// is enough.
func failureThreshold(ds *appsv1.DaemonSet, g *rolloutGate, nodes []*corev1.Node, nodeToPods map[string][]*corev1.Pod) int {
	maxSurge, maxUnavailable, _, err := updatedDesiredNodeCounts(ds, nodes, maps.Clone(nodeToPods), g.setAsideFunc())
	if err != nil {
		return 1
	}
	k := max(maxSurge, maxUnavailable)
	if g.limited() {
		k = min(k, len(g.partition))
	}
	return max(1, k)
}

// fullyAvailable reports whether the revision was marked fully available.
func fullyAvailable(cr *appsv1.ControllerRevision) bool {
	return cr != nil && cr.Annotations[rollout.FullyAvailable] != ""
}

// lastAvailableRevision is the revision automatic rollback returns to: of
// revs, the one marked fully available with the highest revision number
// (the one current most recently); nil when none is.
func lastAvailableRevision(revs []*appsv1.ControllerRevision) *appsv1.ControllerRevision {
	var best *appsv1.ControllerRevision
	for _, cr := range revs {
		if fullyAvailable(cr) && (best == nil || cr.Revision > best.Revision) {
			best = cr
		}
	}
	return best
}

// revisionByHash is ds's cached ControllerRevision with hash, or nil.
func (c *Controller) revisionByHash(ds *appsv1.DaemonSet, hash string) *appsv1.ControllerRevision {
	if hash == "" {
		return nil
	}
	crs, _ := c.crLister.ControllerRevisions(ds.Namespace).List(labels.SelectorFromSet(labels.Set{RevisionHashLabel: hash}))
	sort.Slice(crs, func(i, j int) bool { return crs[i].Name < crs[j].Name })
	for _, cr := range crs {
		if metav1.IsControlledBy(cr, ds) {
			return cr
		}
	}
	return nil
}

// revisionName names the ControllerRevision of hash for messages.
func (c *Controller) revisionName(ds *appsv1.DaemonSet, hash string) string {
	if cr := c.revisionByHash(ds, hash); cr != nil {
		return cr.Name
	}
	return ds.Name + "-" + hash
}

// rolloutGate is newRolloutGate, restoring when ds rolls back
// automatically and its current revision was fully available before.
func (c *Controller) rolloutGate(ds *appsv1.DaemonSet, nodes []*corev1.Node, nodeToPods map[string][]*corev1.Pod, hash string) *rolloutGate {
	restoring := ds.Annotations[rollout.AutoRollback] == "true" && fullyAvailable(c.revisionByHash(ds, hash))
	g := newRolloutGate(ds, nodes, nodeToPods, hash, restoring, reachability{now: c.clock.Now(), grace: c.unreachableGrace})
	if g.active && !g.held() {
		if g.prepull = newPrePull(ds, nodes, nodeToPods, hash); g.prepull.waiting() {
			g.mayUpdate = map[string]bool{} // no node updates until every one has the images
		}
	}
	return g
}

// markFullyAvailable annotates the revision of hash as fully available
// (once; a merge patch, so a stale cache only repeats a no-op).
func (c *Controller) markFullyAvailable(ctx context.Context, ds *appsv1.DaemonSet, hash string, now time.Time) error {
	cr := c.revisionByHash(ds, hash)
	if cr == nil || fullyAvailable(cr) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		rollout.FullyAvailable: now.UTC().Format(time.RFC3339)}}})
	if err != nil {
		return err
	}
	if _, err := c.client.Patch(ctx, resources.ControllerRevisions, cr.Namespace, cr.Name, types.MergePatchType, patch, client.WriteOptions{}, ""); err != nil {
		return fmt.Errorf("mark revision %s/%s fully available: %w", cr.Namespace, cr.Name, err)
	}
	return nil
}

// autoRollback rolls ds back when its settings ask for it and its current
// revision failed (docs/rollouts.md §6); rolledBack reports that it
// rewrote the template, which ends this sync.
func (c *Controller) autoRollback(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, cur *appsv1.ControllerRevision, old []*appsv1.ControllerRevision, pods *syncPods) (rolledBack bool, err error) {
	opts, errs := rollout.Parse(ds.Annotations)
	hash := cur.Labels[RevisionHashLabel]
	if !opts.AutoRollback || len(errs) > 0 || opts.Paused || ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType ||
		fullyAvailable(cur) || hash == opts.BadRevision {
		return false, nil
	}
	var why string
	if prev := getCondition(ds.Status, rollout.ConditionProgressing); prev != nil && prev.Status == corev1.ConditionFalse &&
		prev.Reason == rollout.ReasonProgressDeadlineExceeded && ds.Status.ObservedGeneration >= ds.Generation {
		why = prev.Message
	} else {
		nodeToPods, err := pods.get(ctx, c, ds)
		if err != nil {
			return false, fmt.Errorf("couldn't get node to daemon pod mapping for daemonset %s/%s: %w", ds.Namespace, ds.Name, err)
		}
		g := c.rolloutGate(ds, nodes, nodeToPods, hash)
		if g.held() {
			return false, nil
		}
		failing := failingUpdatedPods(ds, nodeToPods, hash)
		k := failureThreshold(ds, g, nodes, nodeToPods)
		if len(failing) < k {
			return false, nil
		}
		why = fmt.Sprintf("%d updated pods failing (threshold %d): %s", len(failing), k, strings.Join(failing[:min(len(failing), 3)], "; "))
	}
	target := lastAvailableRevision(old)
	if target == nil {
		c.logger.Info("rollout failed but no revision was fully available to roll back to", "daemonset", dsKey(ds), "revision", cur.Name, "why", why)
		return false, nil
	}
	return true, c.rollBack(ctx, ds, cur, target, why)
}

// rollBack rewrites ds's template with target's, as `kubectl rollout undo`
// patches it with the revision's data (docs/controller-rules.md §4.5), in
// the same write records cur's hash in annotation bad-revision (the patch
// carries ds's resourceVersion: a concurrent edit wins and the next sync
// decides again), then sets the RolledBack condition and records a Warning
// event.
func (c *Controller) rollBack(ctx context.Context, ds *appsv1.DaemonSet, cur, target *appsv1.ControllerRevision, why string) error {
	var patch map[string]any
	if err := json.Unmarshal(target.Data.Raw, &patch); err != nil {
		return fmt.Errorf("decode revision %s/%s: %w", target.Namespace, target.Name, err)
	}
	patch["metadata"] = map[string]any{
		"resourceVersion": ds.ResourceVersion,
		"annotations":     map[string]string{rollout.BadRevision: cur.Labels[RevisionHashLabel]},
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	o, err := c.client.Patch(ctx, resources.DaemonSets, ds.Namespace, ds.Name, types.StrategicMergePatchType, data, client.WriteOptions{}, "")
	if err != nil {
		return fmt.Errorf("roll back daemonset %s to revision %d: %w", dsKey(ds), target.Revision, err)
	}
	msg := fmt.Sprintf("rolled back to revision %d (%s): revision %d (%s) failed: %s", target.Revision, target.Name, cur.Revision, cur.Name, why)
	c.logger.Warn("daemonset rolled back", "daemonset", dsKey(ds), "message", msg)
	c.rolloutRecorder.Eventf(ds, corev1.EventTypeWarning, rollout.ReasonRolledBack, "%s", msg)
	cond := newCondition(corev1.ConditionFalse, rollout.ReasonRolledBack, msg)
	for i := 0; ; i++ {
		rolled := o.(*appsv1.DaemonSet).DeepCopy()
		setCondition(&rolled.Status, cond, c.clock.Now())
		_, err = c.client.UpdateStatus(ctx, rolled, client.WriteOptions{})
		if err == nil || !apierrors.IsConflict(err) || i >= StatusUpdateRetries {
			break
		}
		if o, err = c.client.Get(ctx, resources.DaemonSets, ds.Namespace, ds.Name); err != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("record rollback of daemonset %s: %w", dsKey(ds), err)
	}
	return nil
}
