package strategy

import (
	"encoding/json"
	"fmt"

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

	"github.com/everynode/everynode/resources"
)

// MaxManagerLength bounds a field manager name, as Kubernetes does.
const MaxManagerLength = 128

// FieldManagers does server-side apply and managedFields bookkeeping with
// apimachinery's managedfields package, one FieldManager per served kind. Its
// type converter comes from Kubernetes' generated OpenAPI definitions
// (Schemas), so list merge semantics are upstream's.
//
// Differences from Kubernetes: writes to the status subresource leave
// managedFields as they are (no per-subresource managers), and the status of
// a main-resource apply is neither applied nor owned.
//
// A FieldManagers is immutable and safe for concurrent use.
type FieldManagers struct {
	byGVK map[schema.GroupVersionKind]*managedfields.FieldManager
}

// NewFieldManagers builds the field managers of every served kind from
// schemas (nil means Schemas()).
func NewFieldManagers(schemas map[string]*spec.Schema) (*FieldManagers, error) {
	if schemas == nil {
		var err error
		if schemas, err = Schemas(); err != nil {
			return nil, err
		}
	}
	tc, err := managedfields.NewTypeConverter(schemas, false)
	if err != nil {
		return nil, fmt.Errorf("strategy: type converter: %w", err)
	}
	sch := runtime.NewScheme()
	if err := corev1.AddToScheme(sch); err != nil {
		return nil, err
	}
	if err := appsv1.AddToScheme(sch); err != nil {
		return nil, err
	}
	resources.AddToScheme(sch) // every served kind, RBAC and stored-only ones included
	fm := &FieldManagers{byGVK: map[schema.GroupVersionKind]*managedfields.FieldManager{}}
	for _, r := range resources.All() {
		gv := r.GroupVersion()
		reset := map[fieldpath.APIVersion]fieldpath.Filter{
			fieldpath.APIVersion(gv.String()): fieldpath.NewExcludeSetFilter(fieldpath.NewSet(fieldpath.MakePathOrDie("status"))),
		}
		m, err := managedfields.NewDefaultFieldManager(tc, sch, sch, sch, r.GVK(), gv, "", reset)
		if err != nil {
			return nil, fmt.Errorf("strategy: field manager for %s: %w", r.Kind, err)
		}
		fm.byGVK[r.GVK()] = m
	}
	return fm, nil
}

// track records a non-apply write of next (over live, nil on create) by
// op's manager in next's managedFields. sent are the managedFields the client
// sent (the strategy clears them): Kubernetes keeps the live ones when they
// are empty and takes them as given when they differ.
func (f *FieldManagers) track(op Op, live, next resources.Object, sent []metav1.ManagedFieldsEntry) resources.Object {
	if op.Subresource != "" {
		return next
	}
	next.SetManagedFields(sent)
	if op.Applying || f == nil {
		return next // the field manager's Apply computed them
	}
	m := f.byGVK[op.Resource.GVK()]
	if m == nil {
		return next
	}
	if live == nil {
		live = op.Resource.New()
		op.Resource.SetTypeMeta(live)
	}
	out, ok := m.UpdateNoErrors(live, next, op.Manager).(resources.Object)
	if !ok {
		return next
	}
	return out
}

// CheckManager rejects a missing or too long apply field manager (400).
func CheckManager(manager string) error {
	if manager == "" {
		return apierrors.NewBadRequest("PATCH requests with the apply content type must specify fieldManager")
	}
	if len(manager) > MaxManagerLength {
		return apierrors.NewBadRequest(fmt.Sprintf("fieldManager is longer than %d characters", MaxManagerLength))
	}
	return nil
}

// DecodeApplied parses an apply body (YAML or JSON) for r's object
// namespace/name into the unstructured object the field manager merges: only
// the fields the applier sent. strict also rejects unknown and duplicate
// fields, like a Strict create.
func DecodeApplied(r *resources.Resource, namespace, name string, body []byte, strict bool) (*unstructured.Unstructured, error) {
	typed, err := Decode(r, "application/apply-patch+yaml", body, strict)
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
	if gvk := u.GroupVersionKind(); gvk != r.GVK() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the apply body's apiVersion/kind %s does not match the URL's %s", gvk, r.GVK()))
	}
	if err := CheckKey(r, namespace, name, typed); err != nil {
		return nil, err
	}
	if r.Namespaced {
		u.SetNamespace(namespace)
	}
	if u.GetManagedFields() != nil {
		return nil, apierrors.NewBadRequest("metadata.managedFields must be nil")
	}
	return u, nil
}

// Apply merges applied into live (an empty object of r's type when the object
// does not exist yet) as manager, with Kubernetes' server-side apply rules:
// fields another manager owns with a different value are a 409 conflict
// unless force. The result still goes through Create or Update with
// Op.Applying set.
func (f *FieldManagers) Apply(r *resources.Resource, live resources.Object, applied *unstructured.Unstructured, manager string, force bool) (resources.Object, error) {
	m := f.byGVK[r.GVK()]
	if m == nil {
		return nil, apierrors.NewMethodNotSupported(r.GroupResource(), "apply")
	}
	if live == nil {
		live = r.New()
		r.SetTypeMeta(live)
	}
	obj, err := m.Apply(live, applied.DeepCopy(), manager, force)
	if err != nil {
		if _, ok := err.(apierrors.APIStatus); ok {
			return nil, err // the 409 of a conflict
		}
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return toTyped(r, obj)
}

// toTyped converts the field manager's result to the resource's Go type.
func toTyped(r *resources.Resource, obj runtime.Object) (resources.Object, error) {
	if _, isU := obj.(runtime.Unstructured); !isU {
		if o, ok := obj.(resources.Object); ok {
			r.SetTypeMeta(o)
			return o, nil
		}
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("strategy: apply result: %w", err))
	}
	out := r.New()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, out); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the applied object does not decode as %s: %v", r.Kind, err))
	}
	r.SetTypeMeta(out)
	return out, nil
}
