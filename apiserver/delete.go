package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/everynode/everynode/apiserver/strategy"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// maxDeleteAttempts bounds how often a delete re-decides after a conflict.
const maxDeleteAttempts = 8

// deleteObject deletes one object with Kubernetes semantics (see
// strategy.DeletionPlan). It returns the deleted object, or the marked object still present.
func (s *Server) deleteObject(ctx context.Context, c call, opts *metav1.DeleteOptions) (resources.Object, error) {
	if err := s.authorize(ctx, c, "delete"); err != nil {
		return nil, err
	}
	if _, err := strategy.ValidateDeleteOptions(opts); err != nil {
		return nil, err
	}
	if err := strategy.CheckDeletable(c.r, c.name); err != nil {
		return nil, err
	}
	return s.deleteOne(ctx, c, opts)
}

// deleteOne is deleteObject after authorization.
func (s *Server) deleteOne(ctx context.Context, c call, opts *metav1.DeleteOptions) (resources.Object, error) {
	dryRun, _ := strategy.ParseDryRun(opts.DryRun)
	if c.r == resources.Namespaces {
		return s.deleteNamespace(ctx, c, opts, dryRun)
	}
	r := c.r
	// The first decision may start from the watch cache's copy (see
	// cachedForDelete); a write it leads to is conditional on that version.
	cached := !dryRun && r != resources.Nodes && r != resources.Events // the cache keeps no Events
	for range maxDeleteAttempts {
		var cur resources.Object
		var err error
		if cached {
			cur = s.cachedForDelete(ctx, r, c)
		}
		if cur == nil {
			cached = false
			cur, err = s.store.Get(ctx, r, c.namespace, c.name)
		}
		if store.IsNotFound(err) && !dryRun {
			s.nodeGone(ctx, c)
		}
		if err != nil {
			return nil, s.missingNamespace(ctx, c, err)
		}
		if err := strategy.CheckPreconditions(r, cur, opts.Preconditions); err != nil {
			if cached {
				cached = false // decide on etcd's version
				continue
			}
			return nil, err
		}
		next, remove := strategy.DeletionPlan(r, cur, opts, s.now())
		switch {
		case dryRun && remove:
			return withTypeMeta(r, cur), nil
		case dryRun && next != nil:
			return withTypeMeta(r, next), nil
		case next == nil && !remove && cached:
			cached = false // nothing to write: answer with etcd's version
			continue
		case next == nil && !remove:
			return withTypeMeta(r, cur), nil // already marked as asked
		}
		cached = false // a conflict below decides again on etcd's version
		if remove && !dryRun {
			if err := s.removeServerOfNode(ctx, c, cur); err != nil {
				return nil, err
			}
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
		if remove {
			s.nodeGone(ctx, c)
		}
		return withTypeMeta(r, out), nil
	}
	return nil, strategy.ConflictError(r.GroupResource(), c.name)
}

// cachedForDelete is the watch cache's copy of the object c names (shared
// with the cache: read-only), or nil. kube-apiserver reads etcd before a
// delete; starting from the cache saves that read where the cache is up to
// date, which it is for every write this server made: the deletion's write
// is conditional on the copy's resourceVersion, so an out-of-date copy
// costs a conflict, after which deleteOne decides again on etcd's version,
// as it does when the copy fails the preconditions or needs no write. Nodes
// are always read from etcd (deleting a server's Node removes its etcd
// member first).
func (s *Server) cachedForDelete(ctx context.Context, r *resources.Resource, c call) resources.Object {
	obj, err := s.store.GetCached(ctx, r, c.namespace, c.name)
	if err != nil {
		return nil
	}
	return obj
}

// ServerNodeLabel marks the Node of a server's local agent on an embedded
// etcd cluster; the server sets it (a node may not, NodeRestriction), and
// deleting a Node that carries it removes the server's etcd member of the
// Node's name first (docs/ha.md).
const ServerNodeLabel = "node-role.kubernetes.io/control-plane"

// removeServerOfNode removes the etcd member of a server whose Node is being
// deleted. A refusal (the last server) or a failure keeps the Node; a Node
// whose name is no member is deleted as any.
func (s *Server) removeServerOfNode(ctx context.Context, c call, cur resources.Object) error {
	if c.r != resources.Nodes || s.join == nil || s.join.Servers == nil {
		return nil
	}
	if _, ok := cur.GetLabels()[ServerNodeLabel]; !ok {
		return nil
	}
	err := s.join.Servers.RemoveServer(ctx, c.name)
	switch {
	case err == nil:
		s.log.Info("server removed from the etcd cluster with its node", "server", c.name, "user", c.user.Name)
		return nil
	case apierrors.IsNotFound(err):
		return nil
	}
	return err
}

// nodeGone frees the name of a Node that a delete removed or found missing:
// the next machine to join under it records its own node password
// (docs/security.md §4).
func (s *Server) nodeGone(ctx context.Context, c call) {
	if c.r != resources.Nodes || s.join == nil || s.join.State == nil {
		return
	}
	if err := s.join.State.ForgetNode(ctx, c.name); err != nil {
		s.log.Warn("node deleted but its node password kept; delete the node again to free its name", "node", c.name, "err", err)
		return
	}
	s.log.Info("node name freed", "node", c.name, "user", c.user.Name)
}

// deleteNamespace marks the namespace Terminating, deletes every object in it
// and then the namespace itself.
func (s *Server) deleteNamespace(ctx context.Context, c call, opts *metav1.DeleteOptions, dryRun bool) (resources.Object, error) {
	if strategy.ImmortalNamespace(c.name) {
		return nil, apierrors.NewForbidden(resources.Namespaces.GroupResource(), c.name,
			fmt.Errorf("this namespace may not be deleted"))
	}
	cur, err := s.store.Get(ctx, resources.Namespaces, "", c.name)
	if err != nil {
		return nil, err
	}
	if err := strategy.CheckPreconditions(resources.Namespaces, cur, opts.Preconditions); err != nil {
		return nil, err
	}
	if dryRun {
		// What the write would answer: the namespace marked Terminating.
		return withTypeMeta(resources.Namespaces, s.markTerminating(cur.DeepCopyObject().(resources.Object))), nil
	}
	_, err = s.store.GuaranteedUpdate(ctx, resources.Namespaces, "", c.name, func(cur resources.Object) (resources.Object, error) {
		return s.markTerminating(cur), nil
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

// markTerminating marks a namespace (owned by the caller) as being deleted.
func (s *Server) markTerminating(obj resources.Object) resources.Object {
	ns := obj.(*corev1.Namespace)
	if ns.DeletionTimestamp == nil {
		t := metav1.NewTime(s.now().Truncate(time.Second))
		ns.DeletionTimestamp = &t
	}
	ns.Status.Phase = corev1.NamespaceTerminating
	return ns
}

// deleteCollection deletes every object matching sel, one by one, and returns
// the deleted (or marked) objects.
func (s *Server) deleteCollection(ctx context.Context, c call, sel store.Selector, opts *metav1.DeleteOptions) ([]resources.Object, int64, error) {
	c.fields = sel.Field
	if err := s.authorize(ctx, c, "deletecollection"); err != nil {
		return nil, 0, err
	}
	if _, err := strategy.ValidateDeleteOptions(opts); err != nil {
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
	mt := runtime.ContentTypeJSON
	if len(body) > 0 {
		if mt, err = s.wire.inputMediaType(req); err != nil {
			return nil, err
		}
	}
	switch {
	case mt == runtime.ContentTypeProtobuf:
		// kubectl's typed clients (drain) send the body as protobuf.
		if opts, err = s.wire.decodeProtobufDeleteOptions(body); err != nil {
			return nil, err
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

func (s *Server) serveDelete(w http.ResponseWriter, req *http.Request, c call) error {
	out, err := s.wire.negotiateOutput(req, resourceRestrictions{})
	if err != nil {
		return err
	}
	opts, err := s.deleteOptions(w, req)
	if err != nil {
		return err
	}
	res, err := s.deleteObject(req.Context(), c, opts)
	if err != nil {
		return err
	}
	return s.respond(w, req, http.StatusOK, out, c.r, res)
}

func (s *Server) serveDeleteCollection(w http.ResponseWriter, req *http.Request, c call) error {
	out, err := s.wire.negotiateOutput(req, resourceRestrictions{})
	if err != nil {
		return err
	}
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
	return s.respondList(w, req, out, c.r, items, rv)
}
