package printers

import (
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// rbacColumns are the columns kube-apiserver prints for the RBAC kinds, nil
// for other kinds. Roles and ClusterRoles have no printer upstream: they get
// the registry's default table (Name, Created At as an RFC 3339 date).
// Bindings print Role, Age and, with -o wide, Users, Groups, ServiceAccounts.
func rbacColumns(gk schema.GroupKind) []metav1.TableColumnDefinition {
	if gk.Group != rbacv1.GroupName {
		return nil
	}
	switch gk.Kind {
	case "Role", "ClusterRole":
		return []metav1.TableColumnDefinition{
			nameColumn(),
			{Name: "Created At", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
		}
	case "RoleBinding", "ClusterRoleBinding":
		what := "roleBinding"
		doc := rbacv1.RoleBinding{}.SwaggerDoc()["roleRef"]
		if gk.Kind == "ClusterRoleBinding" {
			what, doc = "clusterRoleBinding", rbacv1.ClusterRoleBinding{}.SwaggerDoc()["roleRef"]
		}
		return []metav1.TableColumnDefinition{
			nameColumn(),
			{Name: "Role", Type: "string", Description: doc},
			ageColumn(),
			{Name: "Users", Type: "string", Priority: 1, Description: "Users in the " + what},
			{Name: "Groups", Type: "string", Priority: 1, Description: "Groups in the " + what},
			{Name: "ServiceAccounts", Type: "string", Priority: 1, Description: "ServiceAccounts in the " + what},
		}
	}
	return nil
}

// rbacCells are the cells of an RBAC object, nil for other objects.
func rbacCells(obj runtime.Object, now time.Time) []any {
	switch o := obj.(type) {
	case *rbacv1.Role:
		return []any{o.Name, createdAt(o.CreationTimestamp)}
	case *rbacv1.ClusterRole:
		return []any{o.Name, createdAt(o.CreationTimestamp)}
	case *rbacv1.RoleBinding:
		return bindingCells(o.Name, o.RoleRef, o.Subjects, o.CreationTimestamp, now)
	case *rbacv1.ClusterRoleBinding:
		return bindingCells(o.Name, o.RoleRef, o.Subjects, o.CreationTimestamp, now)
	}
	return nil
}

// createdAt is the default table's date cell.
func createdAt(t metav1.Time) string { return t.UTC().Format(time.RFC3339) }

// bindingCells: name, Kind/name of the role, age, then the subjects by kind,
// comma-separated (service accounts as namespace/name).
func bindingCells(name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject, created metav1.Time, now time.Time) []any {
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		case rbacv1.ServiceAccountKind:
			sas = append(sas, s.Namespace+"/"+s.Name)
		}
	}
	return []any{name, ref.Kind + "/" + ref.Name, Age(created, now),
		strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}
}
