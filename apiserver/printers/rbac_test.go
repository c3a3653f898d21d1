package printers

import (
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRBACCells: roles print the default table's RFC 3339 date; bindings
// their role as Kind/name and, wide, the subjects by kind.
func TestRBACCells(t *testing.T) {
	created := ago(90 * time.Minute)
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:x", CreationTimestamp: created}}
	if got := Cells(cr, now); !slices.Equal(got, []any{"system:x", "2026-01-02T10:30:00Z"}) {
		t.Errorf("clusterrole cells %v", got)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b", CreationTimestamp: created},
		RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "u1"}, {Kind: "ServiceAccount", Namespace: "ns", Name: "sa"},
			{Kind: "User", Name: "u2"}, {Kind: "Group", Name: "g"}}}
	if got := Cells(rb, now); !slices.Equal(got, []any{"b", "ClusterRole/view", "90m", "u1, u2", "g", "ns/sa"}) {
		t.Errorf("rolebinding cells %v", got)
	}
	for _, kind := range []string{"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"} {
		cols := Columns(schema.GroupKind{Group: rbacv1.GroupName, Kind: kind})
		var names []string
		for _, c := range cols {
			names = append(names, c.Name)
		}
		want := []string{"Name", "Created At"}
		if kind == "RoleBinding" || kind == "ClusterRoleBinding" {
			want = []string{"Name", "Role", "Age", "Users", "Groups", "ServiceAccounts"}
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s columns %v, want %v", kind, names, want)
		}
	}
}
