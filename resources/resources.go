// Package resources is the table of API resources everynode serves: their group,
// version, kind, scope, short names and Go types. The store, the API server and
// the client all read it, so a resource is added in exactly one place.
//
// The table is immutable after construction; it is safe for concurrent use.
package resources

import (
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/everynode/everynode/resources/core"
)

// Object is any API object everynode stores: Kubernetes ObjectMeta plus TypeMeta.
type Object = core.Object

// Resource describes one served resource (package core defines it).
type Resource = core.Resource

// The served resources. Each is a distinct value: compare by pointer or Name.
// The core/v1 ones are package core's.
var (
	Namespaces      = core.Namespaces
	Nodes           = core.Nodes
	Pods            = core.Pods
	Events          = core.Events
	ConfigMaps      = core.ConfigMaps
	Secrets         = core.Secrets
	ServiceAccounts = core.ServiceAccounts
)

var (
	DaemonSets = &Resource{
		Name: "daemonsets", Singular: "daemonset", Group: "apps", Version: "v1", Kind: "DaemonSet", Namespaced: true,
		ShortNames: []string{"ds"}, Categories: []string{"all"}, Subresources: []string{"status"},
		New:     func() Object { return &appsv1.DaemonSet{} },
		NewList: func() runtime.Object { return &appsv1.DaemonSetList{} },
		Proto:   core.ProtoCodecOf[appsv1.DaemonSet, appsv1.DaemonSetList](),
	}
	ControllerRevisions = &Resource{
		Name: "controllerrevisions", Singular: "controllerrevision", Group: "apps", Version: "v1",
		Kind: "ControllerRevision", Namespaced: true,
		New:     func() Object { return &appsv1.ControllerRevision{} },
		NewList: func() runtime.Object { return &appsv1.ControllerRevisionList{} },
		Proto:   core.ProtoCodecOf[appsv1.ControllerRevision, appsv1.ControllerRevisionList](),
	}
	// The rbac.authorization.k8s.io kinds (docs/rbac.md).
	Roles = &Resource{
		Name: "roles", Singular: "role", Group: rbacv1.GroupName, Version: "v1", Kind: "Role", Namespaced: true,
		New:     func() Object { return &rbacv1.Role{} },
		NewList: func() runtime.Object { return &rbacv1.RoleList{} },
		Proto:   core.ProtoCodecOf[rbacv1.Role, rbacv1.RoleList](),
	}
	RoleBindings = &Resource{
		Name: "rolebindings", Singular: "rolebinding", Group: rbacv1.GroupName, Version: "v1", Kind: "RoleBinding", Namespaced: true,
		New:     func() Object { return &rbacv1.RoleBinding{} },
		NewList: func() runtime.Object { return &rbacv1.RoleBindingList{} },
		Proto:   core.ProtoCodecOf[rbacv1.RoleBinding, rbacv1.RoleBindingList](),
	}
	ClusterRoles = &Resource{
		Name: "clusterroles", Singular: "clusterrole", Group: rbacv1.GroupName, Version: "v1", Kind: "ClusterRole",
		New:     func() Object { return &rbacv1.ClusterRole{} },
		NewList: func() runtime.Object { return &rbacv1.ClusterRoleList{} },
		Proto:   core.ProtoCodecOf[rbacv1.ClusterRole, rbacv1.ClusterRoleList](),
	}
	ClusterRoleBindings = &Resource{
		Name: "clusterrolebindings", Singular: "clusterrolebinding", Group: rbacv1.GroupName, Version: "v1", Kind: "ClusterRoleBinding",
		New:     func() Object { return &rbacv1.ClusterRoleBinding{} },
		NewList: func() runtime.Object { return &rbacv1.ClusterRoleBindingList{} },
		Proto:   core.ProtoCodecOf[rbacv1.ClusterRoleBinding, rbacv1.ClusterRoleBindingList](),
	}
)

// All returns every served resource, core group first, in a stable order.
func All() []*Resource {
	return append(append([]*Resource{Namespaces, Nodes, Pods, Events, ConfigMaps, Secrets, ServiceAccounts, DaemonSets, ControllerRevisions},
		storedKinds()...), ClusterRoleBindings, ClusterRoles, RoleBindings, Roles)
}

// ByName finds a resource by plural name, singular name, short name or kind
// (case-sensitive for kind, lower-case otherwise). It returns nil when none matches.
func ByName(name string) *Resource {
	for _, r := range All() {
		if r.Name == name || r.Singular == name || r.Kind == name {
			return r
		}
		for _, s := range r.ShortNames {
			if s == name {
				return r
			}
		}
	}
	return nil
}

// ByGVK finds the resource serving the given apiVersion and kind, or nil.
func ByGVK(gvk schema.GroupVersionKind) *Resource {
	for _, r := range All() {
		if r.GVK() == gvk {
			return r
		}
	}
	return nil
}

// ForObject finds the resource of a typed object by its Go type, or nil.
func ForObject(obj runtime.Object) *Resource {
	if r := core.ForObject(obj); r != nil {
		return r
	}
	switch obj.(type) {
	case *appsv1.DaemonSet:
		return DaemonSets
	case *appsv1.ControllerRevision:
		return ControllerRevisions
	case *rbacv1.Role:
		return Roles
	case *rbacv1.RoleBinding:
		return RoleBindings
	case *rbacv1.ClusterRole:
		return ClusterRoles
	case *rbacv1.ClusterRoleBinding:
		return ClusterRoleBindings
	}
	return forStoredObject(obj)
}
