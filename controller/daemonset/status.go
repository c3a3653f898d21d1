package daemonset

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// StatusUpdateRetries is how many times a failed status write is retried
// after re-reading the DaemonSet (REFERENCE §5).
const StatusUpdateRetries = 1

// statusCounts are the seven counters of a DaemonSet's status.
type statusCounts struct {
	desired, current, misscheduled, ready, updated, available, unavailable int32
}

// computeStatus derives the counters from the nodes and the DaemonSet's pods
// grouped by node, looking at the oldest pod of each node (REFERENCE §5).
func computeStatus(ds *appsv1.DaemonSet, nodes []*corev1.Node, nodeToPods map[string][]*corev1.Pod, hash string, now time.Time) statusCounts {
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
		s.desired++
		if len(pods) == 0 {
			continue
		}
		s.current++
		sorted := append([]*corev1.Pod(nil), pods...)
		sortPodsOldestFirst(sorted)
		pod := sorted[0]
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
	if statusUnchanged(ds, s) {
		return nil
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
		if _, updateErr = w.UpdateStatus(ctx, toUpdate, client.WriteOptions{}); updateErr == nil {
			return nil
		}
		if i >= StatusUpdateRetries {
			break
		}
		o, err := w.Get(ctx, resources.DaemonSets, ds.Namespace, ds.Name)
		if err != nil {
			return fmt.Errorf("get daemonset %s/%s for status retry: %w", ds.Namespace, ds.Name, err)
		}
		toUpdate = o.(*appsv1.DaemonSet)
	}
	return fmt.Errorf("update status of daemonset %s/%s: %w", ds.Namespace, ds.Name, updateErr)
}

// updateDaemonSetStatus recomputes and stores ds's status, and schedules a
// re-sync when pods are ready but not yet available.
func (c *Controller) updateDaemonSetStatus(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, hash string, updateObservedGen bool) error {
	nodeToPods, err := c.getNodesToDaemonPods(ctx, ds, false)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemonset %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	s := computeStatus(ds, nodes, nodeToPods, hash, c.clock.Now())
	if err := storeDaemonSetStatus(ctx, c.client, ds, s, updateObservedGen); err != nil {
		return err
	}
	if ds.Spec.MinReadySeconds > 0 && s.ready != s.available {
		c.enqueueAfter(ds, time.Duration(ds.Spec.MinReadySeconds)*time.Second)
	}
	return nil
}
