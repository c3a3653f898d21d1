package daemonset

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// sync reconciles one DaemonSet, level-triggered
// (docs/controller-rules.md §2.2). It returns an error exactly when the key
// should be retried with back-off.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		c.logger.Error("invalid daemonset key", "key", key, "err", err)
		return nil
	}
	ds, err := c.dsLister.DaemonSets(namespace).Get(name) // cache object: read-only
	if apierrors.IsNotFound(err) {
		c.forget(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get daemonset %s from cache: %w", key, err)
	}
	if ds.Spec.Selector != nil && equality.Semantic.DeepEqual(*ds.Spec.Selector, metav1.LabelSelector{}) {
		c.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonSelectingAll,
			"This daemon set is selecting all pods. A non-empty selector is required.")
		return nil
	}
	if ds.DeletionTimestamp != nil {
		return nil
	}
	now := c.clock.Now()
	if !c.expectations.Satisfied(key) {
		if wait := c.statusPacer.wait(key, now, StatusOnlyInterval); wait > 0 {
			c.queue.AddAfter(key, wait) // step 6, paced: nothing read or written
			return nil
		}
	}

	cur, old, err := c.constructHistory(ctx, ds)
	if err != nil {
		return fmt.Errorf("failed to construct revisions of daemonset %s: %w", key, err)
	}
	hash := cur.Labels[RevisionHashLabel]

	pods := &syncPods{}
	if !c.expectations.Satisfied(key) {
		if err := c.updateDaemonSetStatus(ctx, ds, c.listNodes(), hash, false, pods); err != nil {
			return err // retried with back-off, not paced
		}
		c.statusPacer.ran(key, now)
		return nil
	}
	nodes := c.listNodes()
	if rolledBack, err := c.autoRollback(ctx, ds, nodes, cur, old, pods); rolledBack || err != nil {
		return err // the rewritten template syncs next
	}
	err = c.manageAndUpdate(ctx, ds, nodes, hash, key, old, pods)
	statusErr := c.updateDaemonSetStatus(ctx, ds, nodes, hash, true, pods)
	switch {
	case err != nil && statusErr != nil:
		c.logger.Warn("daemonset status update failed", "daemonset", key, "err", statusErr)
		return err
	case err != nil:
		return err
	default:
		return statusErr
	}
}

// manageAndUpdate is Kubernetes' updateDaemonSet: manage, then (with
// expectations satisfied) the update strategy, then history cleanup. Both
// steps obey the rollout settings (rollout.go, docs/rollouts.md).
func (c *Controller) manageAndUpdate(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, hash, key string, old []*appsv1.ControllerRevision, pods *syncPods) error {
	if err := c.manage(ctx, ds, nodes, hash, old, pods); err != nil {
		return err
	}
	if c.expectations.Satisfied(key) && ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if err := c.rollingUpdate(ctx, ds, nodes, hash, pods); err != nil {
			return err
		}
	}
	if err := c.cleanupHistory(ctx, ds, old); err != nil {
		return fmt.Errorf("failed to clean up revisions of daemonset %s: %w", key, err)
	}
	return nil
}
