package daemonset

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/rollout"
)

// StatusUpdateRetries is how many times a failed status write is retried
// after re-reading the DaemonSet (docs/controller-rules.md §5).
const StatusUpdateRetries = 1

// statusCounts are the seven counters of a DaemonSet's status.
type statusCounts struct {
	desired, current, misscheduled, ready, updated, available, unavailable int32
}

// computeStatus derives the counters from the nodes and the DaemonSet's pods
// grouped by node, looking at the oldest pod of each node
// (docs/controller-rules.md §5). Nodes aside reports (set aside as
// unreachable, docs/rollouts.md §7; nil: none) are not counted.
func computeStatus(ds *appsv1.DaemonSet, nodes []*corev1.Node, nodeToPods map[string][]*corev1.Pod, hash string, now time.Time, aside func(string) bool) statusCounts {
	var s statusCounts
	generation, err := templateGeneration(ds)
	if err != nil {
		generation = nil
	}
	elig := newEligibility(ds)
	for _, node := range nodes {
		run, _ := elig.nodeShouldRun(node)
		pods := nodeToPods[node.Name]
		if !run {
			if len(pods) > 0 {
				s.misscheduled++
			}
			continue
		}
		if aside != nil && aside(node.Name) {
			continue
		}
		s.desired++
		if len(pods) == 0 {
			continue
		}
		s.current++
		pod := pods[0]
		if len(pods) > 1 {
			sorted := append([]*corev1.Pod(nil), pods...)
			sortPodsOldestFirst(sorted)
			pod = sorted[0]
		}
		if IsPodReady(pod) {
			s.ready++
			if IsPodAvailable(pod, ds.Spec.MinReadySeconds, now) {
				s.available++
			}
		}
		if isPodUpdated(pod, hash, generation) {
			s.updated++
		}
	}
	s.unavailable = s.desired - s.available
	return s
}

// statusUnchanged reports whether writing s would change nothing.
func statusUnchanged(ds *appsv1.DaemonSet, s statusCounts) bool {
	st := ds.Status
	return st.DesiredNumberScheduled == s.desired && st.CurrentNumberScheduled == s.current &&
		st.NumberMisscheduled == s.misscheduled && st.NumberReady == s.ready &&
		st.UpdatedNumberScheduled == s.updated && st.NumberAvailable == s.available &&
		st.NumberUnavailable == s.unavailable && st.ObservedGeneration >= ds.Generation
}

// statusWriter is the part of the API the status write needs.
type statusWriter interface {
	Get(ctx context.Context, r *resources.Resource, namespace, name string) (client.Object, error)
	UpdateStatus(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error)
}

// storeDaemonSetStatus writes s (and observedGeneration when
// updateObservedGen) unless nothing changed; on failure it re-reads the
// DaemonSet and retries once. Conditions and collisionCount are kept from the
// object being written.
func storeDaemonSetStatus(ctx context.Context, w statusWriter, ds *appsv1.DaemonSet, s statusCounts, updateObservedGen bool) error {
	_, err := storeStatus(ctx, w, ds, s, nil, time.Time{}, updateObservedGen)
	return err
}

// storeStatus is storeDaemonSetStatus that also sets cond (when not nil,
// with now as its transition time if it changes). transitioned
// reports whether the write gave cond a new reason, judged on the object
// written (after a conflict, the re-read one), so a stale cache never
// doubles the event; after a conflict cond is dropped when the stored
// condition it was decided on has changed meanwhile.
func storeStatus(ctx context.Context, w statusWriter, ds *appsv1.DaemonSet, s statusCounts, cond *appsv1.DaemonSetCondition, now time.Time, updateObservedGen bool) (transitioned bool, err error) {
	if statusUnchanged(ds, s) && conditionUnchanged(ds.Status, cond) {
		return false, nil
	}
	toUpdate := ds.DeepCopy()
	var updateErr error
	for i := 0; ; i++ {
		if updateObservedGen {
			toUpdate.Status.ObservedGeneration = ds.Generation
		}
		toUpdate.Status.DesiredNumberScheduled = s.desired
		toUpdate.Status.CurrentNumberScheduled = s.current
		toUpdate.Status.NumberMisscheduled = s.misscheduled
		toUpdate.Status.NumberReady = s.ready
		toUpdate.Status.UpdatedNumberScheduled = s.updated
		toUpdate.Status.NumberAvailable = s.available
		toUpdate.Status.NumberUnavailable = s.unavailable
		transitioned = false
		if cond != nil && i > 0 && !sameStoredCondition(ds.Status, toUpdate.Status, cond.Type) {
			// cond was decided on a condition someone has changed since
			// (say, a rollback's RolledBack): write the counters only and
			// let the next sync decide on the new one.
			cond = nil
		}
		if cond != nil {
			prev := getCondition(toUpdate.Status, cond.Type)
			transitioned = prev == nil || prev.Reason != cond.Reason
		}
		setCondition(&toUpdate.Status, cond, now)
		if _, updateErr = w.UpdateStatus(ctx, toUpdate, client.WriteOptions{}); updateErr == nil {
			return transitioned, nil
		}
		if i >= StatusUpdateRetries {
			break
		}
		o, err := w.Get(ctx, resources.DaemonSets, ds.Namespace, ds.Name)
		if err != nil {
			return false, fmt.Errorf("get daemonset %s/%s for status retry: %w", ds.Namespace, ds.Name, err)
		}
		toUpdate = o.(*appsv1.DaemonSet)
	}
	return false, fmt.Errorf("update status of daemonset %s/%s: %w", ds.Namespace, ds.Name, updateErr)
}

// sameStoredCondition reports whether a and b carry the same condition of
// type t (both none counts as the same).
func sameStoredCondition(a, b appsv1.DaemonSetStatus, t appsv1.DaemonSetConditionType) bool {
	ca, cb := getCondition(a, t), getCondition(b, t)
	if ca == nil || cb == nil {
		return ca == nil && cb == nil
	}
	return sameCondition(ca, cb)
}

// updateDaemonSetStatus recomputes and stores ds's status with the
// Progressing condition of its rollout settings (rollout.go), records an
// event when that condition's reason changes, marks the current revision
// fully available for automatic rollback (rollback.go), and schedules a
// re-sync when pods are ready but not yet available and when the progress
// deadline passes.
func (c *Controller) updateDaemonSetStatus(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, hash string, updateObservedGen bool, pods *syncPods) error {
	nodeToPods, err := pods.get(ctx, c, ds)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemonset %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	now := c.clock.Now()
	gate := c.rolloutGate(ds, nodes, nodeToPods, hash)
	s := computeStatus(ds, nodes, nodeToPods, hash, now, gate.setAsideFunc())
	done, target := canaryProgress(ds, gate, nodeToPods, hash, now)
	cond, requeue := rolloutCondition(ds, gate, s, done, target, progress{
		now:           now,
		revision:      c.revisionName(ds, hash),
		lastAvailable: func() time.Time { return lastUpdatedAvailable(ds, nodeToPods, hash, now) },
	})
	transitioned, err := storeStatus(ctx, c.client, ds, s, cond, now, updateObservedGen)
	if err != nil {
		return err
	}
	if transitioned {
		c.rolloutRecorder.Eventf(ds, conditionEvent(cond.Reason), cond.Reason, "%s", cond.Message)
		if cond.Reason == rollout.ReasonProgressDeadlineExceeded && gate.opts.AutoRollback {
			c.enqueue(ds) // the next sync rolls back
		}
	}
	if requeue > 0 {
		c.enqueueAfter(ds, requeue)
	}
	if gate.unreach.recheck > 0 {
		c.enqueueAfter(ds, gate.unreach.recheck) // a down node's grace passes
	}
	if gate.active && gate.opts.AutoRollback && !gate.bad && s.desired > 0 && s.updated == s.desired && s.available == s.desired {
		if err := c.markFullyAvailable(ctx, ds, hash, now); err != nil {
			return err
		}
	}
	if ds.Spec.MinReadySeconds > 0 && s.ready != s.available {
		c.enqueueAfter(ds, time.Duration(ds.Spec.MinReadySeconds)*time.Second)
	}
	return nil
}
