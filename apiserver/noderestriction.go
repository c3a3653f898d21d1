package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// Node identities, as package pki's AuthenticateToken returns them.
const (
	nodeUserPrefix = "system:node:"
	nodesGroup     = "system:nodes"
)

// mirrorPodAnnotation marks a static pod's mirror in the API (kubelet's key).
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

// PodLookup reads the stored pod a node's delete targets. *store.Store
// satisfies it through StorePods. (Status writes need no lookup: they are
// checked against the pod they replace, in AdmitUpdate.)
type PodLookup func(ctx context.Context, namespace, name string) (*corev1.Pod, error)

// StorePods is a PodLookup reading st (a linearizable read). A missing pod
// is (nil, nil).
func StorePods(st *store.Store) PodLookup {
	return func(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
		obj, err := st.Get(ctx, resources.Pods, namespace, name)
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
}

// NodeRestriction is the Authorizer for node credentials, after Kubernetes'
// Node authorizer and NodeRestriction admission: a user system:node:<X> in
// group system:nodes may
//   - read (get, list, watch) nodes, pods, namespaces, daemonsets,
//     controllerrevisions and events;
//   - create, update, patch (and delete) only its own Node X, status included;
//   - update or patch the status of pods bound to X (spec.nodeName of the
//     pod the write replaces, checked in AdmitUpdate as Kubernetes'
//     NodeRestriction admission checks the old object), delete pods bound
//     to X, and create only mirror pods (annotation
//     kubernetes.io/config.mirror) bound to X;
//   - create, update and patch events.
//
// Everything else is 403 Forbidden. Users that are not nodes (and not in
// system:masters, which the server always allows) are refused everything:
// everynode issues no other credentials.
type NodeRestriction struct {
	pods PodLookup
}

// NewNodeRestriction returns the authorizer; pods reads the stored pod a
// delete targets (StorePods(st)).
func NewNodeRestriction(pods PodLookup) *NodeRestriction {
	return &NodeRestriction{pods: pods}
}

var (
	_ Authorizer     = (*NodeRestriction)(nil)
	_ UpdateAdmitter = (*NodeRestriction)(nil)
)

// nodeReadable are the resources a node may read.
var nodeReadable = map[string]bool{
	resources.Nodes.Name: true, resources.Pods.Name: true, resources.Namespaces.Name: true,
	"daemonsets": true, "controllerrevisions": true, "events": true,
}

// Authorize implements Authorizer.
func (n *NodeRestriction) Authorize(ctx context.Context, a Attributes) error {
	node, ok := nodeName(a.User)
	if !ok {
		return forbiddenRBAC(a)
	}
	switch a.Verb {
	case "get", "list", "watch":
		if nodeReadable[a.Resource] {
			return nil
		}
		return forbiddenRBAC(a)
	}
	switch a.Resource {
	case resources.Nodes.Name:
		return n.authorizeNode(node, a)
	case resources.Pods.Name:
		return n.authorizePod(ctx, node, a)
	case "events":
		switch a.Verb {
		case "create", "update", "patch":
			return nil
		}
	}
	return forbiddenRBAC(a)
}

// nodeName returns X for the user system:node:X in group system:nodes.
func nodeName(u UserInfo) (string, bool) {
	name, ok := strings.CutPrefix(u.Name, nodeUserPrefix)
	if !ok || name == "" || !u.InGroup(nodesGroup) {
		return "", false
	}
	return name, true
}

func (n *NodeRestriction) authorizeNode(node string, a Attributes) error {
	switch a.Verb {
	case "create", "update", "patch", "delete":
		if a.Name == node {
			return nil
		}
		return forbidden(a, fmt.Sprintf("node %q may only modify its own Node object, not node %q", node, a.Name))
	}
	return forbiddenRBAC(a)
}

func (n *NodeRestriction) authorizePod(ctx context.Context, node string, a Attributes) error {
	switch {
	case a.Verb == "create" && a.Subresource == "":
		p, ok := a.Object.(*corev1.Pod)
		if !ok || p.Spec.NodeName != node {
			return forbidden(a, fmt.Sprintf("node %q may only create mirror pods bound to itself (spec.nodeName %q)", node, node))
		}
		if _, mirror := p.Annotations[mirrorPodAnnotation]; !mirror {
			return forbidden(a, fmt.Sprintf("node %q may only create mirror pods (annotation %s)", node, mirrorPodAnnotation))
		}
		return nil
	case (a.Verb == "update" || a.Verb == "patch") && a.Subresource == "status":
		return nil // AdmitUpdate checks the pod the write replaces
	case a.Verb == "delete" && a.Subresource == "":
		p, err := n.pods(ctx, a.Namespace, a.Name)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("node authorization: read pod %s/%s: %w", a.Namespace, a.Name, err))
		}
		if p == nil {
			return nil // the delete itself answers 404
		}
		return boundTo(node, "delete", a, p)
	case a.Verb == "update" || a.Verb == "patch":
		return forbidden(a, fmt.Sprintf("node %q may only update the status of pods, not their spec or metadata", node))
	}
	return forbiddenRBAC(a)
}

// AdmitUpdate implements UpdateAdmitter: a node may write the status of a
// pod only while the pod it replaces is bound to that node.
func (n *NodeRestriction) AdmitUpdate(_ context.Context, a Attributes, old resources.Object) error {
	node, ok := nodeName(a.User)
	if !ok || a.Resource != resources.Pods.Name || a.Subresource != "status" {
		return nil // Authorize decided alone
	}
	p, ok := old.(*corev1.Pod)
	if !ok {
		return apierrors.NewInternalError(fmt.Errorf("node authorization: stored pod %s/%s is a %T", a.Namespace, a.Name, old))
	}
	return boundTo(node, "update the status of", a, p)
}

// boundTo allows a node to act (what) on pod p only when p is bound to it.
func boundTo(node, what string, a Attributes, p *corev1.Pod) error {
	if p.Spec.NodeName != node {
		return forbidden(a, fmt.Sprintf("node %q may only %s pods bound to itself (this pod is bound to %q)", node, what, p.Spec.NodeName))
	}
	return nil
}

// forbidden is Kubernetes' 403: `<resource> "<name>" is forbidden: <why>`.
func forbidden(a Attributes, why string) error {
	gr := schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}
	return apierrors.NewForbidden(gr, a.Name, errors.New(why))
}

// forbiddenRBAC is the 403 of a verb the user has no rule for, worded as
// Kubernetes' RBAC words it.
func forbiddenRBAC(a Attributes) error {
	what := a.Resource
	if a.Subresource != "" {
		what += "/" + a.Subresource
	}
	msg := fmt.Sprintf("User %q cannot %s resource %q in API group %q", a.User.Name, a.Verb, what, a.APIGroup)
	if a.Namespace != "" {
		msg += fmt.Sprintf(" in the namespace %q", a.Namespace)
	} else {
		msg += " at the cluster scope"
	}
	return forbidden(a, msg)
}
