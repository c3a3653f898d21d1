package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/resources/nodelabels"
)

// Node identities, as package pki's AuthenticateToken returns them.
const (
	nodeUserPrefix = "system:node:"
	nodesGroup     = "system:nodes"
)

// mirrorPodAnnotation marks a static pod's mirror in the API (kubelet's key).
const mirrorPodAnnotation = corev1.MirrorPodAnnotationKey

// NodeRestriction is the Authorizer for node credentials: Kubernetes' Node
// authorizer with AuthorizeNodeWithSelectors (1.32+) and its NodeRestriction
// admission plugin in one (docs/security.md §3). A user system:node:<X> in
// group system:nodes may
//   - get its own Node, and list or watch nodes only with
//     metadata.name=<X>; create, update and patch its own Node and its
//     status, but not set node-restriction.kubernetes.io/ labels nor
//     kubernetes.io or k8s.io labels other than kubelet's, nor change its
//     taints once registered; delete only its own Node;
//   - get pods bound to it, and list or watch pods only with the field
//     selector spec.nodeName=<X>; write the status of pods bound to it (not
//     their labels); delete and evict only pods bound to it; create only
//     mirror pods bound to it, owned by its Node and referring to no
//     ServiceAccount, Secret, ConfigMap or PersistentVolumeClaim;
//   - get (list and watch with metadata.name) the Secrets and ConfigMaps,
//     get the ServiceAccounts and create tokens of the ServiceAccounts that
//     pods bound to it refer to;
//   - create, update and patch events; read Services (should they be
//     served), as Kubernetes' node rules allow;
//   - read the discovery documents, OpenAPI, /version and the health checks.
//
// Everything else is 403 Forbidden with Kubernetes' message, /metrics and
// pods/log included. Users that are not nodes are not its business
// (Applies): without another authorizer the server refuses them everything,
// as everynode issues no other credentials.
type NodeRestriction struct {
	graph NodeGraph
}

// NewNodeRestriction returns the node authorizer reading graph (StoreGraph).
func NewNodeRestriction(graph NodeGraph) *NodeRestriction {
	return &NodeRestriction{graph: graph}
}

var (
	_ Authorizer     = (*NodeRestriction)(nil)
	_ UpdateAdmitter = (*NodeRestriction)(nil)
)

// Applies reports whether u is a node (system:node:<name> in group
// system:nodes), the only users NodeRestriction decides for. An
// authorizer chain asks it first and passes other users on.
func (n *NodeRestriction) Applies(u UserInfo) bool {
	_, ok := nodeName(u)
	return ok
}

// nodeName returns X for the user system:node:X in group system:nodes.
func nodeName(u UserInfo) (string, bool) {
	name, ok := strings.CutPrefix(u.Name, nodeUserPrefix)
	if !ok || name == "" || !u.InGroup(nodesGroup) {
		return "", false
	}
	return name, true
}

// Authorize implements Authorizer.
func (n *NodeRestriction) Authorize(ctx context.Context, a Attributes) error {
	node, ok := nodeName(a.User)
	if !ok {
		return denied(a, "")
	}
	if a.Resource == "" {
		return n.authorizePath(a)
	}
	switch (schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}) {
	case resources.Nodes.GroupResource():
		return n.authorizeNode(node, a)
	case resources.Pods.GroupResource():
		return n.authorizePod(ctx, node, a)
	case resources.Secrets.GroupResource(), resources.ConfigMaps.GroupResource():
		return n.authorizeReadReferenced(ctx, node, a)
	case resources.ServiceAccounts.GroupResource():
		return n.authorizeServiceAccount(ctx, node, a)
	case resources.Events.GroupResource():
		switch a.Verb {
		case "create", "update", "patch":
			return nil
		}
	case schema.GroupResource{Resource: "services"}:
		// Kubernetes' node rules: kubelet reads Services for the
		// <NAME>_SERVICE_HOST variables of the pods it starts.
		switch a.Verb {
		case "get", "list", "watch":
			return nil
		}
	}
	return denied(a, "")
}

// nodePaths are the non-resource paths every authenticated user may read
// (Kubernetes' system:discovery, system:basic-user and
// system:public-info-viewer roles); /metrics is not one of them.
func nodePath(p string) bool {
	switch p {
	case "/api", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi/v2", "/openapi/v3":
		return true
	}
	return strings.HasPrefix(p, "/api/") || strings.HasPrefix(p, "/apis/") || strings.HasPrefix(p, "/openapi/v3/")
}

func (n *NodeRestriction) authorizePath(a Attributes) error {
	if a.Verb == "get" && nodePath(a.Path) {
		return nil
	}
	// Nodes read the image store to fetch the images of their pods; only
	// admins load and remove images.
	if (a.Verb == "get" || a.Verb == "head") && imageStorePath(a.Path) {
		return nil
	}
	return denied(a, "")
}

func (n *NodeRestriction) authorizeNode(node string, a Attributes) error {
	switch a.Subresource {
	case "":
		switch a.Verb {
		case "create", "update", "patch", "delete":
			return admitNodeName(node, a) // the rest in admitNodeCreate and AdmitUpdate
		case "get", "list", "watch":
			switch name := singleName(a); name {
			case node:
				return nil
			case "":
				return denied(a, fmt.Sprintf("node '%s' cannot read all nodes, only its own Node object", node))
			default:
				return denied(a, fmt.Sprintf("node '%s' cannot read '%s', only its own Node object", node, name))
			}
		}
	case "status":
		switch a.Verb {
		case "update", "patch":
			return admitNodeName(node, a)
		}
	}
	return denied(a, "")
}

// admitNodeName is NodeRestriction's rule that a node writes only its own
// Node; a create also has its labels checked.
func admitNodeName(node string, a Attributes) error {
	if a.Name != node {
		return admissionForbidden(a, fmt.Sprintf("node %q is not allowed to modify node %q", node, a.Name))
	}
	if a.Verb != "create" {
		return nil
	}
	obj, ok := a.Object.(*corev1.Node)
	if !ok {
		return admissionForbidden(a, fmt.Sprintf("unexpected type %T", a.Object))
	}
	if obj.Spec.ConfigSource != nil {
		return admissionForbidden(a, fmt.Sprintf("node %q is not allowed to create pods with a non-nil configSource", node))
	}
	if bad := nodelabels.ForbiddenOf(obj.Labels); len(bad) > 0 {
		return admissionForbidden(a, fmt.Sprintf("node %q is not allowed to set the following labels: %s", node, strings.Join(bad, ", ")))
	}
	return nil
}

func (n *NodeRestriction) authorizePod(ctx context.Context, node string, a Attributes) error {
	switch a.Subresource {
	case "":
		switch a.Verb {
		case "get":
			return n.authorizeBoundPod(ctx, node, a, a.Name)
		case "list", "watch":
			if selects(a.FieldSelector, "spec.nodeName", node) {
				return nil
			}
			if name := singleName(a); name != "" {
				return n.authorizeBoundPod(ctx, node, a, name)
			}
			return denied(a, "can only list/watch pods with spec.nodeName field selector")
		case "create":
			return n.admitMirrorPod(ctx, node, a)
		case "delete":
			return n.admitBoundPod(ctx, node, a, "node %q can only delete pods with spec.nodeName set to itself")
		}
	case "status":
		switch a.Verb {
		case "update", "patch":
			return nil // AdmitUpdate checks the pod the write replaces
		}
	case "eviction":
		if a.Verb == "create" {
			return n.admitBoundPod(ctx, node, a, "node %s can only evict pods with spec.nodeName set to itself")
		}
	}
	return denied(a, "")
}

// authorizeBoundPod allows reading pod name when it is bound to node. A
// pod that does not exist is let through (the read answers 404), so that
// an agent tells a missing mirror pod from another node's pod.
func (n *NodeRestriction) authorizeBoundPod(ctx context.Context, node string, a Attributes, name string) error {
	p, err := n.graph.Pod(ctx, a.Namespace, name)
	if err != nil {
		return graphError(err)
	}
	if p == nil || p.Spec.NodeName == node {
		return nil
	}
	return denied(a, noRelationship(node))
}

// admitBoundPod allows a delete or eviction of a pod bound to node; a
// missing pod is 404, as NodeRestriction answers.
func (n *NodeRestriction) admitBoundPod(ctx context.Context, node string, a Attributes, format string) error {
	p, err := n.graph.Pod(ctx, a.Namespace, a.Name)
	if err != nil {
		return graphError(err)
	}
	if p == nil {
		return apierrors.NewNotFound(resources.Pods.GroupResource(), a.Name)
	}
	if p.Spec.NodeName != node {
		return admissionForbidden(a, fmt.Sprintf(format, node))
	}
	return nil
}

// admitMirrorPod is NodeRestriction's rule for pods a node creates: mirror
// pods bound to itself, owned by its Node, referring to nothing a node
// could read through them.
func (n *NodeRestriction) admitMirrorPod(ctx context.Context, node string, a Attributes) error {
	pod, ok := a.Object.(*corev1.Pod)
	if !ok {
		return admissionForbidden(a, fmt.Sprintf("unexpected type %T", a.Object))
	}
	if _, mirror := pod.Annotations[mirrorPodAnnotation]; !mirror {
		return admissionForbidden(a, fmt.Sprintf("pod does not have %q annotation, node %q can only create mirror pods", mirrorPodAnnotation, node))
	}
	if pod.Spec.NodeName != node {
		return admissionForbidden(a, fmt.Sprintf("node %q can only create pods with spec.nodeName set to itself", node))
	}
	switch len(pod.OwnerReferences) {
	case 0:
		return admissionForbidden(a, fmt.Sprintf("node %q can only create pods with an owner reference set to itself", node))
	case 1:
	default:
		return admissionForbidden(a, fmt.Sprintf("node %q can only create pods with a single owner reference set to itself", node))
	}
	owner := pod.OwnerReferences[0]
	if owner.APIVersion != "v1" || owner.Kind != "Node" || owner.Name != node {
		return admissionForbidden(a, fmt.Sprintf("node %q can only create pods with an owner reference set to itself", node))
	}
	if owner.Controller == nil || !*owner.Controller {
		return admissionForbidden(a, fmt.Sprintf("node %q can only create pods with a controller owner reference set to itself", node))
	}
	if owner.BlockOwnerDeletion != nil && *owner.BlockOwnerDeletion {
		return admissionForbidden(a, fmt.Sprintf("node %q must not set blockOwnerDeletion on an owner reference", node))
	}
	nodeObj, err := n.graph.Node(ctx, node)
	if err != nil {
		return admissionForbidden(a, fmt.Sprintf("error looking up node %s to verify uid: %v", node, err))
	}
	if nodeObj == nil {
		return apierrors.NewNotFound(resources.Nodes.GroupResource(), node)
	}
	if owner.UID != nodeObj.UID {
		return admissionForbidden(a, fmt.Sprintf("node %s UID mismatch: expected %s got %s", node, owner.UID, nodeObj.UID))
	}
	if pod.Spec.ServiceAccountName != "" {
		return admissionForbidden(a, fmt.Sprintf("node %q can not create pods that reference a service account", node))
	}
	if !podSecretNames(pod, func(string) bool { return false }) {
		return admissionForbidden(a, fmt.Sprintf("node %q can not create pods that reference secrets", node))
	}
	if !podConfigMapNames(pod, func(string) bool { return false }) {
		return admissionForbidden(a, fmt.Sprintf("node %q can not create pods that reference configmaps", node))
	}
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool { return s.ClusterTrustBundle != nil }) {
			return admissionForbidden(a, fmt.Sprintf("node %q can not create pods that reference clustertrustbundles", node))
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			return admissionForbidden(a, fmt.Sprintf("node %q can not create pods that reference persistentvolumeclaims", node))
		}
	}
	return nil
}

// authorizeReadReferenced allows get, list and watch of one Secret or
// ConfigMap that a pod bound to node refers to.
func (n *NodeRestriction) authorizeReadReferenced(ctx context.Context, node string, a Attributes) error {
	switch a.Verb {
	case "get", "list", "watch":
	default:
		return denied(a, "can only read resources of this type")
	}
	if a.Subresource != "" {
		return denied(a, "cannot read subresource")
	}
	if a.Namespace == "" {
		return denied(a, "can only read namespaced object of this type")
	}
	return n.authorizeReferenced(ctx, node, a, singleName(a))
}

// authorizeServiceAccount allows a token request for (and a get of) a
// ServiceAccount a pod bound to node runs as.
func (n *NodeRestriction) authorizeServiceAccount(ctx context.Context, node string, a Attributes) error {
	if a.Verb == "get" && a.Subresource == "" {
		return n.authorizeReferenced(ctx, node, a, a.Name)
	}
	if a.Verb != "create" || a.Name == "" {
		return denied(a, "can only create tokens for individual service accounts")
	}
	if a.Subresource != "token" {
		return denied(a, "can only create token subresource of serviceaccount")
	}
	return n.authorizeReferenced(ctx, node, a, a.Name)
}

// authorizeReferenced is the graph walk node <- pod <- object.
func (n *NodeRestriction) authorizeReferenced(ctx context.Context, node string, a Attributes, name string) error {
	if name == "" {
		return denied(a, "No Object name found")
	}
	pods, err := n.graph.PodsOnNode(ctx, node)
	if err != nil {
		return graphError(err)
	}
	for _, p := range pods {
		if p.Namespace == a.Namespace && podRefers(p, a.Resource, name) {
			return nil
		}
	}
	return denied(a, noRelationship(node))
}

// AdmitUpdate implements UpdateAdmitter: the NodeRestriction rules that
// compare the object a node's update or patch writes (a.Object; nil before
// the change is made, when only old is checked) with the one it replaces
// (old).
func (n *NodeRestriction) AdmitUpdate(_ context.Context, a Attributes, old resources.Object) error {
	node, ok := nodeName(a.User)
	if !ok {
		return nil // Authorize decided alone
	}
	switch a.Resource {
	case resources.Pods.Name:
		if a.Subresource != "status" {
			return nil
		}
		oldPod, ok := old.(*corev1.Pod)
		if !ok {
			return admissionForbidden(a, fmt.Sprintf("unexpected type %T", old))
		}
		if oldPod.Spec.NodeName != node {
			return admissionForbidden(a, fmt.Sprintf("node %q can only update pod status for pods with spec.nodeName set to itself", node))
		}
		if newPod, ok := a.Object.(*corev1.Pod); ok && !labels.Equals(oldPod.Labels, newPod.Labels) {
			return admissionForbidden(a, fmt.Sprintf("node %q cannot update labels through pod status", node))
		}
	case resources.Nodes.Name:
		oldNode, ok := old.(*corev1.Node)
		if !ok {
			return admissionForbidden(a, fmt.Sprintf("unexpected type %T", old))
		}
		newNode, ok := a.Object.(*corev1.Node)
		if !ok {
			return nil // before the change: Authorize checked the name
		}
		if newNode.Spec.ConfigSource != nil && !apiequality.Semantic.DeepEqual(newNode.Spec.ConfigSource, oldNode.Spec.ConfigSource) {
			return admissionForbidden(a, fmt.Sprintf("node %q is not allowed to update configSource to a new non-nil configSource", node))
		}
		if !apiequality.Semantic.DeepEqual(newNode.Spec.Taints, oldNode.Spec.Taints) {
			return admissionForbidden(a, fmt.Sprintf("node %q is not allowed to modify taints", node))
		}
		if bad := nodelabels.Forbidden(nodelabels.Modified(newNode.Labels, oldNode.Labels)); len(bad) > 0 {
			return admissionForbidden(a, "is not allowed to modify labels: "+strings.Join(bad, ", "))
		}
	}
	return nil
}

// ForbiddenNodeLabels returns the label keys of labels a node may not set
// on itself (sorted), for agents to refuse such --labels before they try.
func ForbiddenNodeLabels(labels map[string]string) []string {
	return nodelabels.ForbiddenOf(labels)
}

// singleName is the object a read names: its name, or for a list or watch
// the metadata.name=<name> of its field selector, as kube-apiserver's
// RequestInfo takes it.
func singleName(a Attributes) string {
	if a.Name != "" || a.FieldSelector == nil {
		return a.Name
	}
	if v, ok := a.FieldSelector.RequiresExactMatch("metadata.name"); ok {
		return v
	}
	return ""
}

// selects reports whether sel requires field == value.
func selects(sel fields.Selector, field, value string) bool {
	if sel == nil {
		return false
	}
	for _, r := range sel.Requirements() {
		if r.Field == field && (r.Operator == selection.Equals || r.Operator == selection.DoubleEquals) && r.Value == value {
			return true
		}
	}
	return false
}

func noRelationship(node string) string {
	return fmt.Sprintf("no relationship found between node '%s' and this object", node)
}

func graphError(err error) error {
	return apierrors.NewInternalError(fmt.Errorf("node authorization: %w", err))
}

// admissionForbidden is NodeRestriction admission's 403:
// `<resource> "<name>" is forbidden: <why>`.
func admissionForbidden(a Attributes, why string) error {
	gr := schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}
	name := a.Name
	if name == "" && a.Object != nil {
		name = a.Object.GetName()
	}
	return apierrors.NewForbidden(gr, name, errors.New(why))
}

// denied is the authorizer's 403, worded as kube-apiserver words it:
// `<resource> "<name>" is forbidden: User "<user>" cannot <verb> resource
// "<resource>" in API group "<group>" in the namespace "<ns>"[: <reason>]`,
// or for a non-resource path `forbidden: User "<user>" cannot <verb> path
// "<path>"`.
func denied(a Attributes, reason string) error {
	if a.Resource == "" {
		msg := fmt.Sprintf("User %q cannot %s path %q", a.User.Name, a.Verb, a.Path)
		if reason != "" {
			msg += ": " + reason
		}
		return apierrors.NewForbidden(schema.GroupResource{}, "", errors.New(msg))
	}
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
	if reason != "" {
		msg += ": " + reason
	}
	gr := schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}
	return apierrors.NewForbidden(gr, a.Name, errors.New(msg))
}
