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
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/everynode/everynode/apiserver/strategy"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// generateNameSuffix is the length of the random suffix added to generateName.
const generateNameSuffix = 5

// maxGenerateNameTries bounds retries when a generated name is taken.
const maxGenerateNameTries = 5

// createObject admits, defaults, validates and stores a new object. obj is
// owned by the call and may be modified.
func (s *Server) createObject(ctx context.Context, c call, obj resources.Object, dryRun bool) (resources.Object, error) {
	r := c.r
	if r.Namespaced {
		switch ns := obj.GetNamespace(); {
		case ns == "":
			obj.SetNamespace(c.namespace)
		case ns != c.namespace:
			return nil, apierrors.NewBadRequest(fmt.Sprintf(
				"the namespace of the provided object (%s) does not match the namespace sent on the request (%s)", ns, c.namespace))
		}
	} else {
		obj.SetNamespace("")
	}
	generated := obj.GetName() == "" && obj.GetGenerateName() != ""
	if generated {
		obj.SetName(generateName(obj.GetGenerateName()))
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
	r.SetTypeMeta(obj)
	sent := obj.GetManagedFields()
	strategy.Default(r, obj)
	strategy.PrepareForCreate(r, obj, s.now(), s.newUID)
	if errs := strategy.ValidateCreate(r, obj); len(errs) > 0 {
		return nil, strategy.InvalidError(r, obj.GetName(), errs)
	}
	obj = s.fields.track(c, nil, obj, sent)
	r.SetTypeMeta(obj)
	if dryRun {
		return obj, nil
	}
	for try := 1; ; try++ {
		out, err := s.store.Create(ctx, r, obj)
		if err == nil {
			return withTypeMeta(r, out), nil
		}
		if !generated || !store.IsAlreadyExists(err) || try == maxGenerateNameTries {
			return nil, err
		}
		obj.SetName(generateName(obj.GetGenerateName()))
	}
}

// generateName appends a random suffix to a generateName prefix, trimming the
// prefix so the name stays a valid 63-character label.
func generateName(prefix string) string {
	const maxLen = 63
	if len(prefix) > maxLen-generateNameSuffix {
		prefix = prefix[:maxLen-generateNameSuffix]
	}
	return prefix + utilrand.String(generateNameSuffix)
}

// admitNamespace is NamespaceLifecycle for creates: the namespace must exist
// and must not be terminating.
func (s *Server) admitNamespace(ctx context.Context, namespace string) error {
	obj, err := s.store.Get(ctx, resources.Namespaces, "", namespace)
	if store.IsNotFound(err) {
		return apierrors.NewNotFound(resources.Namespaces.GroupResource(), namespace)
	}
	if err != nil {
		return err
	}
	if ns, ok := obj.(*corev1.Namespace); ok && (ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating) {
		return apierrors.NewForbidden(resources.Namespaces.GroupResource(), namespace,
			fmt.Errorf("unable to create new content in namespace %s because it is being terminated", namespace))
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
	if obj.GetName() != c.name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf(
			"the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), c.name))
	}
	if err := checkNamespace(c, obj); err != nil {
		return nil, err
	}
	c.object = obj
	if err := s.authorize(ctx, c, "update"); err != nil {
		return nil, err
	}
	mutate := func(cur resources.Object) (resources.Object, error) {
		if rv := obj.GetResourceVersion(); rv != "" && rv != cur.GetResourceVersion() {
			return nil, conflictError(c.r.GroupResource(), c.name)
		}
		next := obj.DeepCopyObject().(resources.Object)
		next.SetResourceVersion(cur.GetResourceVersion())
		return s.prepareUpdate(c, next, cur)
	}
	return s.applyUpdate(ctx, c, "update", mutate, dryRun)
}

// checkNamespace fills an empty namespace from the request and rejects a
// different one; cluster-scoped objects have none.
func checkNamespace(c call, obj resources.Object) error {
	if !c.r.Namespaced {
		obj.SetNamespace("")
		return nil
	}
	switch ns := obj.GetNamespace(); {
	case ns == "":
		obj.SetNamespace(c.namespace)
	case ns != c.namespace:
		return apierrors.NewBadRequest(fmt.Sprintf(
			"the namespace of the object (%s) does not match the namespace on the request (%s)", ns, c.namespace))
	}
	return nil
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
		if next.GetName() != c.name {
			return nil, apierrors.NewBadRequest(fmt.Sprintf(
				"the name of the object (%s) does not match the name on the URL (%s)", next.GetName(), c.name))
		}
		if err := checkNamespace(c, next); err != nil {
			return nil, err
		}
		if rv := next.GetResourceVersion(); rv != "" && rv != cur.GetResourceVersion() {
			return nil, conflictError(c.r.GroupResource(), c.name)
		}
		next.SetResourceVersion(cur.GetResourceVersion())
		return s.prepareUpdate(c, next, cur)
	}
	return s.applyUpdate(ctx, c, "patch", mutate, dryRun)
}

// prepareUpdate defaults, prepares and validates next against cur.
func (s *Server) prepareUpdate(c call, next, cur resources.Object) (resources.Object, error) {
	r := c.r
	r.SetTypeMeta(next)
	sent := next.GetManagedFields()
	strategy.Default(r, next)
	if c.sub == "status" {
		strategy.PrepareForStatusUpdate(r, next, cur)
	} else {
		strategy.PrepareForUpdate(r, next, cur)
	}
	if errs := strategy.ValidateUpdate(r, next, cur); len(errs) > 0 {
		return nil, strategy.InvalidError(r, next.GetName(), errs)
	}
	next = s.fields.track(c, cur, next, sent)
	r.SetTypeMeta(next)
	return next, nil
}

// applyUpdate runs mutate against the stored object with optimistic
// concurrency, or once against a copy for a dry run, each time after the
// authorizer admitted verb (update or patch) against that object. An update
// that leaves an object being deleted without finalizers removes it.
func (s *Server) applyUpdate(ctx context.Context, c call, verb string, mutateAdmitted func(cur resources.Object) (resources.Object, error), dryRun bool) (resources.Object, error) {
	r := c.r
	mutate := func(cur resources.Object) (resources.Object, error) {
		if err := s.admitUpdate(ctx, c, verb, cur); err != nil {
			return nil, err
		}
		return mutateAdmitted(cur)
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
	if finishedDeleting(out) {
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

// finishedDeleting reports whether an object marked for deletion has nothing
// left to wait for: no finalizers and no grace period running.
func finishedDeleting(obj resources.Object) bool {
	if obj.GetDeletionTimestamp() == nil || len(obj.GetFinalizers()) > 0 {
		return false
	}
	g := obj.GetDeletionGracePeriodSeconds()
	return g == nil || *g == 0
}

// bodyMediaType returns the request body's media type, defaulting to JSON,
// or a 415 for types the server does not decode.
func bodyMediaType(req *http.Request) (string, error) {
	ct := req.Header.Get("Content-Type")
	if ct == "" {
		return "application/json", nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", unsupportedMediaType(ct, "application/json, application/yaml")
	}
	switch mt {
	case "application/json":
		return mt, nil
	case "application/yaml", "application/x-yaml", "text/yaml":
		return "application/yaml", nil
	}
	return "", unsupportedMediaType(ct, "application/json, application/yaml")
}

func unsupportedMediaType(ct, accepted string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType,
		Reason:  metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("the body of the request was in an unknown format (%q) - accepted media types include: %s", ct, accepted),
	}}
}

// readBody reads the request body, refusing more than the server's limit.
func (s *Server) readBody(w http.ResponseWriter, req *http.Request) ([]byte, error) {
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

// decodeBody reads and decodes an object body with the request's
// fieldValidation: Strict fails on unknown or duplicate fields, Warn (the
// default) accepts them with a Warning header, Ignore accepts them silently.
func (s *Server) decodeBody(w http.ResponseWriter, req *http.Request, r *resources.Resource) (resources.Object, error) {
	mt, err := bodyMediaType(req)
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
	return parseDryRun(q["dryRun"])
}

func parseDryRun(values []string) (bool, error) {
	dry := false
	for _, v := range values {
		if v != metav1.DryRunAll {
			return false, apierrors.NewBadRequest(fmt.Sprintf("invalid dryRun value %q: the only supported value is All", v))
		}
		dry = true
	}
	return dry, nil
}

func (s *Server) serveCreate(w http.ResponseWriter, req *http.Request, c call) error {
	dry, err := dryRunParam(req.URL.Query())
	if err != nil {
		return err
	}
	obj, err := s.decodeBody(w, req, c.r)
	if err != nil {
		return err
	}
	out, err := s.createObject(req.Context(), c, obj, dry)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) serveUpdate(w http.ResponseWriter, req *http.Request, c call) error {
	dry, err := dryRunParam(req.URL.Query())
	if err != nil {
		return err
	}
	obj, err := s.decodeBody(w, req, c.r)
	if err != nil {
		return err
	}
	out, err := s.updateObject(req.Context(), c, obj, dry)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
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
	return "", unsupportedMediaType(ct, strings.Join([]string{
		string(types.JSONPatchType), string(types.MergePatchType), string(types.StrategicMergePatchType)}, ", "))
}

func (s *Server) servePatch(w http.ResponseWriter, req *http.Request, c call) error {
	if mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); mt == string(types.ApplyYAMLPatchType) && c.sub == "" {
		return s.serveApply(w, req, c)
	}
	pt, err := patchType(req.Header.Get("Content-Type"))
	if err != nil {
		return err
	}
	dry, strict, body, err := s.patchParams(w, req)
	if err != nil {
		return err
	}
	out, err := s.patchObject(req.Context(), c, pt, body, strict, dry)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
