package strategy

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/everynode/everynode/rollout"
)

// validateDaemonSet is Kubernetes' ValidateDaemonSet
// (docs/controller-rules.md §6.4 rules 1–8), without the object metadata,
// which the caller checks, plus everynode's rollout.everynode.io/
// annotations (docs/rollouts.md).
func validateDaemonSet(ds *appsv1.DaemonSet) field.ErrorList {
	allErrs := validateDaemonSetSpec(&ds.Spec, field.NewPath("spec"))
	allErrs = append(allErrs, validateTemplateGenerationAnnotation(ds)...)
	return append(allErrs, rollout.Validate(ds.Annotations)...)
}

// validateDaemonSetUpdate adds the update-only rules
// (docs/controller-rules.md §6.4 rule 10).
// Rollout annotations (docs/rollouts.md) are checked only where the update
// adds or changes them.
func validateDaemonSetUpdate(ds, old *appsv1.DaemonSet) field.ErrorList {
	allErrs := validateDaemonSetSpec(&ds.Spec, field.NewPath("spec"))
	allErrs = append(allErrs, validateTemplateGenerationAnnotation(ds)...)
	allErrs = append(allErrs, rollout.ValidateUpdate(ds.Annotations, old.Annotations)...)
	if !apiequality.Semantic.DeepEqual(ds.Spec.Selector, old.Spec.Selector) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("spec").Child("selector"), ds.Spec.Selector, "field is immutable"))
	}
	return allErrs
}

// validateTemplateGenerationAnnotation mirrors the apps/v1 conversion: an
// unparsable annotation is an error, and the internal templateGeneration it
// stands for must be >= 0.
func validateTemplateGenerationAnnotation(ds *appsv1.DaemonSet) field.ErrorList {
	v, ok := ds.Annotations[TemplateGenerationAnnotation]
	if !ok {
		return nil
	}
	p := field.NewPath("metadata", "annotations").Key(TemplateGenerationAnnotation)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return field.ErrorList{field.Invalid(p, v, "must be an integer")}
	}
	return apivalidation.ValidateNonnegativeField(n, field.NewPath("spec", "templateGeneration"))
}

// validateDaemonSetSpec is Kubernetes' ValidateDaemonSetSpec.
func validateDaemonSetSpec(spec *appsv1.DaemonSetSpec, fldPath *field.Path) field.ErrorList {
	allErrs := metav1validation.ValidateLabelSelector(spec.Selector, metav1validation.LabelSelectorValidationOptions{}, fldPath.Child("selector"))

	selector, err := metav1.LabelSelectorAsSelector(spec.Selector)
	if err == nil && !selector.Matches(labels.Set(spec.Template.Labels)) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("template", "metadata", "labels"), spec.Template.Labels,
			"`selector` does not match template `labels`"))
	}
	if spec.Selector != nil && len(spec.Selector.MatchLabels)+len(spec.Selector.MatchExpressions) == 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("selector"), spec.Selector, "empty selector is invalid for daemonset"))
	}

	allErrs = append(allErrs, validatePodTemplateSpec(&spec.Template, fldPath.Child("template"))...)
	// restartPolicy has already been first-order validated by the pod spec rules.
	if rp := spec.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyAlways {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("template", "spec", "restartPolicy"), rp,
			[]corev1.RestartPolicy{corev1.RestartPolicyAlways}))
	}
	if spec.Template.Spec.ActiveDeadlineSeconds != nil {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("template", "spec", "activeDeadlineSeconds"),
			"activeDeadlineSeconds in DaemonSet is not Supported"))
	}
	allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(spec.MinReadySeconds), fldPath.Child("minReadySeconds"))...)
	allErrs = append(allErrs, validateDaemonSetUpdateStrategy(&spec.UpdateStrategy, fldPath.Child("updateStrategy"))...)
	if spec.RevisionHistoryLimit != nil {
		// Zero is a valid revisionHistoryLimit.
		allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(*spec.RevisionHistoryLimit), fldPath.Child("revisionHistoryLimit"))...)
	}
	return allErrs
}

// validateDaemonSetUpdateStrategy is Kubernetes' ValidateDaemonSetUpdateStrategy.
func validateDaemonSetUpdateStrategy(s *appsv1.DaemonSetUpdateStrategy, fldPath *field.Path) field.ErrorList {
	switch s.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
		return nil
	case appsv1.RollingUpdateDaemonSetStrategyType:
		if s.RollingUpdate == nil {
			return field.ErrorList{field.Required(fldPath.Child("rollingUpdate"), "")}
		}
		return validateRollingUpdateDaemonSet(s.RollingUpdate, fldPath.Child("rollingUpdate"))
	default:
		return field.ErrorList{field.NotSupported(fldPath, s.Type, []string{
			string(appsv1.RollingUpdateDaemonSetStrategyType), string(appsv1.OnDeleteDaemonSetStrategyType)})}
	}
}

// validateRollingUpdateDaemonSet is Kubernetes' ValidateRollingUpdateDaemonSet:
// each value a non-negative int or a percent up to 100%, exactly one non-zero.
func validateRollingUpdateDaemonSet(ru *appsv1.RollingUpdateDaemonSet, fldPath *field.Path) field.ErrorList {
	maxUnavailable, maxSurge := intOrZero(ru.MaxUnavailable), intOrZero(ru.MaxSurge)
	var allErrs field.ErrorList
	allErrs = append(allErrs, validatePositiveIntOrPercent(maxUnavailable, fldPath.Child("maxUnavailable"))...)
	allErrs = append(allErrs, validatePositiveIntOrPercent(maxSurge, fldPath.Child("maxSurge"))...)
	allErrs = append(allErrs, isNotMoreThan100Percent(maxUnavailable, fldPath.Child("maxUnavailable"))...)
	allErrs = append(allErrs, isNotMoreThan100Percent(maxSurge, fldPath.Child("maxSurge"))...)

	hasUnavailable := intOrPercentValue(maxUnavailable) != 0
	hasSurge := intOrPercentValue(maxSurge) != 0
	switch {
	case hasUnavailable && hasSurge:
		allErrs = append(allErrs, field.Invalid(fldPath.Child("maxSurge"), maxSurge, "may not be set when maxUnavailable is non-zero"))
	case !hasUnavailable && !hasSurge:
		allErrs = append(allErrs, field.Required(fldPath.Child("maxUnavailable"), "cannot be 0 when maxSurge is 0"))
	}
	return allErrs
}

func intOrZero(v *intstr.IntOrString) intstr.IntOrString {
	if v == nil {
		return intstr.FromInt32(0)
	}
	return *v
}

func validatePositiveIntOrPercent(v intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch v.Type {
	case intstr.String:
		for _, msg := range utilvalidation.IsValidPercent(v.StrVal) {
			allErrs = append(allErrs, field.Invalid(fldPath, v, msg))
		}
	case intstr.Int:
		allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(v.IntValue()), fldPath)...)
	default:
		allErrs = append(allErrs, field.Invalid(fldPath, v, "must be an integer or percentage (e.g '5%')"))
	}
	return allErrs
}

// percentValue returns N for a valid "N%" string.
func percentValue(v intstr.IntOrString) (int, bool) {
	if v.Type != intstr.String || len(utilvalidation.IsValidPercent(v.StrVal)) != 0 {
		return 0, false
	}
	n, err := strconv.Atoi(v.StrVal[:len(v.StrVal)-1])
	if err != nil {
		// Too many digits for an int: certainly more than 100%.
		return int(^uint(0) >> 1), true
	}
	return n, true
}

func intOrPercentValue(v intstr.IntOrString) int {
	if n, ok := percentValue(v); ok {
		return n
	}
	return v.IntValue()
}

func isNotMoreThan100Percent(v intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	n, ok := percentValue(v)
	if !ok || n <= 100 {
		return nil
	}
	return field.ErrorList{field.Invalid(fldPath, v, "must not be greater than 100%")}
}
