package strategy

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/resources"
)

// Finalizers the garbage collector acts on, as in Kubernetes.
const (
	FinalizerOrphan     = metav1.FinalizerOrphanDependents // "orphan"
	FinalizerForeground = metav1.FinalizerDeleteDependents // "foregroundDeletion"
)

// ImmortalNamespace reports whether a namespace may never be deleted
// (default, kube-system, kube-public).
func ImmortalNamespace(name string) bool {
	return name == metav1.NamespaceDefault || name == metav1.NamespaceSystem || name == metav1.NamespacePublic
}

// ParseDryRun reads dryRun values: "All" is the only one accepted (400 otherwise).
func ParseDryRun(values []string) (bool, error) {
	dry := false
	for _, v := range values {
		if v != metav1.DryRunAll {
			return false, apierrors.NewBadRequest(fmt.Sprintf("invalid dryRun value %q: the only supported value is All", v))
		}
		dry = true
	}
	return dry, nil
}

// ValidateDeleteOptions checks the propagation policy and dryRun values and
// reports whether the delete is a dry run.
func ValidateDeleteOptions(opts *metav1.DeleteOptions) (bool, error) {
	if p := opts.PropagationPolicy; p != nil {
		switch *p {
		case metav1.DeletePropagationOrphan, metav1.DeletePropagationForeground, metav1.DeletePropagationBackground:
		default:
			return false, apierrors.NewBadRequest(fmt.Sprintf(
				"invalid propagationPolicy %q: supported values are Orphan, Background and Foreground", *p))
		}
	}
	return ParseDryRun(opts.DryRun)
}

// CheckPreconditions enforces DeleteOptions.preconditions (409 on mismatch).
func CheckPreconditions(r *resources.Resource, cur resources.Object, pre *metav1.Preconditions) error {
	if pre == nil {
		return nil
	}
	if pre.UID != nil && *pre.UID != cur.GetUID() {
		return apierrors.NewConflict(r.GroupResource(), cur.GetName(), fmt.Errorf(
			"Precondition failed: UID in precondition: %v, UID in object meta: %v", *pre.UID, cur.GetUID()))
	}
	if pre.ResourceVersion != nil && *pre.ResourceVersion != cur.GetResourceVersion() {
		return apierrors.NewConflict(r.GroupResource(), cur.GetName(), fmt.Errorf(
			"Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v",
			*pre.ResourceVersion, cur.GetResourceVersion()))
	}
	return nil
}

// DeletionPlan decides what deleting cur at now means, with Kubernetes'
// semantics (k8s.io/apiserver pkg/registry/rest/delete.go BeforeDelete and
// the generic store's finalizer handling):
//   - Orphan / Foreground add the "orphan" / "foregroundDeletion" finalizer
//     and mark the object (deletionTimestamp); the garbage collector finishes.
//   - Background or none removes the object at once unless it has
//     finalizers, in which case it is only marked.
//   - A pod bound to a node with a grace period is marked with
//     deletionTimestamp and deletionGracePeriodSeconds; its agent finishes
//     the delete with gracePeriodSeconds=0.
//
// remove says to remove cur now; otherwise next is the marked copy to store,
// or nil when nothing changes (already marked as asked).
func DeletionPlan(r *resources.Resource, cur resources.Object, opts *metav1.DeleteOptions, now time.Time) (next resources.Object, remove bool) {
	finalizers := slices.Clone(cur.GetFinalizers())
	switch propagationPolicy(opts) {
	case metav1.DeletePropagationOrphan:
		finalizers = addFinalizer(removeFinalizer(finalizers, FinalizerForeground), FinalizerOrphan)
	case metav1.DeletePropagationForeground:
		finalizers = addFinalizer(removeFinalizer(finalizers, FinalizerOrphan), FinalizerForeground)
	case metav1.DeletePropagationBackground:
		finalizers = removeFinalizer(removeFinalizer(finalizers, FinalizerOrphan), FinalizerForeground)
	}
	var grace int64
	if pod, ok := cur.(*corev1.Pod); ok {
		grace = podGracePeriod(pod, opts)
	}
	if len(finalizers) == 0 && grace == 0 {
		return nil, true
	}
	n := cur.DeepCopyObject().(resources.Object)
	n.SetFinalizers(finalizers)
	dt, old := n.GetDeletionTimestamp(), n.GetDeletionGracePeriodSeconds()
	if dt == nil || old == nil || grace < *old {
		// Mark, or shorten a running grace period.
		t := metav1.NewTime(now.Add(time.Duration(grace) * time.Second).Truncate(time.Second))
		if dt != nil && dt.Before(&t) {
			t = *dt
		}
		n.SetDeletionTimestamp(&t)
		n.SetDeletionGracePeriodSeconds(&grace)
	}
	if equality.Semantic.DeepEqual(n, cur) {
		return nil, false
	}
	return n, false
}

// podGracePeriod is the grace period a pod deletion gets: none for pods that
// never reached a node or already ended, else the request's, else the pod's
// terminationGracePeriodSeconds, else 30 s.
func podGracePeriod(pod *corev1.Pod, opts *metav1.DeleteOptions) int64 {
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return 0
	}
	g := int64(corev1.DefaultTerminationGracePeriodSeconds)
	switch {
	case opts.GracePeriodSeconds != nil:
		g = *opts.GracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		g = *pod.Spec.TerminationGracePeriodSeconds
	}
	return max(g, 0)
}

func propagationPolicy(opts *metav1.DeleteOptions) metav1.DeletionPropagation {
	switch {
	case opts.PropagationPolicy != nil:
		return *opts.PropagationPolicy
	case opts.OrphanDependents != nil && *opts.OrphanDependents:
		return metav1.DeletePropagationOrphan
	case opts.OrphanDependents != nil:
		return metav1.DeletePropagationBackground
	}
	return ""
}

func addFinalizer(fs []string, f string) []string {
	if slices.Contains(fs, f) {
		return fs
	}
	return append(fs, f)
}

func removeFinalizer(fs []string, f string) []string {
	return slices.DeleteFunc(fs, func(x string) bool { return x == f })
}
