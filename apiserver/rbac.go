package apiserver

import (
	"context"
	"fmt"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	rbacregistryvalidation "k8s.io/kubernetes/pkg/registry/rbac/validation"
	rbacauthorizer "k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// Decider is what an Authorizer adds to answer access reviews and
// impersonation checks: Kubernetes' decision and its reason instead of an
// error (docs/rbac.md §3).
type Decider interface {
	Decide(ctx context.Context, attrs Attributes) (authorizer.Decision, string, error)
}

// RuleSource is what an Authorizer adds when it resolves RBAC rules: the
// server uses it for RBAC's escalation check on writes of roles and
// bindings, and for SelfSubjectRulesReview.
type RuleSource interface {
	RuleResolver() rbacregistryvalidation.AuthorizationRuleResolver
	RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error)
}

// RBAC authorizes by Kubernetes' own RBAC evaluation (k8s.io/kubernetes
// plugin/pkg/auth/authorizer/rbac) over the Roles, ClusterRoles and bindings
// in the store.
type RBAC struct {
	authz *rbacauthorizer.RBACAuthorizer
	rules *rbacregistryvalidation.DefaultRuleResolver
}

var (
	_ Authorizer = (*RBAC)(nil)
	_ Decider    = (*RBAC)(nil)
	_ RuleSource = (*RBAC)(nil)
)

// NewRBAC returns the RBAC authorizer reading st's watch cache, as
// kube-apiserver's reads informers: no etcd round trip per decision. The
// cache has applied every write this server made before it answers, so a
// binding written through this server is in force once its create returned;
// one written through another server of the cluster, once that server's
// write reached this one's cache (milliseconds).
func NewRBAC(st *store.Store) *RBAC {
	src := storeRBAC{st: st}
	return &RBAC{
		authz: rbacauthorizer.New(src, src, src, src),
		rules: rbacregistryvalidation.NewDefaultRuleResolver(src, src, src, src),
	}
}

// Authorize implements Authorizer: allowed, or Kubernetes' 403 naming the
// user, verb, resource and scope (with RBAC's resolution errors, if any).
func (r *RBAC) Authorize(ctx context.Context, a Attributes) error {
	d, reason, err := r.Decide(ctx, a)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("RBAC: %w", err))
	}
	if d == authorizer.DecisionAllow {
		return nil
	}
	return forbiddenBecause(a, reason)
}

// Decide implements Decider.
func (r *RBAC) Decide(ctx context.Context, a Attributes) (authorizer.Decision, string, error) {
	return r.authz.Authorize(ctx, kubeAttributes(a))
}

// RuleResolver implements RuleSource.
func (r *RBAC) RuleResolver() rbacregistryvalidation.AuthorizationRuleResolver { return r.rules }

// RulesFor implements RuleSource.
func (r *RBAC) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	return r.authz.RulesFor(ctx, u, namespace)
}

// Chain is the server's authorizer (docs/rbac.md §3): members of
// system:masters are allowed before it runs; a node credential (user
// system:node:<name> in group system:nodes) is decided by Node, its node
// rules — alone, unless Node is also a Decider that answers NoOpinion, which
// hands the request to RBAC (as kube-apiserver's Node,RBAC chain); every
// other user by RBAC. A non-resource request (Path set) of a node goes to
// RBAC too, as the node rules are about resources, except the image
// store's paths, which the node rules decide.
type Chain struct {
	Node Authorizer
	RBAC *RBAC
}

var (
	_ Authorizer     = (*Chain)(nil)
	_ UpdateAdmitter = (*Chain)(nil)
	_ Decider        = (*Chain)(nil)
	_ RuleSource     = (*Chain)(nil)
)

// isNodeUser reports whether u is a node credential's user.
func isNodeUser(u UserInfo) bool {
	return strings.HasPrefix(u.Name, nodeUserPrefix) && u.InGroup(nodesGroup)
}

func (c *Chain) byNode(a Attributes) bool {
	return c.Node != nil && (a.Path == "" || imageStorePath(a.Path)) && isNodeUser(a.User)
}

// imageStorePath reports whether p is the image store's: the node rules
// decide a node's requests there (nodes read images, never write them).
func imageStorePath(p string) bool { return p == imagesPath || strings.HasPrefix(p, blobsPath) }

// Authorize implements Authorizer.
func (c *Chain) Authorize(ctx context.Context, a Attributes) error {
	if c.byNode(a) && !c.nodeDefers(ctx, a) {
		return c.Node.Authorize(ctx, a)
	}
	return c.RBAC.Authorize(ctx, a)
}

// nodeDefers reports whether Node, as a Decider, has no opinion on a.
func (c *Chain) nodeDefers(ctx context.Context, a Attributes) bool {
	d, ok := c.Node.(Decider)
	if !ok {
		return false
	}
	dec, _, err := d.Decide(ctx, a)
	return err == nil && dec == authorizer.DecisionNoOpinion
}

// AdmitUpdate implements UpdateAdmitter with Node's, for nodes.
func (c *Chain) AdmitUpdate(ctx context.Context, a Attributes, old resources.Object) error {
	if adm, ok := c.Node.(UpdateAdmitter); ok && c.byNode(a) {
		return adm.AdmitUpdate(ctx, a, old)
	}
	return nil
}

// Decide implements Decider. A node's request Node refuses (when Node is no
// Decider) is NoOpinion with the refusal as its reason.
func (c *Chain) Decide(ctx context.Context, a Attributes) (authorizer.Decision, string, error) {
	if !c.byNode(a) {
		return c.RBAC.Decide(ctx, a)
	}
	if d, ok := c.Node.(Decider); ok {
		if dec, reason, err := d.Decide(ctx, a); err != nil || dec != authorizer.DecisionNoOpinion {
			return dec, reason, err
		}
		return c.RBAC.Decide(ctx, a)
	}
	if err := c.Node.Authorize(ctx, a); err != nil {
		return authorizer.DecisionNoOpinion, err.Error(), nil
	}
	return authorizer.DecisionAllow, "", nil
}

// RuleResolver implements RuleSource.
func (c *Chain) RuleResolver() rbacregistryvalidation.AuthorizationRuleResolver {
	return c.RBAC.RuleResolver()
}

// RulesFor implements RuleSource.
func (c *Chain) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	return c.RBAC.RulesFor(ctx, u, namespace)
}

// kubeUser is u as k8s.io/apiserver's user.Info.
func kubeUser(u UserInfo) user.Info {
	return &user.DefaultInfo{Name: u.Name, Groups: u.Groups}
}

// kubeAttributes is a as k8s.io/apiserver's authorizer.Attributes.
func kubeAttributes(a Attributes) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User: kubeUser(a.User), Verb: a.Verb, Namespace: a.Namespace,
		APIGroup: a.APIGroup, APIVersion: "*", Resource: a.Resource, Subresource: a.Subresource,
		Name: a.Name, ResourceRequest: a.Path == "", Path: a.Path,
	}
}

// fromKubeAttributes is the inverse of kubeAttributes.
func fromKubeAttributes(ka authorizer.Attributes) Attributes {
	a := Attributes{Verb: ka.GetVerb()}
	if u := ka.GetUser(); u != nil {
		a.User = UserInfo{Name: u.GetName(), Groups: u.GetGroups()}
	}
	if !ka.IsResourceRequest() {
		a.Path = ka.GetPath()
		if a.Path == "" {
			a.Path = "/"
		}
		return a
	}
	a.Namespace, a.APIGroup, a.Resource = ka.GetNamespace(), ka.GetAPIGroup(), ka.GetResource()
	a.Subresource, a.Name = ka.GetSubresource(), ka.GetName()
	return a
}

// forbiddenBecause is Kubernetes' 403 for a request no authorizer allowed,
// with the reason when there is one (denied words it).
func forbiddenBecause(a Attributes, reason string) error { return denied(a, reason) }

// storeRBAC reads RBAC objects from the store's watch cache for the rule
// resolver (objects shared with the cache: read-only, as the resolver
// treats them). A missing role is the NotFound Kubernetes' listers return
// (`clusterrole.rbac.authorization.k8s.io "x" not found`).
type storeRBAC struct{ st *store.Store }

func (s storeRBAC) get(ctx context.Context, r *resources.Resource, namespace, name string) (resources.Object, error) {
	obj, err := s.st.GetCached(ctx, r, namespace, name)
	if store.IsNotFound(err) {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: rbacv1.GroupName, Resource: r.Singular}, name)
	}
	return obj, err
}

func (s storeRBAC) GetRole(ctx context.Context, namespace, name string) (*rbacv1.Role, error) {
	obj, err := s.get(ctx, resources.Roles, namespace, name)
	if err != nil {
		return nil, err
	}
	return typed[*rbacv1.Role](obj)
}

func (s storeRBAC) GetClusterRole(ctx context.Context, name string) (*rbacv1.ClusterRole, error) {
	obj, err := s.get(ctx, resources.ClusterRoles, "", name)
	if err != nil {
		return nil, err
	}
	return typed[*rbacv1.ClusterRole](obj)
}

func (s storeRBAC) ListRoleBindings(ctx context.Context, namespace string) ([]*rbacv1.RoleBinding, error) {
	return listTyped[*rbacv1.RoleBinding](ctx, s.st, resources.RoleBindings, namespace)
}

func (s storeRBAC) ListClusterRoleBindings(ctx context.Context) ([]*rbacv1.ClusterRoleBinding, error) {
	return listTyped[*rbacv1.ClusterRoleBinding](ctx, s.st, resources.ClusterRoleBindings, "")
}

func typed[T resources.Object](obj resources.Object) (T, error) {
	t, ok := obj.(T)
	if !ok {
		var zero T
		if obj == nil {
			return zero, fmt.Errorf("stored object is missing, want a %T", zero)
		}
		return zero, fmt.Errorf("stored %s/%s is a %T", obj.GetNamespace(), obj.GetName(), obj)
	}
	return t, nil
}

// listTyped lists r in namespace from the watch cache (objects shared with
// it: read-only, as the rule resolver treats them).
func listTyped[T resources.Object](ctx context.Context, st *store.Store, r *resources.Resource, namespace string) ([]T, error) {
	objs, _, err := st.ListCached(ctx, r, namespace, store.Selector{})
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(objs))
	for _, obj := range objs {
		t, err := typed[T](obj)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}
