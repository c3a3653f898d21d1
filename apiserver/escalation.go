package apiserver

import (
	"context"
	"errors"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/kubernetes/pkg/apis/rbac"
	rbacregistry "k8s.io/kubernetes/pkg/registry/rbac"
	rbacregistryvalidation "k8s.io/kubernetes/pkg/registry/rbac/validation"

	"github.com/everynode/everynode/resources"
)

// fullAuthority is what the aggregationRule of a ClusterRole needs: since it
// can gather anything, only a user holding * on *.* and on every URL may
// set or change one (as upstream's ClusterRole storage).
var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

// admitRBACWrite is RBAC's escalation prevention (docs/rbac.md §4), as
// kube-apiserver's policy-based storage of the four RBAC kinds runs it, with
// upstream's checks (k8s.io/kubernetes pkg/registry/rbac): a user may write
// a Role or ClusterRole only with rules it holds itself, unless it may
// `escalate` it; and a binding only to a role whose rules it holds, unless
// it may `bind` that role. Members of system:masters skip the check. A
// binding whose role is missing is refused to such a user with the
// role's NotFound (there is nothing to compare), as upstream. obj is the
// object to store (defaulted and validated); old is the one it replaces,
// nil for a create. A write that changes only ownerReferences and
// finalizers (the garbage collector's) is not checked.
func (s *Server) admitRBACWrite(ctx context.Context, c call, obj, old resources.Object) error {
	if c.r.Group != rbacv1.GroupName || c.user.InGroup(mastersGroup) {
		return nil
	}
	src, ok := s.authz.(RuleSource)
	if !ok {
		return nil // no RBAC: nothing to escalate past
	}
	if old != nil && rbacregistry.IsOnlyMutatingGCFields(obj, old, apiequality.Semantic) {
		return nil
	}
	resolver := src.RuleResolver()
	ctx = genericapirequest.WithNamespace(genericapirequest.WithUser(ctx, kubeUser(c.user)), c.namespace)
	ctx = genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, APIGroup: c.r.Group, APIVersion: c.r.Version, Resource: c.r.Name,
		Namespace: c.namespace, Name: obj.GetName(),
	})
	az := s.kubeAuthorizer()
	forbid := func(err error) error { return apierrors.NewForbidden(c.r.GroupResource(), obj.GetName(), err) }
	switch o := obj.(type) {
	case *rbacv1.Role:
		if rbacregistry.RoleEscalationAuthorized(ctx, az) {
			return nil
		}
		if err := rbacregistryvalidation.ConfirmNoEscalation(ctx, resolver, o.Rules); err != nil {
			return forbid(err)
		}
	case *rbacv1.ClusterRole:
		if rbacregistry.RoleEscalationAuthorized(ctx, az) {
			return nil
		}
		if err := rbacregistryvalidation.ConfirmNoEscalation(ctx, resolver, o.Rules); err != nil {
			return forbid(err)
		}
		oc, _ := old.(*rbacv1.ClusterRole)
		if aggregates(o) || (oc != nil && aggregates(oc)) {
			if err := rbacregistryvalidation.ConfirmNoEscalation(ctx, resolver, fullAuthority); err != nil {
				return forbid(errors.New("must have cluster-admin privileges to use the aggregationRule"))
			}
		}
	case *rbacv1.RoleBinding:
		return s.admitBinding(ctx, resolver, o.RoleRef, c.namespace, forbid)
	case *rbacv1.ClusterRoleBinding:
		return s.admitBinding(ctx, resolver, o.RoleRef, "", forbid)
	}
	return nil
}

func aggregates(cr *rbacv1.ClusterRole) bool {
	return cr.AggregationRule != nil && len(cr.AggregationRule.ClusterRoleSelectors) > 0
}

// admitBinding: the user may bind ref (verb bind on it), or holds every rule
// of the role ref names.
func (s *Server) admitBinding(ctx context.Context, resolver rbacregistryvalidation.AuthorizationRuleResolver,
	ref rbacv1.RoleRef, namespace string, forbid func(error) error) error {
	internalRef := rbac.RoleRef{APIGroup: ref.APIGroup, Kind: ref.Kind, Name: ref.Name}
	if rbacregistry.BindingAuthorized(ctx, internalRef, namespace, s.kubeAuthorizer()) {
		return nil
	}
	rules, err := resolver.GetRoleReferenceRules(ctx, ref, namespace)
	if err != nil {
		return err
	}
	if err := rbacregistryvalidation.ConfirmNoEscalation(ctx, resolver, rules); err != nil {
		return forbid(err)
	}
	return nil
}
