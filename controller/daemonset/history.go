package daemonset

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/dump"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// DefaultRevisionHistoryLimit applies when spec.revisionHistoryLimit is nil
// (the API server defaults it; this guards objects that bypassed defaulting).
const DefaultRevisionHistoryLimit = 10

// ComputeHash is Kubernetes' controller.ComputeHash: FNV-1a 32 over the
// deterministic dump of the template, then the collision count (if any) as 8
// little-endian bytes, rendered with rand.SafeEncodeString. The result names
// the ControllerRevision ("<ds>-<hash>") and labels pods and revisions.
func ComputeHash(template *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	h.Reset()
	fmt.Fprintf(h, "%v", dump.ForHash(*template))
	if collisionCount != nil {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, uint32(*collisionCount))
		h.Write(b)
	}
	return utilrand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// RevisionData is the ControllerRevision data for ds, byte for byte as
// Kubernetes' getPatch makes it: {"spec":{"template":{...,"$patch":"replace"}}},
// keys sorted — a strategic merge patch that restores the template.
func RevisionData(ds *appsv1.DaemonSet) ([]byte, error) {
	dsBytes, err := json.Marshal(ds)
	if err != nil {
		return nil, fmt.Errorf("encode daemonset %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(dsBytes, &raw); err != nil {
		return nil, fmt.Errorf("decode daemonset %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	spec, _ := raw["spec"].(map[string]any)
	template, _ := spec["template"].(map[string]any)
	if template == nil {
		template = map[string]any{}
	}
	template["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": template}})
}

// Match reports whether revision cr records ds's current template.
func Match(ds *appsv1.DaemonSet, cr *appsv1.ControllerRevision) (bool, error) {
	data, err := RevisionData(ds)
	if err != nil {
		return false, err
	}
	return string(cr.Data.Raw) == string(data), nil
}

// NewRevision builds the ControllerRevision for ds's current template with the
// given revision number (docs/controller-rules.md §4.1): name "<ds>-<hash>",
// template labels plus the hash label, the DaemonSet's annotations, a
// controller ownerReference.
func NewRevision(ds *appsv1.DaemonSet, revision int64) (*appsv1.ControllerRevision, error) {
	data, err := RevisionData(ds)
	if err != nil {
		return nil, err
	}
	hash := ComputeHash(&ds.Spec.Template, ds.Status.CollisionCount)
	labels := make(map[string]string, len(ds.Spec.Template.Labels)+1)
	for k, v := range ds.Spec.Template.Labels {
		labels[k] = v
	}
	labels[RevisionHashLabel] = hash
	var annotations map[string]string
	if ds.Annotations != nil {
		annotations = make(map[string]string, len(ds.Annotations))
		for k, v := range ds.Annotations {
			annotations[k] = v
		}
	}
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            ds.Name + "-" + hash,
			Namespace:       ds.Namespace,
			Labels:          labels,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Data:     runtime.RawExtension{Raw: data},
		Revision: revision,
	}
	resources.ControllerRevisions.SetTypeMeta(cr)
	return cr, nil
}

func maxRevision(revs []*appsv1.ControllerRevision) int64 {
	var m int64
	for _, r := range revs {
		if r.Revision > m {
			m = r.Revision
		}
	}
	return m
}

// constructHistory claims ds's revisions and returns the current one (created
// or re-numbered as needed) and the old ones (docs/controller-rules.md §4.2).
func (c *Controller) constructHistory(ctx context.Context, ds *appsv1.DaemonSet) (cur *appsv1.ControllerRevision, old []*appsv1.ControllerRevision, err error) {
	histories, err := c.controlledHistories(ctx, ds)
	if err != nil {
		return nil, nil, err
	}
	var current []*appsv1.ControllerRevision
	for _, h := range histories {
		if _, ok := h.Labels[RevisionHashLabel]; !ok {
			toUpdate := h.DeepCopy()
			if toUpdate.Labels == nil {
				toUpdate.Labels = map[string]string{}
			}
			toUpdate.Labels[RevisionHashLabel] = toUpdate.Name
			o, err := c.client.Update(ctx, toUpdate, client.WriteOptions{})
			if err != nil {
				return nil, nil, fmt.Errorf("label revision %s/%s: %w", h.Namespace, h.Name, err)
			}
			h = o.(*appsv1.ControllerRevision)
		}
		found, err := Match(ds, h)
		if err != nil {
			return nil, nil, err
		}
		if found {
			current = append(current, h)
		} else {
			old = append(old, h)
		}
	}
	currRevision := maxRevision(old) + 1
	if len(current) == 0 {
		cur, err = c.snapshot(ctx, ds, currRevision)
		if err != nil {
			return nil, nil, err
		}
		return cur, old, nil
	}
	cur, err = c.dedupCurHistories(ctx, ds, current)
	if err != nil {
		return nil, nil, err
	}
	if cur.Revision < currRevision {
		toUpdate := cur.DeepCopy()
		toUpdate.Revision = currRevision
		o, err := c.client.Update(ctx, toUpdate, client.WriteOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("roll revision %s/%s forward: %w", cur.Namespace, cur.Name, err)
		}
		cur = o.(*appsv1.ControllerRevision)
	}
	return cur, old, nil
}

// controlledHistories returns the revisions ds controls after adopting
// matching orphans and releasing owned revisions that no longer match.
func (c *Controller) controlledHistories(ctx context.Context, ds *appsv1.DaemonSet) ([]*appsv1.ControllerRevision, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("daemonset %s/%s selector: %w", ds.Namespace, ds.Name, err)
	}
	// Every revision of the namespace: owned ones that no longer match are released.
	crs, err := c.crLister.ControllerRevisions(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	m := c.newRefManager(ds, sel)
	var out []*appsv1.ControllerRevision
	for _, cr := range crs {
		ok, err := m.claim(ctx, cr, resources.ControllerRevisions, cr.Labels)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, cr)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// dedupCurHistories keeps the highest-revision duplicate of the current
// template, relabels pods to its hash and deletes the others.
func (c *Controller) dedupCurHistories(ctx context.Context, ds *appsv1.DaemonSet, cur []*appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	if len(cur) == 1 {
		return cur[0], nil
	}
	var keep *appsv1.ControllerRevision
	var maxRev int64
	for _, h := range cur {
		if h.Revision >= maxRev {
			keep, maxRev = h, h.Revision
		}
	}
	keepHash := keep.Labels[RevisionHashLabel]
	for _, h := range cur {
		if h.Name == keep.Name {
			continue
		}
		pods, err := c.getDaemonPods(ctx, ds)
		if err != nil {
			return nil, err
		}
		for _, pod := range pods {
			if pod.Labels[RevisionHashLabel] == keepHash {
				continue
			}
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{RevisionHashLabel: keepHash}}})
			if err := c.podControl.PatchPod(ctx, pod.Namespace, pod.Name, patch); err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("relabel pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
		}
		if _, err := c.client.Delete(ctx, resources.ControllerRevisions, h.Namespace, h.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("delete duplicate revision %s/%s: %w", h.Namespace, h.Name, err)
		}
	}
	return keep, nil
}

// snapshot creates the revision of ds's current template. On a name taken by a
// different template it bumps status.collisionCount and returns the
// AlreadyExists error, so the retry hashes to a new name
// (docs/controller-rules.md §4.2).
func (c *Controller) snapshot(ctx context.Context, ds *appsv1.DaemonSet, revision int64) (*appsv1.ControllerRevision, error) {
	cr, err := NewRevision(ds, revision)
	if err != nil {
		return nil, err
	}
	o, err := c.client.Create(ctx, cr, client.WriteOptions{})
	if err == nil {
		return o.(*appsv1.ControllerRevision), nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create revision %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	createErr := err
	o, err = c.client.Get(ctx, resources.ControllerRevisions, cr.Namespace, cr.Name)
	if err != nil {
		return nil, fmt.Errorf("get existing revision %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	existing := o.(*appsv1.ControllerRevision)
	if ok, err := Match(ds, existing); err != nil {
		return nil, err
	} else if ok {
		return existing, nil
	}
	o, err = c.client.Get(ctx, resources.DaemonSets, ds.Namespace, ds.Name)
	if err != nil {
		return nil, fmt.Errorf("get daemonset %s/%s for collision count: %w", ds.Namespace, ds.Name, err)
	}
	live := o.(*appsv1.DaemonSet)
	if !equality.Semantic.DeepEqual(live.Status.CollisionCount, ds.Status.CollisionCount) {
		return nil, fmt.Errorf("daemonset %s/%s: stale collision count; will retry", ds.Namespace, ds.Name)
	}
	if live.Status.CollisionCount == nil {
		live.Status.CollisionCount = new(int32)
	}
	*live.Status.CollisionCount++
	if _, err := c.client.UpdateStatus(ctx, live, client.WriteOptions{}); err != nil {
		return nil, fmt.Errorf("bump collision count of daemonset %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	c.logger.Info("hash collision: bumped collisionCount", "daemonset", ds.Namespace+"/"+ds.Name, "revision", cr.Name)
	return nil, createErr
}

// cleanupHistory deletes the oldest old revisions beyond revisionHistoryLimit,
// never one whose hash a pod still carries (docs/controller-rules.md §4.4)
// nor the last fully available one.
func (c *Controller) cleanupHistory(ctx context.Context, ds *appsv1.DaemonSet, old []*appsv1.ControllerRevision) error {
	limit := DefaultRevisionHistoryLimit
	if ds.Spec.RevisionHistoryLimit != nil {
		limit = int(*ds.Spec.RevisionHistoryLimit)
	}
	toKill := len(old) - limit
	if toKill <= 0 {
		return nil
	}
	nodeToPods, err := c.getNodesToDaemonPods(ctx, ds, true)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, pods := range nodeToPods {
		for _, p := range pods {
			if h := p.Labels[RevisionHashLabel]; h != "" {
				live[h] = true
			}
		}
	}
	sorted := append([]*appsv1.ControllerRevision(nil), old...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Revision < sorted[j].Revision })
	keep := lastAvailableRevision(old) // automatic rollback's target (docs/rollouts.md §6.1)
	for _, h := range sorted {
		if toKill <= 0 {
			break
		}
		if hash, ok := h.Labels[RevisionHashLabel]; (ok && live[hash]) || h == keep {
			continue
		}
		if _, err := c.client.Delete(ctx, resources.ControllerRevisions, h.Namespace, h.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete old revision %s/%s: %w", h.Namespace, h.Name, err)
		}
		toKill--
	}
	return nil
}
