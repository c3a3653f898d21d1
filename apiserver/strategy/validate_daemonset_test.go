package strategy

import (
	"strings"
	"testing"

	"github.com/everynode/everynode/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func rolling(maxUnavailable, maxSurge *intstr.IntOrString) func(*appsv1.DaemonSet) {
	return func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: maxUnavailable, MaxSurge: maxSurge}}
	}
}

func intPtr(i int32) *intstr.IntOrString  { return ptr.To(intstr.FromInt32(i)) }
func strPtr(s string) *intstr.IntOrString { return ptr.To(intstr.FromString(s)) }

// TestValidateDaemonSet covers every rule of docs/controller-rules.md §6.4 with
// Kubernetes' message. The mutation runs after Default and PrepareForCreate.
func TestValidateDaemonSet(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*appsv1.DaemonSet)
		want   string // "" = valid
	}{
		{"manifest as is", func(*appsv1.DaemonSet) {}, ""},
		// Rule 1: names and metadata.
		{"name not a DNS subdomain", func(ds *appsv1.DaemonSet) { ds.Name = "Redis_DS" },
			"metadata.name: Invalid value: \"Redis_DS\": a lowercase RFC 1123 subdomain"},
		{"name with dots is a subdomain", func(ds *appsv1.DaemonSet) { ds.Name = "redis.ds" }, ""},
		{"name too long", func(ds *appsv1.DaemonSet) { ds.Name = strings.Repeat("a", 254) }, "must be no more than 253 characters"},
		{"name missing", func(ds *appsv1.DaemonSet) { ds.Name = "" }, "metadata.name: Required value: name or generateName is required"},
		{"namespace missing", func(ds *appsv1.DaemonSet) { ds.Namespace = "" }, "metadata.namespace: Required value"},
		{"namespace not a DNS label", func(ds *appsv1.DaemonSet) { ds.Namespace = "a.b" }, "metadata.namespace: Invalid value: \"a.b\""},
		{"bad label key", func(ds *appsv1.DaemonSet) { ds.Labels["-bad"] = "x" }, "metadata.labels: Invalid value: \"-bad\""},
		{"bad label value", func(ds *appsv1.DaemonSet) { ds.Labels["ok"] = "not ok" }, "metadata.labels: Invalid value: \"not ok\""},
		{"bad annotation key", func(ds *appsv1.DaemonSet) { ds.Annotations["a b"] = "x" }, "metadata.annotations: Invalid value: \"a b\""},
		// Rule 2: selector.
		{"selector does not match template labels", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Labels = map[string]string{"name": "other"} },
			"spec.template.metadata.labels: Invalid value: {\"name\":\"other\"}: `selector` does not match template `labels`"},
		{"missing selector matches nothing", func(ds *appsv1.DaemonSet) { ds.Spec.Selector = nil },
			"spec.template.metadata.labels: Invalid value: {\"name\":\"redis-ds\"}: `selector` does not match template `labels`"},
		{"empty selector", func(ds *appsv1.DaemonSet) { ds.Spec.Selector = &metav1.LabelSelector{} },
			"spec.selector: Invalid value: {}: empty selector is invalid for daemonset"},
		{"selector with expressions", func(ds *appsv1.DaemonSet) {
			ds.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "name", Operator: "In", Values: []string{"redis-ds"}}}}
		}, ""},
		{"selector bad operator", func(ds *appsv1.DaemonSet) {
			ds.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "name", Operator: "Near"}}
		}, "spec.selector.matchExpressions[0].operator: Invalid value: \"Near\": not a valid selector operator"},
		{"selector bad label", func(ds *appsv1.DaemonSet) { ds.Spec.Selector.MatchLabels["a b"] = "c" },
			"spec.selector.matchLabels: Invalid value: \"a b\""},
		// Rule 3: pod template.
		{"template bad label", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Labels["x"] = "bad value" },
			"spec.template.metadata.labels: Invalid value: \"bad value\""},
		{"template no containers", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers = nil },
			"spec.template.spec.containers: Required value"},
		{"template container without image", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "" },
			"spec.template.spec.containers[0].image: Required value"},
		// Rule 4: restartPolicy.
		{"restartPolicy OnFailure", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure },
			"spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\""},
		{"restartPolicy Never", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever },
			"spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""},
		// Rule 5: activeDeadlineSeconds.
		{"activeDeadlineSeconds set", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.ActiveDeadlineSeconds = ptr.To[int64](30) },
			"spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in DaemonSet is not Supported"},
		// Rule 6: minReadySeconds and templateGeneration.
		{"negative minReadySeconds", func(ds *appsv1.DaemonSet) { ds.Spec.MinReadySeconds = -1 },
			"spec.minReadySeconds: Invalid value: -1: must be greater than or equal to 0"},
		{"minReadySeconds zero", func(ds *appsv1.DaemonSet) { ds.Spec.MinReadySeconds = 0 }, ""},
		{"negative templateGeneration", func(ds *appsv1.DaemonSet) { ds.Annotations[TemplateGenerationAnnotation] = "-2" },
			"spec.templateGeneration: Invalid value: -2: must be greater than or equal to 0"},
		{"unparsable templateGeneration", func(ds *appsv1.DaemonSet) { ds.Annotations[TemplateGenerationAnnotation] = "x" },
			"metadata.annotations[deprecated.daemonset.template.generation]: Invalid value: \"x\""},
		// Rule 7: revisionHistoryLimit.
		{"negative revisionHistoryLimit", func(ds *appsv1.DaemonSet) { ds.Spec.RevisionHistoryLimit = ptr.To[int32](-1) },
			"spec.revisionHistoryLimit: Invalid value: -1: must be greater than or equal to 0"},
		{"revisionHistoryLimit zero", func(ds *appsv1.DaemonSet) { ds.Spec.RevisionHistoryLimit = ptr.To[int32](0) }, ""},
		{"revisionHistoryLimit unset", func(ds *appsv1.DaemonSet) { ds.Spec.RevisionHistoryLimit = nil }, ""},
		// Rule 8: update strategy.
		{"OnDelete", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
		}, ""},
		{"OnDelete ignores a bad rollingUpdate", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: intPtr(-5)}}
		}, ""},
		{"RollingUpdate without rollingUpdate", func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy.RollingUpdate = nil },
			"spec.updateStrategy.rollingUpdate: Required value"},
		{"unknown strategy type", func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy.Type = "Recreate" },
			"spec.updateStrategy: Unsupported value: \"Recreate\": supported values: \"RollingUpdate\", \"OnDelete\""},
		{"maxUnavailable 1 maxSurge 0", rolling(intPtr(1), intPtr(0)), ""},
		{"maxUnavailable 0 maxSurge 1", rolling(intPtr(0), intPtr(1)), ""},
		{"maxUnavailable 0 maxSurge 10%", rolling(intPtr(0), strPtr("10%")), ""},
		{"maxUnavailable 0% maxSurge 100%", rolling(strPtr("0%"), strPtr("100%")), ""},
		{"both non-zero", rolling(intPtr(1), intPtr(1)),
			"spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: 1: may not be set when maxUnavailable is non-zero"},
		{"both non-zero percent", rolling(strPtr("10%"), strPtr("20%")),
			"spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: \"20%\": may not be set when maxUnavailable is non-zero"},
		{"both zero", rolling(intPtr(0), intPtr(0)),
			"spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"},
		{"both zero percent", rolling(strPtr("0%"), intPtr(0)),
			"spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"},
		{"negative maxUnavailable", rolling(intPtr(-1), intPtr(0)),
			"spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: -1: must be greater than or equal to 0"},
		{"negative maxSurge", rolling(intPtr(0), intPtr(-1)),
			"spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: -1: must be greater than or equal to 0"},
		{"bad percent string", rolling(strPtr("abc"), intPtr(0)),
			"spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"abc\": a valid percent string must be a numeric string followed by an ending '%'"},
		{"percent over 100", rolling(strPtr("101%"), intPtr(0)),
			"spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"101%\": must not be greater than 100%"},
		{"maxSurge percent over 100", rolling(intPtr(0), strPtr("150%")),
			"spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: \"150%\": must not be greater than 100%"},
		{"huge percent", rolling(strPtr("99999999999999999999999%"), intPtr(0)), "must not be greater than 100%"},
		{"nil values are zero", rolling(nil, nil),
			"spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ds := createDS(t, manifests[0])
			tc.mutate(ds)
			errs := ValidateCreate(resources.DaemonSets, ds)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			wantFieldError(t, errs, tc.want)
			// Update runs the same spec rules.
			old := createDS(t, manifests[0])
			old.ResourceVersion = "5"
			ds.ResourceVersion = "5"
			if !strings.Contains(tc.name, "name") {
				wantFieldError(t, ValidateUpdate(resources.DaemonSets, ds, old), tc.want)
			}
		})
	}
}

// TestValidateDaemonSetUpdate covers the update-only rules
// (docs/controller-rules.md §6.4 rules 9, 10).
func TestValidateDaemonSetUpdate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*appsv1.DaemonSet)
		want   string
	}{
		{"image change", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "redis:6" }, ""},
		{"selector change", func(ds *appsv1.DaemonSet) {
			ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"name": "redis-ds", "tier": "cache"}}
			ds.Spec.Template.Labels["tier"] = "cache"
		}, "spec.selector: Invalid value: {\"matchLabels\":{\"name\":\"redis-ds\",\"tier\":\"cache\"}}: field is immutable"},
		{"selector removed", func(ds *appsv1.DaemonSet) { ds.Spec.Selector = nil }, "spec.selector: Invalid value: null: field is immutable"},
		{"name change", func(ds *appsv1.DaemonSet) { ds.Name = "other" }, "metadata.name: Invalid value: \"other\": field is immutable"},
		{"namespace change", func(ds *appsv1.DaemonSet) { ds.Namespace = "other" }, "metadata.namespace: Invalid value: \"other\": field is immutable"},
		{"uid change", func(ds *appsv1.DaemonSet) { ds.UID = "other" }, "metadata.uid: Invalid value: \"other\": field is immutable"},
		{"generation decrement", func(ds *appsv1.DaemonSet) { ds.Generation = 0 }, "metadata.generation: Invalid value: 0: must not be decremented"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old := createDS(t, manifests[0])
			old.ResourceVersion = "7"
			ds := old.DeepCopy()
			tc.mutate(ds)
			errs := ValidateUpdate(resources.DaemonSets, ds, old)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			wantFieldError(t, errs, tc.want)
		})
	}
}
