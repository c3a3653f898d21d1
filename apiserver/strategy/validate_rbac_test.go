package strategy

import (
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/resources"
)

// TestValidateRBAC: upstream's rules with everynode's metadata checks, each
// error once; a binding's roleRef is immutable.
func TestValidateRBAC(t *testing.T) {
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:x"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}}}}
	if errs := ValidateCreate(resources.ClusterRoles, cr); len(errs) != 0 {
		t.Errorf("valid clusterrole: %v", errs)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "a/b", Namespace: "default"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}}}}
	errs := ValidateCreate(resources.Roles, role)
	var fields []string
	for _, e := range errs {
		fields = append(fields, e.Field)
	}
	if got := strings.Join(fields, ","); got != "metadata.name,rules[0].nonResourceURLs" {
		t.Errorf("role errors on %s: %v", got, errs)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "default", ResourceVersion: "1"},
		RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "r"}, Subjects: []rbacv1.Subject{{Kind: "User", Name: "u"}}}
	Default(resources.RoleBindings, rb)
	if rb.RoleRef.APIGroup != rbacv1.GroupName || rb.Subjects[0].APIGroup != rbacv1.GroupName {
		t.Fatalf("defaults: %+v", rb)
	}
	next := rb.DeepCopy()
	next.RoleRef.Name = "other"
	errs = ValidateUpdate(resources.RoleBindings, next, rb)
	if len(errs) != 1 || errs[0].Field != "roleRef" || !strings.Contains(errs[0].Error(), "field is immutable") {
		t.Errorf("roleRef change: %v", errs)
	}
}
