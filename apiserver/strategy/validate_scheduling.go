package strategy

import (
	corev1 "k8s.io/api/core/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Scheduling-related validation shared by pods, DaemonSet templates and nodes:
// tolerations, taint effects and required node affinity.

var (
	tolerationOperators = []corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}
	taintEffects        = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
)

// validateTolerations follows Kubernetes' ValidateTolerations.
func validateTolerations(ts []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, t := range ts {
		idx := fldPath.Index(i)
		if t.Key != "" {
			allErrs = append(allErrs, metav1validation.ValidateLabelName(t.Key, idx.Child("key"))...)
		}
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			allErrs = append(allErrs, field.Invalid(idx.Child("operator"), t.Operator,
				"operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			allErrs = append(allErrs, field.Invalid(idx.Child("effect"), t.Effect,
				"effect must be 'NoExecute' when `tolerationSeconds` is set"))
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			for _, msg := range utilvalidation.IsValidLabelValue(t.Value) {
				allErrs = append(allErrs, field.Invalid(idx.Child("operator"), t.Value, msg))
			}
		case corev1.TolerationOpExists:
			if t.Value != "" {
				allErrs = append(allErrs, field.Invalid(idx.Child("operator"), t, "value must be empty when `operator` is 'Exists'"))
			}
		default:
			allErrs = append(allErrs, field.NotSupported(idx.Child("operator"), t.Operator, tolerationOperators))
		}
		if t.Effect != "" {
			allErrs = append(allErrs, validateTaintEffect(t.Effect, idx.Child("effect"))...)
		}
	}
	return allErrs
}

func validateTaintEffect(e corev1.TaintEffect, p *field.Path) field.ErrorList {
	for _, ok := range taintEffects {
		if e == ok {
			return nil
		}
	}
	if e == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	return field.ErrorList{field.NotSupported(p, e, taintEffects)}
}

var nodeSelectorOperators = []corev1.NodeSelectorOperator{
	corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists,
	corev1.NodeSelectorOpDoesNotExist, corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt,
}

// validateAffinity checks required node affinity terms, which the DaemonSet
// controller evaluates; preferred terms and pod (anti-)affinity are stored as is.
func validateAffinity(a *corev1.Affinity, fldPath *field.Path) field.ErrorList {
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var allErrs field.ErrorList
	p := fldPath.Child("nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return append(allErrs, field.Required(p.Child("nodeSelectorTerms"), "must have at least one node selector term"))
	}
	for i, t := range terms {
		tp := p.Child("nodeSelectorTerms").Index(i)
		for j, r := range t.MatchExpressions {
			rp := tp.Child("matchExpressions").Index(j)
			allErrs = append(allErrs, validateNodeSelectorRequirement(r, rp)...)
			allErrs = append(allErrs, metav1validation.ValidateLabelName(r.Key, rp.Child("key"))...)
		}
		for j, r := range t.MatchFields {
			rp := tp.Child("matchFields").Index(j)
			if r.Key != "metadata.name" {
				allErrs = append(allErrs, field.NotSupported(rp.Child("key"), r.Key, []string{"metadata.name"}))
			}
			if r.Operator != corev1.NodeSelectorOpIn && r.Operator != corev1.NodeSelectorOpNotIn {
				allErrs = append(allErrs, field.Invalid(rp.Child("operator"), r.Operator, "not a valid selector operator"))
			} else if len(r.Values) != 1 {
				allErrs = append(allErrs, field.Required(rp.Child("values"), "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
			}
		}
	}
	return allErrs
}

func validateNodeSelectorRequirement(r corev1.NodeSelectorRequirement, p *field.Path) field.ErrorList {
	switch r.Operator {
	case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
		if len(r.Values) == 0 {
			return field.ErrorList{field.Required(p.Child("values"), "must be specified when `operator` is 'In' or 'NotIn'")}
		}
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		if len(r.Values) > 0 {
			return field.ErrorList{field.Forbidden(p.Child("values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")}
		}
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if len(r.Values) != 1 {
			return field.ErrorList{field.Required(p.Child("values"), "must be specified single value when `operator` is 'Lt' or 'Gt'")}
		}
	default:
		return field.ErrorList{field.NotSupported(p.Child("operator"), r.Operator, nodeSelectorOperators)}
	}
	return nil
}
