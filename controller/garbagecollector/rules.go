package garbagecollector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// ownerState is what an ownerReference points at.
type ownerState int

const (
	ownerLive        ownerState = iota // exists, not being deleted (or deleting without our finalizers)
	ownerAbsent                        // not found, or another incarnation (UID)
	ownerOrphaning                     // being deleted with the orphan finalizer
	ownerForeground                    // being deleted with the foregroundDeletion finalizer
	ownerUnknownKind                   // not a served kind: left alone
)

func hasFinalizer(o metav1.Object, f string) bool {
	for _, x := range o.GetFinalizers() {
		if x == f {
			return true
		}
	}
	return false
}

func stateOf(owner metav1.Object, uid types.UID) ownerState {
	switch {
	case owner == nil || owner.GetUID() != uid:
		return ownerAbsent
	case owner.GetDeletionTimestamp() == nil:
		return ownerLive
	case hasFinalizer(owner, metav1.FinalizerOrphanDependents):
		return ownerOrphaning
	case hasFinalizer(owner, metav1.FinalizerDeleteDependents):
		return ownerForeground
	}
	return ownerLive
}

// decision is what to do with a dependent given its owners' states.
type decision struct {
	deleteIt   bool        // every owner is gone or foreground-deleting
	removeRefs []types.UID // refs to drop (dangling or orphaning) when the dependent stays
}

// decide applies the collector's rules to a dependent's owner states.
func decide(refs []metav1.OwnerReference, states []ownerState) decision {
	var d decision
	keep, orphan := false, false
	for _, s := range states {
		switch s {
		case ownerLive, ownerUnknownKind:
			keep = true
		case ownerOrphaning:
			orphan = true
		}
	}
	if !keep && !orphan {
		d.deleteIt = len(refs) > 0
		return d
	}
	for i, s := range states {
		if s == ownerAbsent || s == ownerOrphaning {
			d.removeRefs = append(d.removeRefs, refs[i].UID)
		}
	}
	return d
}

// removeRefsPatch is a strategic merge patch deleting ownerReferences by UID.
func removeRefsPatch(uid types.UID, refs []types.UID) []byte {
	del := make([]map[string]string, len(refs))
	for i, r := range refs {
		del[i] = map[string]string{"$patch": "delete", "uid": string(r)}
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": del, "uid": string(uid)}})
	return b
}

// lookupOwner finds the object ref points at: from the cache when present
// with the same UID, else by a live GET (a cache miss is never trusted).
func (c *Collector) lookupOwner(ctx context.Context, namespace string, ref metav1.OwnerReference) (ownerState, error) {
	r := resources.ByGVK(schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind))
	if r == nil {
		return ownerUnknownKind, nil
	}
	if !r.Namespaced {
		namespace = ""
	}
	if store, ok := c.stores[r]; ok {
		key := ref.Name
		if namespace != "" {
			key = namespace + "/" + ref.Name
		}
		if obj, exists, _ := store.GetByKey(key); exists {
			if o := obj.(metav1.Object); o.GetUID() == ref.UID {
				return stateOf(o, ref.UID), nil
			}
		}
	}
	o, err := c.client.Get(ctx, r, namespace, ref.Name)
	if apierrors.IsNotFound(err) {
		return ownerAbsent, nil
	}
	if err != nil {
		return 0, fmt.Errorf("get owner %s %s/%s: %w", r.Singular, namespace, ref.Name, err)
	}
	return stateOf(o, ref.UID), nil
}

func (c *Collector) cached(r *resources.Resource, namespace, name string) (metav1.Object, bool) {
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	obj, exists, _ := c.stores[r].GetByKey(key)
	if !exists {
		return nil, false
	}
	return obj.(metav1.Object), true
}

func (c *Collector) syncDependent(ctx context.Context, r *resources.Resource, namespace, name string) error {
	o, ok := c.cached(r, namespace, name)
	if !ok || len(o.GetOwnerReferences()) == 0 {
		return nil
	}
	refs := o.GetOwnerReferences()
	states := make([]ownerState, len(refs))
	for i, ref := range refs {
		s, err := c.lookupOwner(ctx, namespace, ref)
		if err != nil {
			return err
		}
		states[i] = s
	}
	d := decide(refs, states)
	switch {
	case d.deleteIt:
		if o.GetDeletionTimestamp() != nil {
			return nil
		}
		uid := o.GetUID()
		background := metav1.DeletePropagationBackground
		_, err := c.client.Delete(ctx, r, namespace, name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &background})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete %s %s/%s: %w", r.Singular, namespace, name, err)
		}
		if err == nil {
			c.logger.Info("deleted dependent of a deleted owner", "resource", r.Name, "object", namespace+"/"+name)
		}
	case len(d.removeRefs) > 0:
		_, err := c.client.Patch(ctx, r, namespace, name, types.StrategicMergePatchType,
			removeRefsPatch(o.GetUID(), d.removeRefs), client.WriteOptions{}, "")
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("remove ownerReferences of %s %s/%s: %w", r.Singular, namespace, name, err)
		}
	}
	return nil
}

// syncOwner removes the orphan or foregroundDeletion finalizer of an owner
// being deleted once its dependents are released or gone.
func (c *Collector) syncOwner(ctx context.Context, r *resources.Resource, namespace, name string) error {
	o, ok := c.cached(r, namespace, name)
	if !ok || o.GetDeletionTimestamp() == nil {
		return nil
	}
	orphan := hasFinalizer(o, metav1.FinalizerOrphanDependents)
	foreground := hasFinalizer(o, metav1.FinalizerDeleteDependents)
	if !orphan && !foreground {
		return nil
	}
	waiting := false
	for _, dr := range dependentResources {
		objs, _ := c.stores[dr].ByIndex(ownerUIDIndex, string(o.GetUID()))
		for _, obj := range objs {
			dep := obj.(metav1.Object)
			for _, ref := range dep.GetOwnerReferences() {
				if ref.UID != o.GetUID() {
					continue
				}
				// Orphaning waits for every reference to go; foreground
				// deletion only for blocking ones (terminating ones still block).
				if orphan || (ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion) {
					waiting = true
					c.queue.Add(item{dependentItem, dr.Name, dep.GetNamespace(), dep.GetName()})
				}
			}
		}
	}
	if waiting {
		return nil
	}
	fresh, err := c.client.Get(ctx, r, namespace, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get %s %s/%s: %w", r.Singular, namespace, name, err)
	}
	if fresh.GetUID() != o.GetUID() {
		return nil
	}
	var kept []string
	for _, f := range fresh.GetFinalizers() {
		if f != metav1.FinalizerOrphanDependents && f != metav1.FinalizerDeleteDependents {
			kept = append(kept, f)
		}
	}
	fresh.SetFinalizers(kept)
	if _, err := c.client.Update(ctx, fresh, client.WriteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizers of %s %s/%s: %w", r.Singular, namespace, name, err)
	}
	c.logger.Info("released owner", "resource", r.Name, "object", namespace+"/"+name)
	return nil
}

// syncBoundPod deletes a pod whose node is gone, as Kubernetes' pod GC
// does: the Node must be missing from a live read, and have been so for the
// quarantine; the pod is then marked Failed with a DisruptionTarget
// condition (reason DeletionByPodGC) and force-deleted.
func (c *Collector) syncBoundPod(ctx context.Context, namespace, name string) error {
	o, ok := c.cached(resources.Pods, namespace, name)
	if !ok {
		return nil
	}
	pod := o.(*corev1.Pod)
	node := pod.Spec.NodeName
	if node == "" {
		return nil
	}
	if _, exists, _ := c.stores[resources.Nodes].GetByKey(node); exists {
		c.nodeBack(node)
		return nil
	}
	if _, err := c.client.Get(ctx, resources.Nodes, "", node); err == nil {
		c.nodeBack(node)
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get node %s: %w", node, err)
	}
	if wait := c.quarantine - c.clock.Since(c.nodeGone(node)); wait > 0 {
		c.queue.AddAfter(item{boundPodItem, resources.Pods.Name, namespace, name}, wait)
		return nil
	}
	if err := c.markOrphanFailed(ctx, pod); err != nil {
		if apierrors.IsNotFound(err) || uidRefused(err) {
			return nil // gone, or another pod of that name: its own events say
		}
		return fmt.Errorf("mark pod %s/%s of deleted node %s failed: %w", namespace, name, node, err)
	}
	uid := pod.UID
	zero := int64(0)
	_, err := c.client.Delete(ctx, resources.Pods, namespace, name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s/%s of deleted node %s: %w", namespace, name, node, err)
	}
	if err == nil {
		c.logger.Info("deleted pod of a deleted node", "pod", namespace+"/"+name, "node", node)
	}
	return nil
}

// nodeGone returns when node was first found missing, noting now if it
// had not been.
func (c *Collector) nodeGone(node string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	since, ok := c.nodesGone[node]
	if !ok {
		since = c.clock.Now()
		c.nodesGone[node] = since
	}
	return since
}

// nodeBack forgets that node was missing: it exists (again).
func (c *Collector) nodeBack(node string) {
	c.mu.Lock()
	delete(c.nodesGone, node)
	c.mu.Unlock()
}

// markOrphanFailed moves a pod that has not finished to phase Failed with
// pod GC's DisruptionTarget condition, by a strategic merge patch of its
// status that carries its UID as a precondition, as Kubernetes' pod GC does
// before deleting it: with no node, nothing else would ever end its phase,
// and a watcher sees why it went.
func (c *Collector) markOrphanFailed(ctx context.Context, pod *corev1.Pod) error {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	status := pod.Status.DeepCopy()
	status.Phase = corev1.PodFailed
	setPodCondition(status, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: ReasonDeletionByPodGC, Message: "PodGC: node no longer exists"}, metav1.NewTime(c.clock.Now()))
	old, err := json.Marshal(corev1.Pod{Status: pod.Status})
	if err != nil {
		return err
	}
	cur, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: pod.UID}, Status: *status})
	if err != nil {
		return err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(old, cur, corev1.Pod{})
	if err != nil {
		return err
	}
	_, err = c.client.Patch(ctx, resources.Pods, pod.Namespace, pod.Name, types.StrategicMergePatchType, patch, client.WriteOptions{}, "status")
	return err
}

// uidRefused reports whether err is the 422 that refuses a write carrying
// a uid other than the stored object's: the name now holds another object.
func uidRefused(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}

// ReasonDeletionByPodGC is the reason of the DisruptionTarget condition a
// pod of a deleted Node gets before it is deleted (Kubernetes' pod GC's).
const ReasonDeletionByPodGC = "DeletionByPodGC"

// setPodCondition sets cond in status, replacing the condition of its type;
// the transition time moves only when the condition's status changes.
func setPodCondition(status *corev1.PodStatus, cond corev1.PodCondition, now metav1.Time) {
	for i := range status.Conditions {
		if status.Conditions[i].Type != cond.Type {
			continue
		}
		cond.LastTransitionTime = status.Conditions[i].LastTransitionTime
		if status.Conditions[i].Status != cond.Status {
			cond.LastTransitionTime = now
		}
		status.Conditions[i] = cond
		return
	}
	cond.LastTransitionTime = now
	status.Conditions = append(status.Conditions, cond)
}
