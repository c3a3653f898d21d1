// Package core is the part of everynode's resource table that every
// component needs: the Resource type and the core/v1 kinds (namespaces,
// nodes, pods, events, config maps, secrets, service accounts). Package
// resources holds the whole table and re-exports these; the node agent and
// the client import this package alone, so that a binary of theirs links
// no other API group (internal/deps checks the lean agent's).
//
// The table is immutable after construction; it is safe for concurrent use.
package core

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Object is any API object everynode stores: Kubernetes ObjectMeta plus TypeMeta.
type Object interface {
	metav1.Object
	runtime.Object
}

// Resource describes one served resource.
type Resource struct {
	// Name is the plural lower-case resource name, as in URLs ("daemonsets").
	Name string
	// Singular is the singular lower-case name ("daemonset").
	Singular string
	// Group is the API group ("" for core, "apps").
	Group string
	// Version is the API version ("v1").
	Version string
	// Kind is the object kind ("DaemonSet"); lists are Kind+"List".
	Kind string
	// Namespaced says whether objects live in a namespace.
	Namespaced bool
	// ShortNames are kubectl's aliases ("ds").
	ShortNames []string
	// Categories are kubectl's groupings ("all").
	Categories []string
	// Subresources are the served subresources ("status", "log").
	Subresources []string
	// New returns an empty object of this resource's Go type.
	New func() Object
	// NewList returns an empty list of this resource's Go type.
	NewList func() runtime.Object
	// Proto encodes and decodes objects and lists in Kubernetes' protobuf
	// (ProtoCodecOf the Go types of New and NewList); nil for a kind
	// without protobuf.
	Proto *ProtoCodec
}

// GroupVersion returns the resource's group and version.
func (r *Resource) GroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: r.Group, Version: r.Version}
}

// APIVersion returns the apiVersion string objects carry ("v1", "apps/v1").
func (r *Resource) APIVersion() string { return r.GroupVersion().String() }

// GVK returns the object's group, version and kind.
func (r *Resource) GVK() schema.GroupVersionKind { return r.GroupVersion().WithKind(r.Kind) }

// GVR returns the group, version and resource.
func (r *Resource) GVR() schema.GroupVersionResource { return r.GroupVersion().WithResource(r.Name) }

// GroupResource returns the group-qualified resource used in error messages
// ("daemonsets.apps", "pods").
func (r *Resource) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: r.Group, Resource: r.Name}
}

// SetTypeMeta stamps apiVersion and kind on obj, which json.Marshal of a typed
// object otherwise leaves empty.
func (r *Resource) SetTypeMeta(obj runtime.Object) {
	obj.GetObjectKind().SetGroupVersionKind(r.GVK())
}

// The core/v1 resources. Each is a distinct value: compare by pointer or Name.
var (
	Namespaces = &Resource{
		Name: "namespaces", Singular: "namespace", Version: "v1", Kind: "Namespace",
		ShortNames: []string{"ns"}, Subresources: []string{"status"},
		New:     func() Object { return &corev1.Namespace{} },
		NewList: func() runtime.Object { return &corev1.NamespaceList{} },
		Proto:   ProtoCodecOf[corev1.Namespace, corev1.NamespaceList](),
	}
	Nodes = &Resource{
		Name: "nodes", Singular: "node", Version: "v1", Kind: "Node",
		ShortNames: []string{"no"}, Subresources: []string{"status"},
		New:     func() Object { return &corev1.Node{} },
		NewList: func() runtime.Object { return &corev1.NodeList{} },
		Proto:   ProtoCodecOf[corev1.Node, corev1.NodeList](),
	}
	Pods = &Resource{
		Name: "pods", Singular: "pod", Version: "v1", Kind: "Pod", Namespaced: true,
		ShortNames: []string{"po"}, Categories: []string{"all"}, Subresources: []string{"status", "log"},
		New:     func() Object { return &corev1.Pod{} },
		NewList: func() runtime.Object { return &corev1.PodList{} },
		Proto:   ProtoCodecOf[corev1.Pod, corev1.PodList](),
	}
	Events = &Resource{
		Name: "events", Singular: "event", Version: "v1", Kind: "Event", Namespaced: true,
		ShortNames: []string{"ev"},
		New:        func() Object { return &corev1.Event{} },
		NewList:    func() runtime.Object { return &corev1.EventList{} },
		Proto:      ProtoCodecOf[corev1.Event, corev1.EventList](),
	}
	ConfigMaps = &Resource{
		Name: "configmaps", Singular: "configmap", Version: "v1", Kind: "ConfigMap", Namespaced: true,
		ShortNames: []string{"cm"},
		New:        func() Object { return &corev1.ConfigMap{} },
		NewList:    func() runtime.Object { return &corev1.ConfigMapList{} },
		Proto:      ProtoCodecOf[corev1.ConfigMap, corev1.ConfigMapList](),
	}
	Secrets = &Resource{
		Name: "secrets", Singular: "secret", Version: "v1", Kind: "Secret", Namespaced: true,
		New:     func() Object { return &corev1.Secret{} },
		NewList: func() runtime.Object { return &corev1.SecretList{} },
		Proto:   ProtoCodecOf[corev1.Secret, corev1.SecretList](),
	}
	ServiceAccounts = &Resource{
		Name: "serviceaccounts", Singular: "serviceaccount", Version: "v1", Kind: "ServiceAccount", Namespaced: true,
		ShortNames: []string{"sa"},
		New:        func() Object { return &corev1.ServiceAccount{} },
		NewList:    func() runtime.Object { return &corev1.ServiceAccountList{} },
		Proto:      ProtoCodecOf[corev1.ServiceAccount, corev1.ServiceAccountList](),
	}
)

// ForObject finds the core/v1 resource of a typed object by its Go type, or
// nil (resources.ForObject knows every served kind).
func ForObject(obj runtime.Object) *Resource {
	switch obj.(type) {
	case *corev1.Namespace:
		return Namespaces
	case *corev1.Node:
		return Nodes
	case *corev1.Pod:
		return Pods
	case *corev1.Event:
		return Events
	case *corev1.ConfigMap:
		return ConfigMaps
	case *corev1.Secret:
		return Secrets
	case *corev1.ServiceAccount:
		return ServiceAccounts
	}
	return nil
}
