package daemonset

import (
	"context"
	"fmt"
	"maps"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// refManager adopts and releases objects for one DaemonSet by selector and
// controller ownerReference, as Kubernetes' ClaimObject
// (docs/controller-rules.md §2.3).
type refManager struct {
	c   *Controller
	ds  *appsv1.DaemonSet
	sel labels.Selector

	recheck    sync.Once
	recheckErr error
}

func (c *Controller) newRefManager(ds *appsv1.DaemonSet, sel labels.Selector) *refManager {
	return &refManager{c: c, ds: ds, sel: sel}
}

// canAdopt re-reads the DaemonSet from the API once: adoption is refused when
// it is gone, was re-created (other UID) or is being deleted.
func (m *refManager) canAdopt(ctx context.Context) error {
	m.recheck.Do(func() {
		o, err := m.c.client.Get(ctx, resources.DaemonSets, m.ds.Namespace, m.ds.Name)
		if err != nil {
			m.recheckErr = fmt.Errorf("recheck daemonset %s/%s before adoption: %w", m.ds.Namespace, m.ds.Name, err)
			return
		}
		if o.GetUID() != m.ds.UID {
			m.recheckErr = fmt.Errorf("original daemonset %s/%s is gone: got uid %s, wanted %s", m.ds.Namespace, m.ds.Name, o.GetUID(), m.ds.UID)
			return
		}
		if o.GetDeletionTimestamp() != nil {
			m.recheckErr = fmt.Errorf("daemonset %s/%s has just been deleted at %v", m.ds.Namespace, m.ds.Name, o.GetDeletionTimestamp())
		}
	})
	return m.recheckErr
}

// claim reports whether obj belongs to the DaemonSet, adopting a matching
// orphan and releasing an owned object that no longer matches.
func (m *refManager) claim(ctx context.Context, obj metav1.Object, r *resources.Resource, lbls map[string]string) (bool, error) {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref != nil && ref.UID != m.ds.UID {
		return false, nil // another controller's: its selector is not ours to judge
	}
	match := m.sel.Matches(labels.Set(lbls))
	if ref != nil {
		if match {
			return true, nil
		}
		if m.ds.DeletionTimestamp != nil {
			return false, nil
		}
		patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"$patch":"delete","uid":%q}],"uid":%q}}`, m.ds.UID, obj.GetUID())
		if err := m.patch(ctx, r, obj, patch); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("release %s %s/%s: %w", r.Singular, obj.GetNamespace(), obj.GetName(), err)
		}
		return false, nil
	}
	if m.ds.DeletionTimestamp != nil || !match || obj.GetDeletionTimestamp() != nil || obj.GetNamespace() != m.ds.Namespace {
		return false, nil
	}
	if err := m.canAdopt(ctx); err != nil {
		return false, err
	}
	patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":%q,"kind":%q,"name":%q,"uid":%q,"controller":true,"blockOwnerDeletion":true}],"uid":%q}}`,
		controllerKind.GroupVersion().String(), controllerKind.Kind, m.ds.Name, m.ds.UID, obj.GetUID())
	if err := m.patch(ctx, r, obj, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("adopt %s %s/%s: %w", r.Singular, obj.GetNamespace(), obj.GetName(), err)
	}
	return true, nil
}

func (m *refManager) patch(ctx context.Context, r *resources.Resource, obj metav1.Object, patch string) error {
	if r == resources.Pods {
		return m.c.podControl.PatchPod(ctx, obj.GetNamespace(), obj.GetName(), []byte(patch))
	}
	_, err := m.c.client.Patch(ctx, r, obj.GetNamespace(), obj.GetName(), types.StrategicMergePatchType, []byte(patch), client.WriteOptions{}, "")
	return err
}

// getDaemonPods returns the pods ds controls, from the cache, after adoption
// and release (docs/controller-rules.md §2.3).
func (c *Controller) getDaemonPods(ctx context.Context, ds *appsv1.DaemonSet) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("daemonset %s/%s selector: %w", ds.Namespace, ds.Name, err)
	}
	// Every pod of the namespace, not only those sel matches: owned pods
	// that no longer match are released.
	pods, err := c.podLister.Pods(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	m := c.newRefManager(ds, sel)
	var out []*corev1.Pod
	for _, pod := range pods {
		ok, err := m.claim(ctx, pod, resources.Pods, pod.Labels)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, pod)
		}
	}
	return out, nil
}

// syncPods is one sync's grouping of its DaemonSet's pods by node, as
// getNodesToDaemonPods(ds, false) returns it: read once and shared by the
// sync's steps (automatic rollback, manage, the update strategy, status)
// until one of them creates or deletes pods, after which the next step reads
// again, as Kubernetes reads before each step. Between two steps that wrote
// nothing, a new read would see the cache as it is a few microseconds
// later, which the pod events that changed it bring to the next sync
// anyway. A sync with nothing to write reads once instead of up to four
// times.
type syncPods struct {
	byNode map[string][]*corev1.Pod // nil: not read yet, or read again
}

// get returns the grouping, reading it if needed. The map is the caller's
// own (steps edit it); its slices are shared and the pods are cache
// objects: both read-only.
func (v *syncPods) get(ctx context.Context, c *Controller, ds *appsv1.DaemonSet) (map[string][]*corev1.Pod, error) {
	if v.byNode == nil {
		m, err := c.getNodesToDaemonPods(ctx, ds, false)
		if err != nil {
			return nil, err
		}
		v.byNode = m
	}
	return maps.Clone(v.byNode), nil
}

// changed marks the grouping stale: the sync created or deleted pods.
func (v *syncPods) changed() { v.byNode = nil }

// getNodesToDaemonPods groups ds's pods by target node
// (docs/controller-rules.md §2.4). Terminal pods already being deleted are left
// out unless includeDeletedTerminal. The pods are cache objects: read-only.
func (c *Controller) getNodesToDaemonPods(ctx context.Context, ds *appsv1.DaemonSet, includeDeletedTerminal bool) (map[string][]*corev1.Pod, error) {
	pods, err := c.getDaemonPods(ctx, ds)
	if err != nil {
		return nil, err
	}
	// Sized for one pod per node, the usual case: at 10,000 nodes the
	// map's growth was a quarter of this function's time, every sync.
	out := make(map[string][]*corev1.Pod, len(pods))
	for _, pod := range pods {
		if !includeDeletedTerminal && isPodTerminal(pod) && pod.DeletionTimestamp != nil {
			continue
		}
		node, err := targetNodeName(pod)
		if err != nil {
			c.logger.Debug("daemon pod without target node", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			continue
		}
		out[node] = append(out[node], pod)
	}
	return out, nil
}
