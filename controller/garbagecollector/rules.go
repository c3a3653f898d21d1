package garbagecollector

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

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

// syncBoundPod deletes a pod whose node is gone (confirmed by a live GET).
func (c *Collector) syncBoundPod(ctx context.Context, namespace, name string) error {
	o, ok := c.cached(resources.Pods, namespace, name)
	if !ok {
		return nil
	}
	pod := o.(*corev1.Pod)
	if pod.Spec.NodeName == "" {
		return nil
	}
	if _, exists, _ := c.stores[resources.Nodes].GetByKey(pod.Spec.NodeName); exists {
		return nil
	}
	if _, err := c.client.Get(ctx, resources.Nodes, "", pod.Spec.NodeName); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get node %s: %w", pod.Spec.NodeName, err)
	}
	uid := pod.UID
	zero := int64(0)
	_, err := c.client.Delete(ctx, resources.Pods, namespace, name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s/%s of deleted node %s: %w", namespace, name, pod.Spec.NodeName, err)
	}
	if err == nil {
		c.logger.Info("deleted pod of a deleted node", "pod", namespace+"/"+name, "node", pod.Spec.NodeName)
	}
	return nil
}
