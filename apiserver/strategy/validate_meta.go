package strategy

import (
	"fmt"

	"github.com/everynode/everynode/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	rbacvalidation "k8s.io/kubernetes/pkg/apis/rbac/validation"
)

// ValidateCreate validates a new object after Default and PrepareForCreate:
// its metadata (name rules per resource, namespace required for namespaced
// resources and forbidden for cluster-scoped ones, labels, annotations,
// owner references, finalizers) and the resource's own rules.
func ValidateCreate(r *resources.Resource, obj resources.Object) field.ErrorList {
	allErrs := validateObjectMeta(r, obj)
	return append(allErrs, validateKind(obj)...)
}

// ValidateUpdate validates obj, the new state, against old, the stored state,
// after Default and PrepareForUpdate: the create rules, the immutable metadata
// (name, namespace, uid, creationTimestamp, ...) and the resource's update
// rules (DaemonSet selector, ControllerRevision data, pod spec, the data of
// immutable ConfigMaps and Secrets, a Secret's type).
//
// An empty metadata.resourceVersion is not reported: whether an unconditional
// update is allowed is the HTTP layer's decision (Kubernetes allows it for all
// resources everynode serves and then uses the stored resourceVersion).
func ValidateUpdate(r *resources.Resource, obj, old resources.Object) field.ErrorList {
	var allErrs field.ErrorList
	for _, e := range apivalidation.ValidateObjectMetaAccessorUpdate(obj, old, field.NewPath("metadata")) {
		if e.Field == "metadata.resourceVersion" {
			continue
		}
		allErrs = append(allErrs, e)
	}
	allErrs = append(allErrs, apivalidation.ValidateFinalizers(obj.GetFinalizers(), field.NewPath("metadata", "finalizers"))...)
	if errs, ok := validateRBAC(obj, old); ok {
		return append(allErrs, errs...)
	}
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		od, ok := old.(*appsv1.DaemonSet)
		if !ok {
			return append(allErrs, typeMismatch(obj, old))
		}
		allErrs = append(allErrs, validateDaemonSetUpdate(o, od)...)
	case *corev1.Pod:
		op, ok := old.(*corev1.Pod)
		if !ok {
			return append(allErrs, typeMismatch(obj, old))
		}
		allErrs = append(allErrs, validatePod(o)...)
		allErrs = append(allErrs, validatePodSpecUpdate(&o.Spec, &op.Spec, field.NewPath("spec"))...)
	case *appsv1.ControllerRevision:
		oc, ok := old.(*appsv1.ControllerRevision)
		if !ok {
			return append(allErrs, typeMismatch(obj, old))
		}
		allErrs = append(allErrs, validateControllerRevision(o)...)
		if !apiequality.Semantic.DeepEqual(o.Data, oc.Data) {
			allErrs = append(allErrs, field.Invalid(field.NewPath("data"), "", "field is immutable"))
		}
	case *corev1.ConfigMap:
		ocm, ok := old.(*corev1.ConfigMap)
		if !ok {
			return append(allErrs, typeMismatch(obj, old))
		}
		allErrs = append(allErrs, validateConfigMapUpdate(o, ocm)...)
	case *corev1.Secret:
		osec, ok := old.(*corev1.Secret)
		if !ok {
			return append(allErrs, typeMismatch(obj, old))
		}
		allErrs = append(allErrs, validateSecretUpdate(o, osec)...)
	case *corev1.Node:
		on, ok := old.(*corev1.Node)
		if !ok {
			return append(allErrs, typeMismatch(obj, old))
		}
		allErrs = append(allErrs, validateNode(o)...)
		if on.Spec.PodCIDR != "" && o.Spec.PodCIDR != on.Spec.PodCIDR {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("spec", "podCIDR"), "node updates may not change podCIDR except from \"\" to valid"))
		}
		if on.Spec.ProviderID != "" && o.Spec.ProviderID != on.Spec.ProviderID {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("spec", "providerID"), "node updates may not change providerID except from \"\" to valid"))
		}
	default:
		allErrs = append(allErrs, validateKind(obj)...)
		allErrs = append(allErrs, validateStoredUpdate(obj, old)...)
	}
	return allErrs
}

func typeMismatch(obj, old resources.Object) *field.Error {
	return field.InternalError(field.NewPath(""), fmt.Errorf("cannot compare %T with %T", obj, old))
}

// validateObjectMeta runs apimachinery's ObjectMeta rules with the resource's
// name rule: DNS label for namespaces, path segment for the RBAC kinds, DNS
// subdomain for the rest.
func validateObjectMeta(r *resources.Resource, obj resources.Object) field.ErrorList {
	nameFn := apivalidation.NameIsDNSSubdomain
	namespaced := true
	if r != nil {
		namespaced = r.Namespaced
		if r.Kind == resources.Namespaces.Kind && r.Group == "" {
			nameFn = apivalidation.NameIsDNSLabel
		}
		if fn := storedNameRule(r); fn != nil {
			nameFn = fn
		}
		if isRBAC(r) {
			nameFn = rbacvalidation.ValidateRBACName // path segments: "system:basic-user"
		}
	} else if _, ok := obj.(*corev1.Namespace); ok {
		nameFn = apivalidation.NameIsDNSLabel
	} else if isRBAC(resources.ForObject(obj)) {
		nameFn = rbacvalidation.ValidateRBACName
	}
	return apivalidation.ValidateObjectMetaAccessor(obj, namespaced, nameFn, field.NewPath("metadata"))
}

// validateKind runs the create-time rules of obj's kind.
func validateKind(obj resources.Object) field.ErrorList {
	if errs, ok := validateRBAC(obj, nil); ok {
		return errs
	}
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		return validateDaemonSet(o)
	case *corev1.Pod:
		return validatePod(o)
	case *appsv1.ControllerRevision:
		return validateControllerRevision(o)
	case *corev1.Node:
		return validateNode(o)
	case *corev1.Event:
		return validateEvent(o)
	case *corev1.ConfigMap:
		return validateConfigMap(o)
	case *corev1.Secret:
		return validateSecret(o)
	}
	return validateStored(obj)
}

func validatePod(p *corev1.Pod) field.ErrorList {
	allErrs := validatePodSpec(&p.Spec, field.NewPath("spec"))
	return allErrs
}

// validateControllerRevision: data required, revision >= 0
// (docs/controller-rules.md §6.4, last paragraph).
func validateControllerRevision(cr *appsv1.ControllerRevision) field.ErrorList {
	var allErrs field.ErrorList
	if len(cr.Data.Raw) == 0 && cr.Data.Object == nil {
		allErrs = append(allErrs, field.Required(field.NewPath("data"), "data is mandatory"))
	}
	allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(cr.Revision, field.NewPath("revision"))...)
	return allErrs
}

// validateNode checks the taints (key a qualified name, value a label value,
// effect NoSchedule|PreferNoSchedule|NoExecute, unique by key and effect).
func validateNode(n *corev1.Node) field.ErrorList {
	var allErrs field.ErrorList
	p := field.NewPath("spec", "taints")
	seen := sets.New[string]()
	for i, t := range n.Spec.Taints {
		idx := p.Index(i)
		allErrs = append(allErrs, metav1validation.ValidateLabelName(t.Key, idx.Child("key"))...)
		if t.Value != "" {
			for _, msg := range utilvalidation.IsValidLabelValue(t.Value) {
				allErrs = append(allErrs, field.Invalid(idx.Child("value"), t.Value, msg))
			}
		}
		allErrs = append(allErrs, validateTaintEffect(t.Effect, idx.Child("effect"))...)
		k := t.Key + "\x00" + string(t.Effect)
		if seen.Has(k) {
			allErrs = append(allErrs, field.Invalid(idx, t, "taints must be unique by key and effect pair"))
		}
		seen.Insert(k)
	}
	if n.Spec.PodCIDR != "" {
		allErrs = append(allErrs, utilvalidation.IsValidCIDR(field.NewPath("spec", "podCIDR"), n.Spec.PodCIDR)...)
	}
	return allErrs
}

// validateEvent checks that a namespaced involved object lives in the event's namespace.
func validateEvent(e *corev1.Event) field.ErrorList {
	var allErrs field.ErrorList
	if ns := e.InvolvedObject.Namespace; ns != "" && ns != e.Namespace {
		allErrs = append(allErrs, field.Invalid(field.NewPath("involvedObject", "namespace"), ns, "does not match event.namespace"))
	}
	return allErrs
}
