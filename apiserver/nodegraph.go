package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// NodeGraph is what the node authorizer reads to relate a node to the
// objects it asks for, as Kubernetes' node authorizer reads its graph
// (node <- pod <- secret, configmap, serviceaccount). Here the edges are
// found on demand from the pods bound to the node, which the store indexes
// by spec.nodeName, so a decision always sees the latest pods.
type NodeGraph interface {
	// Pod is the stored pod namespace/name; a missing pod is (nil, nil).
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// PodsOnNode are the pods whose spec.nodeName is node.
	PodsOnNode(ctx context.Context, node string) ([]*corev1.Pod, error)
	// Node is the stored Node; a missing one is (nil, nil).
	Node(ctx context.Context, name string) (*corev1.Node, error)
}

// StoreGraph is the NodeGraph of a store (reads served by its watch cache
// and its node index).
func StoreGraph(st *store.Store) NodeGraph { return storeGraph{st} }

type storeGraph struct{ st *store.Store }

func (g storeGraph) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	obj, err := g.st.Get(ctx, resources.Pods, namespace, name)
	if store.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("stored pod %s/%s is a %T", namespace, name, obj)
	}
	return p, nil
}

func (g storeGraph) PodsOnNode(ctx context.Context, node string) ([]*corev1.Pod, error) {
	sel := store.Selector{Field: fields.OneTermEqualSelector("spec.nodeName", node)}
	objs, _, err := g.st.List(ctx, resources.Pods, "", sel)
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

func (g storeGraph) Node(ctx context.Context, name string) (*corev1.Node, error) {
	obj, err := g.st.Get(ctx, resources.Nodes, "", name)
	if store.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return nil, fmt.Errorf("stored node %s is a %T", name, obj)
	}
	return n, nil
}

// podSecretNames calls visit with the name of every Secret pod refers to
// (image pull secrets, env, envFrom, secret and projected volumes, and the
// secret references of the volume plugins that have one), as Kubernetes'
// VisitPodSecretNames; visit returns false to stop.
func podSecretNames(pod *corev1.Pod, visit func(string) bool) bool {
	v := nonEmpty(visit)
	for _, r := range pod.Spec.ImagePullSecrets {
		if !v(r.Name) {
			return false
		}
	}
	if !eachContainer(&pod.Spec, func(c *corev1.Container) bool {
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil && !v(e.SecretRef.Name) {
				return false
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !v(e.ValueFrom.SecretKeyRef.Name) {
				return false
			}
		}
		return true
	}) {
		return false
	}
	for i := range pod.Spec.Volumes {
		for _, name := range volumeSecretNames(&pod.Spec.Volumes[i].VolumeSource) {
			if !v(name) {
				return false
			}
		}
	}
	return true
}

// volumeSecretNames are the Secrets one volume source names.
func volumeSecretNames(s *corev1.VolumeSource) []string {
	ref := func(r *corev1.LocalObjectReference) []string {
		if r == nil {
			return nil
		}
		return []string{r.Name}
	}
	switch {
	case s.Secret != nil:
		return []string{s.Secret.SecretName}
	case s.Projected != nil:
		var out []string
		for _, p := range s.Projected.Sources {
			if p.Secret != nil {
				out = append(out, p.Secret.Name)
			}
		}
		return out
	case s.AzureFile != nil:
		return []string{s.AzureFile.SecretName}
	case s.CephFS != nil:
		return ref(s.CephFS.SecretRef)
	case s.Cinder != nil:
		return ref(s.Cinder.SecretRef)
	case s.FlexVolume != nil:
		return ref(s.FlexVolume.SecretRef)
	case s.RBD != nil:
		return ref(s.RBD.SecretRef)
	case s.ScaleIO != nil:
		return ref(s.ScaleIO.SecretRef)
	case s.ISCSI != nil:
		return ref(s.ISCSI.SecretRef)
	case s.StorageOS != nil:
		if s.StorageOS.SecretRef != nil {
			return []string{s.StorageOS.SecretRef.Name}
		}
	case s.CSI != nil:
		return ref(s.CSI.NodePublishSecretRef)
	}
	return nil
}

// podConfigMapNames calls visit with the name of every ConfigMap pod refers
// to (env, envFrom, configMap and projected volumes), as Kubernetes'
// VisitPodConfigmapNames; visit returns false to stop.
func podConfigMapNames(pod *corev1.Pod, visit func(string) bool) bool {
	v := nonEmpty(visit)
	if !eachContainer(&pod.Spec, func(c *corev1.Container) bool {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil && !v(e.ConfigMapRef.Name) {
				return false
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil && !v(e.ValueFrom.ConfigMapKeyRef.Name) {
				return false
			}
		}
		return true
	}) {
		return false
	}
	for _, vol := range pod.Spec.Volumes {
		switch {
		case vol.ConfigMap != nil:
			if !v(vol.ConfigMap.Name) {
				return false
			}
		case vol.Projected != nil:
			for _, p := range vol.Projected.Sources {
				if p.ConfigMap != nil && !v(p.ConfigMap.Name) {
					return false
				}
			}
		}
	}
	return true
}

// eachContainer calls f for every init, regular and ephemeral container of
// spec until it returns false.
func eachContainer(spec *corev1.PodSpec, f func(*corev1.Container) bool) bool {
	for i := range spec.InitContainers {
		if !f(&spec.InitContainers[i]) {
			return false
		}
	}
	for i := range spec.Containers {
		if !f(&spec.Containers[i]) {
			return false
		}
	}
	for i := range spec.EphemeralContainers {
		if !f((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon)) {
			return false
		}
	}
	return true
}

func nonEmpty(visit func(string) bool) func(string) bool {
	return func(name string) bool { return name == "" || visit(name) }
}

// podRefers reports whether pod refers to the object of resource (secrets,
// configmaps or serviceaccounts) named name in its own namespace.
func podRefers(pod *corev1.Pod, resource, name string) bool {
	found := false
	match := func(n string) bool {
		if n == name {
			found = true
			return false
		}
		return true
	}
	switch resource {
	case resources.Secrets.Name:
		podSecretNames(pod, match)
	case resources.ConfigMaps.Name:
		podConfigMapNames(pod, match)
	case resources.ServiceAccounts.Name:
		sa := pod.Spec.ServiceAccountName
		found = sa == name || (sa == "" && name == "default" && pod.Annotations[mirrorPodAnnotation] == "")
	}
	return found
}
