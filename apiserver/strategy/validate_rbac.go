package strategy

import (
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/apis/rbac"
	rbacv1conv "k8s.io/kubernetes/pkg/apis/rbac/v1"
	rbacvalidation "k8s.io/kubernetes/pkg/apis/rbac/validation"

	"github.com/everynode/everynode/resources"
)

// The rbac.authorization.k8s.io kinds run Kubernetes' own defaults and
// validation (k8s.io/kubernetes pkg/apis/rbac/v1 and pkg/apis/rbac/validation)
// on the internal types they convert to, as kube-apiserver does. Metadata is
// validated by validateObjectMeta (with RBAC's path-segment name rule), so the
// upstream metadata errors are dropped here, not reported twice.

// isRBAC reports whether r is one of the RBAC kinds.
func isRBAC(r *resources.Resource) bool {
	return r != nil && r.Group == rbacv1.GroupName
}

// defaultRBAC sets the roleRef and subject apiGroup defaults of bindings.
func defaultRBAC(obj resources.Object) {
	switch o := obj.(type) {
	case *rbacv1.RoleBinding:
		rbacv1conv.SetObjectDefaults_RoleBinding(o)
	case *rbacv1.ClusterRoleBinding:
		rbacv1conv.SetObjectDefaults_ClusterRoleBinding(o)
	}
}

// validateRBAC validates obj (and, when old is not nil, the update from old:
// a binding's roleRef is immutable). ok is false when obj is no RBAC kind.
func validateRBAC(obj, old resources.Object) (errs field.ErrorList, ok bool) {
	var err error
	switch o := obj.(type) {
	case *rbacv1.Role:
		in := &rbac.Role{}
		if err = rbacv1conv.Convert_v1_Role_To_rbac_Role(o, in, nil); err == nil {
			errs = rbacvalidation.ValidateRole(in)
		}
	case *rbacv1.ClusterRole:
		in := &rbac.ClusterRole{}
		if err = rbacv1conv.Convert_v1_ClusterRole_To_rbac_ClusterRole(o, in, nil); err == nil {
			opts := rbacvalidation.ClusterRoleValidationOptions{}
			if oc, isCR := old.(*rbacv1.ClusterRole); isCR {
				// As upstream's strategy: a stored selector with a label
				// value now invalid may stay.
				opts.AllowInvalidLabelValueInSelector = invalidSelectorValue(oc)
			}
			errs = rbacvalidation.ValidateClusterRole(in, opts)
		}
	case *rbacv1.RoleBinding:
		in := &rbac.RoleBinding{}
		if err = rbacv1conv.Convert_v1_RoleBinding_To_rbac_RoleBinding(o, in, nil); err == nil {
			errs = rbacvalidation.ValidateRoleBinding(in)
			if ob, isRB := old.(*rbacv1.RoleBinding); isRB {
				oin := &rbac.RoleBinding{}
				if err = rbacv1conv.Convert_v1_RoleBinding_To_rbac_RoleBinding(ob, oin, nil); err == nil {
					errs = rbacvalidation.ValidateRoleBindingUpdate(in, oin) // roleRef is immutable
				}
			}
		}
	case *rbacv1.ClusterRoleBinding:
		in := &rbac.ClusterRoleBinding{}
		if err = rbacv1conv.Convert_v1_ClusterRoleBinding_To_rbac_ClusterRoleBinding(o, in, nil); err == nil {
			errs = rbacvalidation.ValidateClusterRoleBinding(in)
			if ob, isCRB := old.(*rbacv1.ClusterRoleBinding); isCRB {
				oin := &rbac.ClusterRoleBinding{}
				if err = rbacv1conv.Convert_v1_ClusterRoleBinding_To_rbac_ClusterRoleBinding(ob, oin, nil); err == nil {
					errs = rbacvalidation.ValidateClusterRoleBindingUpdate(in, oin) // roleRef is immutable
				}
			}
		}
	default:
		return nil, false
	}
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}, true
	}
	out := errs[:0]
	for _, e := range errs {
		if e.Field != "metadata" && !strings.HasPrefix(e.Field, "metadata.") {
			out = append(out, e)
		}
	}
	return out, true
}

// invalidSelectorValue reports whether cr's aggregation selectors hold a
// label value that strict validation refuses.
func invalidSelectorValue(cr *rbacv1.ClusterRole) bool {
	if cr.AggregationRule == nil {
		return false
	}
	in := &rbac.ClusterRole{}
	if err := rbacv1conv.Convert_v1_ClusterRole_To_rbac_ClusterRole(cr, in, nil); err != nil {
		return false
	}
	for _, e := range rbacvalidation.ValidateClusterRole(in, rbacvalidation.ClusterRoleValidationOptions{}) {
		if strings.HasPrefix(e.Field, "aggregationRule") {
			return true
		}
	}
	return false
}
