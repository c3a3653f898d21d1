package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// Finalizers the garbage collector acts on, as in Kubernetes.
const (
	FinalizerOrphan     = metav1.FinalizerOrphanDependents // "orphan"
	FinalizerForeground = metav1.FinalizerDeleteDependents // "foregroundDeletion"
	defaultPodGrace     = corev1.DefaultTerminationGracePeriodSeconds
	maxDeleteAttempts   = 8
)

// immortalNamespaces may not be deleted.
func immortalNamespace(name string) bool {
	return name == metav1.NamespaceDefault || name == metav1.NamespaceSystem || name == metav1.NamespacePublic
}

// deleteObject deletes one object with Kubernetes semantics:
//   - Orphan / Foreground add the "orphan" / "foregroundDeletion" finalizer and
//     mark the object (deletionTimestamp); the garbage collector finishes.
//   - Background or none removes the object at once unless it has finalizers,
//     in which case it is only marked.
//   - A pod bound to a node with a grace period is marked with
//     deletionTimestamp and deletionGracePeriodSeconds; its agent finishes the
//     delete with gracePeriodSeconds=0.
//
// It returns the deleted object, or the marked object still present.
func (s *Server) deleteObject(ctx context.Context, c call, opts *metav1.DeleteOptions) (resources.Object, error) {
	if err := s.authorize(ctx, c, "delete"); err != nil {
		return nil, err
	}
	if _, err := validateDeleteOptions(opts); err != nil {
		return nil, err
	}
	return s.deleteOne(ctx, c, opts)
}

// deleteOne is deleteObject after authorization.
func (s *Server) deleteOne(ctx context.Context, c call, opts *metav1.DeleteOptions) (resources.Object, error) {
	dryRun, _ := parseDryRun(opts.DryRun)
	if c.r == resources.Namespaces {
		return s.deleteNamespace(ctx, c, opts, dryRun)
	}
	r := c.r
	for range maxDeleteAttempts {
		cur, err := s.store.Get(ctx, r, c.namespace, c.name)
		if err != nil {
			return nil, s.missingNamespace(ctx, c, err)
		}
		if err := checkPreconditions(r, cur, opts.Preconditions); err != nil {
			return nil, err
		}
		next, remove := s.deletionPlan(r, cur, opts)
		switch {
		case dryRun && remove:
			return withTypeMeta(r, cur), nil
		case dryRun && next != nil:
			return withTypeMeta(r, next), nil
		case next == nil && !remove:
			return withTypeMeta(r, cur), nil // already marked as asked
		}
		var out resources.Object
		if remove {
			out, err = s.store.Delete(ctx, r, c.namespace, c.name, &store.Preconditions{ResourceVersion: cur.GetResourceVersion()})
		} else {
			out, err = s.store.Update(ctx, r, next)
		}
		if store.IsConflict(err) {
			continue // changed meanwhile: decide again on the new state
		}
		if err != nil {
			return nil, err
		}
		return withTypeMeta(r, out), nil
	}
	return nil, conflictError(r.GroupResource(), c.name)
}

// deletionPlan decides what deleting cur means: remove it now, or store next
// (a marked copy). next is nil when nothing changes.
func (s *Server) deletionPlan(r *resources.Resource, cur resources.Object, opts *metav1.DeleteOptions) (next resources.Object, remove bool) {
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
	now := s.now()
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
	g := int64(defaultPodGrace)
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

// checkPreconditions enforces DeleteOptions.preconditions (409 on mismatch).
func checkPreconditions(r *resources.Resource, cur resources.Object, pre *metav1.Preconditions) error {
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

// validateDeleteOptions checks the propagation policy and dryRun values.
func validateDeleteOptions(opts *metav1.DeleteOptions) (bool, error) {
	if p := opts.PropagationPolicy; p != nil {
		switch *p {
		case metav1.DeletePropagationOrphan, metav1.DeletePropagationForeground, metav1.DeletePropagationBackground:
		default:
			return false, apierrors.NewBadRequest(fmt.Sprintf(
				"invalid propagationPolicy %q: supported values are Orphan, Background and Foreground", *p))
		}
	}
	return parseDryRun(opts.DryRun)
}

// deleteNamespace marks the namespace Terminating, deletes every object in it
// and then the namespace itself.
func (s *Server) deleteNamespace(ctx context.Context, c call, opts *metav1.DeleteOptions, dryRun bool) (resources.Object, error) {
	if immortalNamespace(c.name) {
		return nil, apierrors.NewForbidden(resources.Namespaces.GroupResource(), c.name,
			fmt.Errorf("this namespace may not be deleted"))
	}
	cur, err := s.store.Get(ctx, resources.Namespaces, "", c.name)
	if err != nil {
		return nil, err
	}
	if err := checkPreconditions(resources.Namespaces, cur, opts.Preconditions); err != nil {
		return nil, err
	}
	if dryRun {
		return withTypeMeta(resources.Namespaces, cur), nil
	}
	_, err = s.store.GuaranteedUpdate(ctx, resources.Namespaces, "", c.name, func(cur resources.Object) (resources.Object, error) {
		ns := cur.(*corev1.Namespace)
		if ns.DeletionTimestamp == nil {
			t := metav1.NewTime(s.now().Truncate(time.Second))
			ns.DeletionTimestamp = &t
		}
		ns.Status.Phase = corev1.NamespaceTerminating
		return ns, nil
	})
	if err != nil {
		return nil, err
	}
	for _, r := range resources.All() {
		if !r.Namespaced {
			continue
		}
		items, _, err := s.store.List(ctx, r, c.name, store.Selector{})
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			if _, err := s.store.Delete(ctx, r, c.name, it.GetName(), nil); err != nil && !store.IsNotFound(err) {
				return nil, err
			}
		}
	}
	out, err := s.store.Delete(ctx, resources.Namespaces, "", c.name, nil)
	if err != nil {
		return nil, err
	}
	return withTypeMeta(resources.Namespaces, out), nil
}

// deleteCollection deletes every object matching sel, one by one, and returns
// the deleted (or marked) objects.
func (s *Server) deleteCollection(ctx context.Context, c call, sel store.Selector, opts *metav1.DeleteOptions) ([]resources.Object, int64, error) {
	if err := s.authorize(ctx, c, "deletecollection"); err != nil {
		return nil, 0, err
	}
	if _, err := validateDeleteOptions(opts); err != nil {
		return nil, 0, err
	}
	items, rv, err := s.store.List(ctx, c.r, c.namespace, sel)
	if err != nil {
		return nil, 0, err
	}
	out := make([]resources.Object, 0, len(items))
	for _, it := range items {
		ic := c
		ic.namespace, ic.name = it.GetNamespace(), it.GetName()
		obj, err := s.deleteOne(ctx, ic, opts)
		if store.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		out = append(out, obj)
	}
	return out, rv, nil
}

// deleteOptions reads DeleteOptions from the body (JSON or YAML) and the
// query (gracePeriodSeconds, propagationPolicy, orphanDependents, dryRun).
func (s *Server) deleteOptions(w http.ResponseWriter, req *http.Request) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	body, err := s.readBody(w, req)
	if err != nil {
		return nil, err
	}
	switch {
	case strings.HasPrefix(req.Header.Get("Content-Type"), protobufContentType):
		// kubectl's typed clients (drain) send the body as protobuf.
		if opts, err = decodeProtobufDeleteOptions(body); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding DeleteOptions: %v", err))
		}
	case len(bytes.TrimSpace(body)) > 0:
		if err := yaml.Unmarshal(body, opts); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("decoding DeleteOptions: %v", err))
		}
	}
	q := req.URL.Query()
	if v := q.Get("gracePeriodSeconds"); v != "" {
		g, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid gracePeriodSeconds %q: want an integer", v))
		}
		opts.GracePeriodSeconds = &g
	}
	if v := q.Get("propagationPolicy"); v != "" {
		p := metav1.DeletionPropagation(v)
		opts.PropagationPolicy = &p
	}
	if v := q.Get("orphanDependents"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid orphanDependents %q: want true or false", v))
		}
		opts.OrphanDependents = &b
	}
	opts.DryRun = append(opts.DryRun, q["dryRun"]...)
	return opts, nil
}

// protobufContentType is Kubernetes' protobuf encoding, which typed
// clients may use for request bodies.
const protobufContentType = "application/vnd.kubernetes.protobuf"

// decodeProtobufDeleteOptions decodes a protobuf-encoded DeleteOptions: the
// "k8s\x00" magic, then a runtime.Unknown whose raw bytes are the object.
func decodeProtobufDeleteOptions(body []byte) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	if len(body) == 0 {
		return opts, nil
	}
	magic := []byte("k8s\x00")
	if !bytes.HasPrefix(body, magic) {
		return nil, errors.New("protobuf body without the k8s magic prefix")
	}
	var u runtime.Unknown
	if err := u.Unmarshal(body[len(magic):]); err != nil {
		return nil, fmt.Errorf("protobuf envelope: %w", err)
	}
	if err := opts.Unmarshal(u.Raw); err != nil {
		return nil, fmt.Errorf("protobuf DeleteOptions: %w", err)
	}
	return opts, nil
}

func (s *Server) serveDelete(w http.ResponseWriter, req *http.Request, c call) error {
	opts, err := s.deleteOptions(w, req)
	if err != nil {
		return err
	}
	out, err := s.deleteObject(req.Context(), c, opts)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) serveDeleteCollection(w http.ResponseWriter, req *http.Request, c call) error {
	opts, err := s.deleteOptions(w, req)
	if err != nil {
		return err
	}
	q := req.URL.Query()
	sel, err := parseSelector(c.r, q.Get("labelSelector"), q.Get("fieldSelector"))
	if err != nil {
		return err
	}
	items, rv, err := s.deleteCollection(req.Context(), c, sel, opts)
	if err != nil {
		return err
	}
	list, err := listObject(c.r, items, rv)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}
