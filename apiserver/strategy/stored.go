package strategy

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	admissionregistrationdefaults "k8s.io/kubernetes/pkg/apis/admissionregistration/v1"
	appsdefaults "k8s.io/kubernetes/pkg/apis/apps/v1"
	coredefaults "k8s.io/kubernetes/pkg/apis/core/v1"
	discoverydefaults "k8s.io/kubernetes/pkg/apis/discovery/v1"
	networkingdefaults "k8s.io/kubernetes/pkg/apis/networking/v1"
	"k8s.io/kubernetes/pkg/apis/scheduling"
	schedulingapiv1 "k8s.io/kubernetes/pkg/apis/scheduling/v1"
	schedulingvalidation "k8s.io/kubernetes/pkg/apis/scheduling/validation"
	storagedefaults "k8s.io/kubernetes/pkg/apis/storage/v1"

	"github.com/everynode/everynode/resources"
)

// This file holds the rules of PriorityClass and of the stored-only kinds
// (resources.StoredOnly): Kubernetes' own generated defaulters for each
// versioned type, Kubernetes' PriorityClass validation, and for the
// stored-only kinds only the metadata rules (names as their upstream
// validation names them) plus a CustomResourceDefinition's name.

// defaultStored applies Kubernetes' defaults (the generated SetObjectDefaults
// functions of k8s.io/kubernetes pkg/apis/<group>/v1) to the kinds of this
// file (PodDisruptionBudgets have none); other kinds are left alone.
func defaultStored(obj resources.Object) {
	switch o := obj.(type) {
	case *schedulingv1.PriorityClass:
		schedulingapiv1.SetObjectDefaults_PriorityClass(o)
	case *corev1.Service:
		coredefaults.SetObjectDefaults_Service(o)
	case *corev1.Endpoints:
		coredefaults.SetObjectDefaults_Endpoints(o)
	case *discoveryv1.EndpointSlice:
		discoverydefaults.SetObjectDefaults_EndpointSlice(o)
	case *networkingv1.NetworkPolicy:
		networkingdefaults.SetObjectDefaults_NetworkPolicy(o)
	case *appsv1.Deployment:
		appsdefaults.SetObjectDefaults_Deployment(o)
	case *storagev1.StorageClass:
		storagedefaults.SetObjectDefaults_StorageClass(o)
	case *storagev1.CSIDriver:
		storagedefaults.SetObjectDefaults_CSIDriver(o)
	case *apiextensionsv1.CustomResourceDefinition:
		apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(o)
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		admissionregistrationdefaults.SetObjectDefaults_ValidatingWebhookConfiguration(o)
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		admissionregistrationdefaults.SetObjectDefaults_MutatingWebhookConfiguration(o)
	}
}

// storedNameRule is the name rule of the kinds of this file whose names are
// not DNS subdomains: a Service's name is a DNS-1035 label
// (ValidateServiceName upstream).
func storedNameRule(r *resources.Resource) apivalidation.ValidateNameFunc {
	if r == resources.Services {
		return apivalidation.NameIsDNS1035Label
	}
	return nil
}

// validateStored runs the create-time rules of the kinds of this file.
func validateStored(obj resources.Object) field.ErrorList {
	switch o := obj.(type) {
	case *schedulingv1.PriorityClass:
		in, err := internalPriorityClass(o)
		if err != nil {
			return field.ErrorList{field.InternalError(field.NewPath(""), err)}
		}
		return withoutMeta(schedulingvalidation.ValidatePriorityClass(in))
	case *apiextensionsv1.CustomResourceDefinition:
		// ValidateCustomResourceDefinition upstream: the name is the plural
		// and the group.
		want := o.Spec.Names.Plural + "." + o.Spec.Group
		if o.Name != want {
			return field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), o.Name,
				`must be spec.names.plural+"."+spec.group`)}
		}
	}
	return nil
}

// validateStoredUpdate runs the update-only rules of the kinds of this file
// (validateKind runs the others).
func validateStoredUpdate(obj, old resources.Object) field.ErrorList {
	var allErrs field.ErrorList
	switch o := obj.(type) {
	case *schedulingv1.PriorityClass:
		op, ok := old.(*schedulingv1.PriorityClass)
		if !ok {
			return append(allErrs, typeMismatch(obj, old))
		}
		in, err := internalPriorityClass(o)
		if err != nil {
			return append(allErrs, field.InternalError(field.NewPath(""), err))
		}
		oldIn, err := internalPriorityClass(op)
		if err != nil {
			return append(allErrs, field.InternalError(field.NewPath(""), err))
		}
		allErrs = append(allErrs, withoutMeta(schedulingvalidation.ValidatePriorityClassUpdate(in, oldIn))...)
	}
	return allErrs
}

// internalPriorityClass converts pc to the internal type Kubernetes'
// validation takes.
func internalPriorityClass(pc *schedulingv1.PriorityClass) (*scheduling.PriorityClass, error) {
	out := &scheduling.PriorityClass{}
	if err := schedulingapiv1.Convert_v1_PriorityClass_To_scheduling_PriorityClass(pc, out, nil); err != nil {
		return nil, fmt.Errorf("convert PriorityClass: %w", err)
	}
	return out, nil
}

// withoutMeta drops the metadata errors of an upstream validation: the
// metadata is validated once, by ValidateCreate and ValidateUpdate, for every
// kind, so they would be reported twice.
func withoutMeta(errs field.ErrorList) field.ErrorList {
	var out field.ErrorList
	for _, e := range errs {
		if strings.HasPrefix(e.Field, "metadata.") && !(e.Field == "metadata.name" && e.Type == field.ErrorTypeForbidden) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// SystemPriorityClasses are the PriorityClasses Kubernetes creates at start
// (system-node-critical and system-cluster-critical).
func SystemPriorityClasses() []*schedulingv1.PriorityClass {
	return schedulingapiv1.SystemPriorityClasses()
}

// CheckDeletable refuses the delete of an object Kubernetes never deletes:
// a system PriorityClass (403, as its registry answers).
func CheckDeletable(r *resources.Resource, name string) error {
	if r != resources.PriorityClasses {
		return nil
	}
	for _, n := range schedulingapiv1.SystemPriorityClassNames() {
		if n == name {
			return apierrors.NewForbidden(r.GroupResource(), name, errors.New("this is a system priority class and cannot be deleted"))
		}
	}
	return nil
}

// structField reaches a typed object's field (Spec, Status) by reflection;
// ok is false for kinds without it.
func structField(obj resources.Object, name string) (reflect.Value, bool) {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	f := v.Elem().FieldByName(name)
	return f, f.IsValid() && f.CanSet()
}

// prepareStoredUpdate keeps the status of a main-resource write of a kind of
// this file with a status (its registry's PrepareForUpdate) and moves the
// generation on a spec change where upstream does (Deployment,
// PodDisruptionBudget, NetworkPolicy, CustomResourceDefinition).
func prepareStoredUpdate(obj, old resources.Object) {
	if _, ok := resources.StoredOnly(resources.ForObject(obj)); !ok {
		return
	}
	if st, ok := structField(obj, "Status"); ok {
		if ost, ok := structField(old, "Status"); ok && st.Type() == ost.Type() {
			st.Set(ost)
		}
	}
	switch obj.(type) {
	case *appsv1.Deployment, *policyv1.PodDisruptionBudget, *networkingv1.NetworkPolicy, *apiextensionsv1.CustomResourceDefinition:
		spec, _ := structField(obj, "Spec")
		ospec, _ := structField(old, "Spec")
		if !apiequality.Semantic.DeepEqual(spec.Interface(), ospec.Interface()) {
			obj.SetGeneration(old.GetGeneration() + 1)
		}
	}
}

// prepareStoredStatusUpdate keeps everything but the status of a /status
// write of a kind of this file; it reports whether obj is one of them.
func prepareStoredStatusUpdate(obj, old resources.Object) bool {
	if _, ok := resources.StoredOnly(resources.ForObject(obj)); !ok {
		return false
	}
	st, ok := structField(obj, "Status")
	if !ok {
		return false
	}
	keep := st.Interface()
	cp := reflect.ValueOf(old.DeepCopyObject()).Elem()
	reflect.ValueOf(obj).Elem().Set(cp)
	st.Set(reflect.ValueOf(keep))
	return true
}

// prepareStoredCreate clears the status of a new object of a kind of this
// file, as its registry's PrepareForCreate does.
func prepareStoredCreate(obj resources.Object) {
	if _, ok := resources.StoredOnly(resources.ForObject(obj)); !ok {
		return
	}
	if st, ok := structField(obj, "Status"); ok {
		st.Set(reflect.Zero(st.Type()))
	}
}
