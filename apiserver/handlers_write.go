package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/apiserver/strategy"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// maxGenerateNameTries bounds retries when a generated name is taken.
const maxGenerateNameTries = 5

// createObject admits, defaults, validates and stores a new object. obj is
// owned by the call and may be modified.
func (s *Server) createObject(ctx context.Context, c call, obj resources.Object, dryRun bool) (resources.Object, error) {
	r := c.r
	generated, err := strategy.CreateKey(r, c.namespace, obj)
	if err != nil {
		return nil, err
	}
	c.name = obj.GetName()
	c.object = obj
	if err := s.authorize(ctx, c, "create"); err != nil {
		return nil, err
	}
	if r.Namespaced {
		if err := s.admitNamespace(ctx, c.namespace); err != nil {
			return nil, err
		}
	}
	obj, err = s.writer.Create(c.op(), obj)
	if err != nil {
		return nil, err
	}
	if err := s.admitObject(ctx, c, obj); err != nil {
		return nil, err
	}
	if err := s.admitPodPriority(ctx, obj); err != nil {
		return nil, err
	}
	if err := s.admitRBACWrite(ctx, c, obj, nil); err != nil {
		return nil, err
	}
	if err := s.allocateService(ctx, obj, nil, dryRun); err != nil {
		return nil, err
	}
	if dryRun {
		return s.dryRunCreate(ctx, r, obj, generated)
	}
	for try := 1; ; try++ {
		out, err := s.store.Create(ctx, r, obj)
		if err == nil {
			noteCreated(ctx, out.GetName())
			return withTypeMeta(r, out), nil
		}
		if !generated || !store.IsAlreadyExists(err) || try == maxGenerateNameTries {
			return nil, err
		}
		obj.SetName(strategy.GenerateName(obj))
	}
}

// dryRunCreate answers a dry-run create of obj, which passed every check
// a create makes, as the write would — a name that is taken is a 409
// AlreadyExists (a generated one is made again, as a create retries) — and
// stores nothing, as kube-apiserver's dry-run storage does.
func (s *Server) dryRunCreate(ctx context.Context, r *resources.Resource, obj resources.Object, generated bool) (resources.Object, error) {
	for try := 1; ; try++ {
		_, err := s.store.Get(ctx, r, obj.GetNamespace(), obj.GetName())
		switch {
		case store.IsNotFound(err):
			return withTypeMeta(r, obj), nil
		case err != nil:
			return nil, err
		case !generated || try == maxGenerateNameTries:
			return nil, apierrors.NewAlreadyExists(r.GroupResource(), obj.GetName())
		}
		obj.SetName(strategy.GenerateName(obj))
	}
}

// admitNamespace is NamespaceLifecycle for creates: the namespace must exist
// and must not be terminating. The watch cache answers when it holds the
// namespace active: it reflects every namespace write this server made,
// and may miss only another server's last milliseconds, as Kubernetes'
// NamespaceLifecycle, which reads an informer cache, may. Anything else is
// checked against etcd. (A create would otherwise wait for a linearizable
// etcd read behind every write in etcd's queue: one more round trip per
// pod and per Event.)
func (s *Server) admitNamespace(ctx context.Context, namespace string) error {
	if obj, err := s.store.GetCached(ctx, resources.Namespaces, "", namespace); err == nil {
		if ns, ok := obj.(*corev1.Namespace); ok && ns.DeletionTimestamp == nil && ns.Status.Phase != corev1.NamespaceTerminating {
			return nil
		}
	}
	obj, err := s.store.Get(ctx, resources.Namespaces, "", namespace)
	if store.IsNotFound(err) {
		return apierrors.NewNotFound(resources.Namespaces.GroupResource(), namespace)
	}
	if err != nil {
		return err
	}
	if ns, ok := obj.(*corev1.Namespace); ok && (ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating) {
		err := apierrors.NewForbidden(resources.Namespaces.GroupResource(), namespace,
			fmt.Errorf("unable to create new content in namespace %s because it is being terminated", namespace))
		// As NamespaceLifecycle admission: the cause tells controllers to give up.
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type: corev1.NamespaceTerminatingCause, Field: "metadata.namespace",
			Message: fmt.Sprintf("namespace %s is being terminated", namespace),
		})
		return err
	}
	return nil
}

// missingNamespace turns a NotFound for an object into a NotFound for its
// namespace when the namespace itself does not exist.
func (s *Server) missingNamespace(ctx context.Context, c call, err error) error {
	if !c.r.Namespaced || !store.IsNotFound(err) {
		return err
	}
	if _, nerr := s.store.Get(ctx, resources.Namespaces, "", c.namespace); store.IsNotFound(nerr) {
		return apierrors.NewNotFound(resources.Namespaces.GroupResource(), c.namespace)
	}
	return err
}

// updateObject replaces an object (or its status when c.sub is "status").
// A non-empty resourceVersion in obj must match the stored one.
func (s *Server) updateObject(ctx context.Context, c call, obj resources.Object, dryRun bool) (resources.Object, error) {
	if err := strategy.CheckKey(c.r, c.namespace, c.name, obj); err != nil {
		return nil, err
	}
	c.object = obj
	if err := s.authorize(ctx, c, "update"); err != nil {
		return nil, err
	}
	mutate := func(cur resources.Object) (resources.Object, error) {
		next := obj.DeepCopyObject().(resources.Object)
		if err := strategy.CheckUIDPrecondition(c.r, next, cur); err != nil {
			return nil, err
		}
		if err := strategy.CheckResourceVersion(c.r, next, cur); err != nil {
			return nil, err
		}
		return s.writer.Update(c.op(), next, cur)
	}
	return s.applyUpdate(ctx, c, "update", mutate, dryRun)
}

// patchObject applies a patch to the stored object (or its status). strict
// (fieldValidation=Strict) rejects unknown fields in the patched object.
func (s *Server) patchObject(ctx context.Context, c call, pt types.PatchType, data []byte, strict, dryRun bool) (resources.Object, error) {
	if err := s.authorize(ctx, c, "patch"); err != nil {
		return nil, err
	}
	mutate := func(cur resources.Object) (resources.Object, error) {
		apply := strategy.ApplyPatch
		if strict {
			apply = strategy.ApplyPatchStrict
		}
		next, err := apply(c.r, cur, pt, data)
		if err != nil {
			return nil, err
		}
		if err := strategy.CheckKey(c.r, c.namespace, c.name, next); err != nil {
			return nil, err
		}
		if err := strategy.CheckResourceVersion(c.r, next, cur); err != nil {
			return nil, err
		}
		return s.writer.Update(c.op(), next, cur)
	}
	return s.applyUpdate(ctx, c, "patch", mutate, dryRun)
}

// applyUpdate runs mutate against the stored object with optimistic
// concurrency, or once against a copy for a dry run, each time after the
// authorizer admitted verb (update or patch) against that object, and
// admits the result again before it is written. An update
// that leaves an object being deleted without finalizers removes it.
func (s *Server) applyUpdate(ctx context.Context, c call, verb string, mutateAdmitted func(cur resources.Object) (resources.Object, error), dryRun bool) (resources.Object, error) {
	r := c.r
	mutate := func(cur resources.Object) (resources.Object, error) {
		if err := s.admitUpdate(ctx, c, verb, cur, nil); err != nil {
			return nil, err
		}
		next, err := mutateAdmitted(cur)
		if err != nil {
			return nil, err
		}
		if err := s.admitUpdate(ctx, c, verb, cur, next); err != nil {
			return nil, err
		}
		if err := s.admitRBACWrite(ctx, c, next, cur); err != nil {
			return nil, err
		}
		if err := s.admitObject(ctx, c, next); err != nil {
			return nil, err
		}
		return next, s.allocateService(ctx, next, cur, dryRun)
	}
	if dryRun {
		cur, err := s.store.Get(ctx, r, c.namespace, c.name)
		if err != nil {
			return nil, s.missingNamespace(ctx, c, err)
		}
		return mutate(cur.DeepCopyObject().(resources.Object))
	}
	out, err := s.store.GuaranteedUpdate(ctx, r, c.namespace, c.name, mutate)
	if err != nil {
		return nil, s.missingNamespace(ctx, c, err)
	}
	if strategy.FinishedDeleting(out) {
		pre := &store.Preconditions{UID: string(out.GetUID()), ResourceVersion: out.GetResourceVersion()}
		deleted, derr := s.store.Delete(ctx, r, c.namespace, c.name, pre)
		switch {
		case derr == nil:
			return withTypeMeta(r, deleted), nil
		case store.IsNotFound(derr) || store.IsConflict(derr):
			// Someone else deleted or changed it; that write decides.
		default:
			return nil, derr
		}
	}
	return withTypeMeta(r, out), nil
}

// readBody reads the request body, refusing more than the server's limit.
func (s *Server) readBody(w http.ResponseWriter, req *http.Request) ([]byte, error) {
	if req.ContentLength > s.maxBody {
		// Refused unread; the connection closes, so the rest need not be read.
		closeConnection(w)
		return nil, &http.MaxBytesError{Limit: s.maxBody}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, s.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, err
		}
		return nil, apierrors.NewBadRequest(fmt.Sprintf("reading the request body: %v", err))
	}
	return body, nil
}

// decodeBody reads and decodes an object body (JSON, YAML or protobuf) with
// the request's fieldValidation: Strict fails on unknown or duplicate fields,
// Warn (the default) accepts them with a Warning header, Ignore accepts them
// silently.
func (s *Server) decodeBody(w http.ResponseWriter, req *http.Request, r *resources.Resource) (resources.Object, error) {
	mt, err := s.wire.inputMediaType(req)
	if err != nil {
		return nil, err
	}
	validation := req.URL.Query().Get("fieldValidation")
	if _, err := strictParam(req.URL.Query()); err != nil {
		return nil, err
	}
	body, err := s.readBody(w, req)
	if err != nil {
		return nil, err
	}
	if mt == runtime.ContentTypeProtobuf {
		// Protobuf has no strict decoding: unknown fields are dropped
		// without a warning, whatever fieldValidation says (as upstream).
		return s.wire.decodeProtobuf(r, body)
	}
	if validation == "Ignore" {
		return strategy.Decode(r, mt, body, false)
	}
	obj, strictErr := strategy.Decode(r, mt, body, true)
	if strictErr == nil || validation == "Strict" {
		return obj, strictErr
	}
	obj, err = strategy.Decode(r, mt, body, false)
	if err != nil {
		return nil, err
	}
	addWarning(w, strictMessage(strictErr))
	return obj, nil
}

// strictMessage is the human part of a strict-decoding error.
func strictMessage(err error) string {
	var se *apierrors.StatusError
	if errors.As(err, &se) {
		return se.ErrStatus.Message
	}
	return err.Error()
}

// addWarning adds a Kubernetes "Warning: 299 - ..." response header.
func addWarning(w http.ResponseWriter, msg string) {
	w.Header().Add("Warning", "299 - "+strconv.Quote(msg))
}

// strictParam reads fieldValidation: true for Strict; Warn, Ignore and ""
// are accepted, anything else is a 400.
func strictParam(q url.Values) (bool, error) {
	switch v := q.Get("fieldValidation"); v {
	case "", "Warn", "Ignore":
		return false, nil
	case "Strict":
		return true, nil
	default:
		return false, apierrors.NewBadRequest(fmt.Sprintf(
			"invalid fieldValidation %q: supported values are Ignore, Warn and Strict", v))
	}
}

// patchParams reads what every patch (apply included) takes: the dryRun and
// fieldValidation query parameters and the body.
func (s *Server) patchParams(w http.ResponseWriter, req *http.Request) (dry, strict bool, body []byte, err error) {
	q := req.URL.Query()
	if dry, err = dryRunParam(q); err != nil {
		return false, false, nil, err
	}
	if strict, err = strictParam(q); err != nil {
		return false, false, nil, err
	}
	if body, err = s.readBody(w, req); err != nil {
		return false, false, nil, err
	}
	return dry, strict, body, nil
}

// dryRunParam reads the dryRun query values: "All" is the only one accepted.
func dryRunParam(q url.Values) (bool, error) {
	return strategy.ParseDryRun(q["dryRun"])
}

func (s *Server) serveCreate(w http.ResponseWriter, req *http.Request, c call) error {
	out, err := s.wire.negotiateOutput(req, resourceRestrictions{})
	if err != nil {
		return err
	}
	dry, err := dryRunParam(req.URL.Query())
	if err != nil {
		return err
	}
	obj, err := s.decodeBody(w, req, c.r)
	if err != nil {
		return err
	}
	res, err := s.createObject(req.Context(), c, obj, dry)
	if err != nil {
		return err
	}
	warnStoredOnly(w, c.r)
	return s.respond(w, req, http.StatusCreated, out, c.r, res)
}

func (s *Server) serveUpdate(w http.ResponseWriter, req *http.Request, c call) error {
	out, err := s.wire.negotiateOutput(req, resourceRestrictions{})
	if err != nil {
		return err
	}
	dry, err := dryRunParam(req.URL.Query())
	if err != nil {
		return err
	}
	obj, err := s.decodeBody(w, req, c.r)
	if err != nil {
		return err
	}
	res, err := s.updateObject(req.Context(), c, obj, dry)
	if err != nil {
		return err
	}
	warnStoredOnly(w, c.r)
	return s.respond(w, req, http.StatusOK, out, c.r, res)
}

// patchTypes maps the accepted patch media types.
func patchType(ct string) (types.PatchType, error) {
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil {
		switch pt := types.PatchType(mt); pt {
		case types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType:
			return pt, nil
		}
	}
	return "", unsupportedMediaType(patchMediaTypes)
}

// patchMediaTypes are the patch bodies accepted, in kube-apiserver's order
// (k8s.io/apiserver pkg/endpoints/installer.go).
var patchMediaTypes = []string{string(types.JSONPatchType), string(types.MergePatchType),
	string(types.StrategicMergePatchType), string(types.ApplyYAMLPatchType)}

func (s *Server) servePatch(w http.ResponseWriter, req *http.Request, c call) error {
	out, err := s.wire.negotiateOutput(req, resourceRestrictions{})
	if err != nil {
		return err
	}
	if mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); mt == string(types.ApplyYAMLPatchType) && c.sub == "" {
		return s.serveApply(w, req, c, out)
	}
	pt, err := patchType(req.Header.Get("Content-Type"))
	if err != nil {
		return err
	}
	dry, strict, body, err := s.patchParams(w, req)
	if err != nil {
		return err
	}
	res, err := s.patchObject(req.Context(), c, pt, body, strict, dry)
	if err != nil {
		return err
	}
	warnStoredOnly(w, c.r)
	return s.respond(w, req, http.StatusOK, out, c.r, res)
}
