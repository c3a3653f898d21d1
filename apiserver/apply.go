package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/yaml"

	"github.com/everynode/everynode/apiserver/strategy"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// maxManagerLength bounds a field manager name, as Kubernetes does.
const maxManagerLength = 128

// fieldManagers does server-side apply and managedFields bookkeeping with
// apimachinery's managedfields package, one FieldManager per served kind. Its
// type converter comes from the OpenAPI schemas generated from the Go types
// (openapi_schema.go), so list merge semantics follow the patchMergeKey tags:
// lists with a merge key are maps keyed by it, others are atomic.
//
// Differences from Kubernetes: writes to the status subresource leave
// managedFields as they are (no per-subresource managers), and the status of
// a main-resource apply is neither applied nor owned.
type fieldManagers struct {
	byGVK map[schema.GroupVersionKind]*managedfields.FieldManager
}

func newFieldManagers(schemas map[string]*spec.Schema) (*fieldManagers, error) {
	tc, err := managedfields.NewTypeConverter(schemas, false)
	if err != nil {
		return nil, fmt.Errorf("apiserver: type converter: %w", err)
	}
	sch := runtime.NewScheme()
	if err := corev1.AddToScheme(sch); err != nil {
		return nil, err
	}
	if err := appsv1.AddToScheme(sch); err != nil {
		return nil, err
	}
	fm := &fieldManagers{byGVK: map[schema.GroupVersionKind]*managedfields.FieldManager{}}
	for _, r := range resources.All() {
		gv := r.GroupVersion()
		reset := map[fieldpath.APIVersion]fieldpath.Filter{
			fieldpath.APIVersion(gv.String()): fieldpath.NewExcludeSetFilter(fieldpath.NewSet(fieldpath.MakePathOrDie("status"))),
		}
		m, err := managedfields.NewDefaultFieldManager(tc, sch, sch, sch, r.GVK(), gv, "", reset)
		if err != nil {
			return nil, fmt.Errorf("apiserver: field manager for %s: %w", r.Kind, err)
		}
		fm.byGVK[r.GVK()] = m
	}
	return fm, nil
}

// track records a non-apply write of next (over live, nil on create) by
// c's manager in next's managedFields. sent are the managedFields the client
// sent (the strategy clears them): Kubernetes keeps the live ones when they
// are empty and takes them as given when they differ.
func (f *fieldManagers) track(c call, live, next resources.Object, sent []metav1.ManagedFieldsEntry) resources.Object {
	if c.sub != "" {
		return next
	}
	next.SetManagedFields(sent)
	if c.applying {
		return next // the field manager's Apply computed them
	}
	m := f.byGVK[c.r.GVK()]
	if m == nil {
		return next
	}
	if live == nil {
		live = c.r.New()
		c.r.SetTypeMeta(live)
	}
	manager := c.manager
	if manager == "" {
		manager = c.user.Name
	}
	out, ok := m.UpdateNoErrors(live, next, manager).(resources.Object)
	if !ok {
		return next
	}
	return out
}

// managerFromRequest is the fieldManager parameter, else the User-Agent's
// product name ("kubectl" for "kubectl/v1.32.4 (linux/amd64)"), as Kubernetes
// names managers of requests without one.
func managerFromRequest(req *http.Request) string {
	if m := req.URL.Query().Get("fieldManager"); m != "" {
		return m
	}
	ua, _, _ := strings.Cut(req.UserAgent(), "/")
	if len(ua) > maxManagerLength {
		ua = ua[:maxManagerLength]
	}
	return ua
}

// serveApply serves PATCH with application/apply-patch+yaml: the body is the
// applier's whole intent. A missing object is created (201); otherwise the
// applied fields are merged into the live object, owned by the field manager,
// and fields another manager owns with a different value are conflicts (409)
// unless force=true.
func (s *Server) serveApply(w http.ResponseWriter, req *http.Request, c call) error {
	dry, strict, body, err := s.patchParams(w, req)
	if err != nil {
		return err
	}
	q := req.URL.Query()
	out, created, err := s.applyBody(req.Context(), c, body, q.Get("fieldManager"), queryBool(q, "force"), strict, dry)
	if err != nil {
		return err
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	writeJSON(w, code, out)
	return nil
}

// applyBody authorizes and runs one server-side apply of body by manager.
func (s *Server) applyBody(ctx context.Context, c call, body []byte, manager string, force, strict, dry bool) (resources.Object, bool, error) {
	if manager == "" {
		return nil, false, apierrors.NewBadRequest("PATCH requests with the apply content type must specify fieldManager")
	}
	if len(manager) > maxManagerLength {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("fieldManager is longer than %d characters", maxManagerLength))
	}
	applied, err := s.decodeApplied(c, body, strict)
	if err != nil {
		return nil, false, err
	}
	if err := s.authorize(ctx, c, "patch"); err != nil {
		return nil, false, err
	}
	return s.applyObject(ctx, c, applied, manager, force, dry)
}

// decodeApplied parses an apply body (YAML or JSON) into the unstructured
// object the field manager merges: only the fields the applier sent. strict
// also rejects unknown and duplicate fields, like a Strict create.
func (s *Server) decodeApplied(c call, body []byte, strict bool) (*unstructured.Unstructured, error) {
	typed, err := strategy.Decode(c.r, "application/apply-patch+yaml", body, strict)
	if err != nil {
		return nil, err
	}
	js, err := yaml.YAMLToJSON(body)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error converting YAML to JSON: %v", err))
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(js, &u.Object); err != nil || u.Object == nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the apply body is not an object: %v", err))
	}
	if gvk := u.GroupVersionKind(); gvk != c.r.GVK() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the apply body's apiVersion/kind %s does not match the URL's %s", gvk, c.r.GVK()))
	}
	if typed.GetName() != c.name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf(
			"the name of the object (%s) does not match the name on the URL (%s)", typed.GetName(), c.name))
	}
	if err := checkNamespace(c, typed); err != nil {
		return nil, err
	}
	if c.r.Namespaced {
		u.SetNamespace(c.namespace)
	}
	if u.GetManagedFields() != nil {
		return nil, apierrors.NewBadRequest("metadata.managedFields must be nil")
	}
	return u, nil
}

// applyObject creates or merges the applied object; created reports a create.
func (s *Server) applyObject(ctx context.Context, c call, applied *unstructured.Unstructured, manager string, force, dry bool) (resources.Object, bool, error) {
	m := s.fields.byGVK[c.r.GVK()]
	if m == nil {
		return nil, false, apierrors.NewMethodNotSupported(c.r.GroupResource(), "apply")
	}
	c.applying = true
	apply := func(live resources.Object) (resources.Object, error) {
		obj, err := m.Apply(live, applied.DeepCopy(), manager, force)
		if err != nil {
			if _, ok := err.(apierrors.APIStatus); ok {
				return nil, err // the 409 of a conflict
			}
			return nil, apierrors.NewBadRequest(err.Error())
		}
		return toTyped(c.r, obj)
	}
	_, err := s.store.Get(ctx, c.r, c.namespace, c.name)
	if store.IsNotFound(err) {
		empty := c.r.New()
		c.r.SetTypeMeta(empty)
		obj, err := apply(empty)
		if err != nil {
			return nil, false, err
		}
		out, err := s.createObject(ctx, c, obj, dry)
		if err == nil || !apierrors.IsAlreadyExists(s.statusError(err)) {
			return out, err == nil, err
		}
		// Created meanwhile: merge into it below.
	} else if err != nil {
		return nil, false, s.missingNamespace(ctx, c, err)
	}
	mutate := func(cur resources.Object) (resources.Object, error) {
		next, err := apply(cur)
		if err != nil {
			return nil, err
		}
		next.SetResourceVersion(cur.GetResourceVersion())
		return s.prepareUpdate(c, next, cur)
	}
	out, err := s.applyUpdate(ctx, c, "patch", mutate, dry)
	return out, false, err
}

// toTyped converts the field manager's result to the resource's Go type.
func toTyped(r *resources.Resource, obj runtime.Object) (resources.Object, error) {
	if o, ok := obj.(resources.Object); ok && !isUnstructured(obj) {
		r.SetTypeMeta(o)
		return o, nil
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("apiserver: apply result: %w", err)
	}
	out := r.New()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, out); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the applied object does not decode as %s: %v", r.Kind, err))
	}
	r.SetTypeMeta(out)
	return out, nil
}

func isUnstructured(obj runtime.Object) bool {
	_, ok := obj.(runtime.Unstructured)
	return ok
}
