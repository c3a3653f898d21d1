package apiserver

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"

	"golang.org/x/sync/errgroup"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// EnsureBootstrapPolicy reconciles Kubernetes' default RBAC policy
// (k8s.io/kubernetes bootstrappolicy: cluster-admin, admin, edit, view and
// their aggregation, system:basic-user, system:discovery,
// system:public-info-viewer, the controller and node roles, their bindings,
// and the roles of kube-system and kube-public) as kube-apiserver does at
// start, with component-helpers' reconciliation: missing objects are
// created, missing rules and subjects added; extra ones are kept, and an
// object annotated rbac.authorization.kubernetes.io/autoupdate=false is left
// alone. The namespaces the namespaced roles live in must exist.
func (s *Server) EnsureBootstrapPolicy(ctx context.Context) error {
	// Each phase's objects are independent, so they are reconciled at once
	// (bootstrapWriters at a time): etcd commits concurrent writes in a
	// few fsyncs, where one after the other each waits for its own, which
	// made this most of a server's start-up.
	var crs, crbs, rs, rbs []func() error
	for _, cr := range append(bootstrappolicy.ClusterRoles(), bootstrappolicy.ControllerRoles()...) {
		crs = append(crs, s.reconcileRole(ctx, reconciliation.ClusterRoleRuleOwner{ClusterRole: cr.DeepCopy()}, resources.ClusterRoles))
	}
	for _, b := range append(bootstrappolicy.ClusterRoleBindings(), bootstrappolicy.ControllerRoleBindings()...) {
		crbs = append(crbs, s.reconcileBinding(ctx, reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: b.DeepCopy()}, resources.ClusterRoleBindings))
	}
	roles := bootstrappolicy.NamespaceRoles()
	for _, ns := range slices.Sorted(maps.Keys(roles)) {
		for _, r := range roles[ns] {
			rs = append(rs, s.reconcileRole(ctx, reconciliation.RoleRuleOwner{Role: r.DeepCopy()}, resources.Roles))
		}
	}
	nsBindings := bootstrappolicy.NamespaceRoleBindings()
	for _, ns := range slices.Sorted(maps.Keys(nsBindings)) {
		for _, b := range nsBindings[ns] {
			rbs = append(rbs, s.reconcileBinding(ctx, reconciliation.RoleBindingAdapter{RoleBinding: b.DeepCopy()}, resources.RoleBindings))
		}
	}
	if err := runAll(crs); err != nil {
		return err
	}
	if err := runAll(crbs); err != nil {
		return err
	}
	// As upstream's reconciliation, the namespaces of namespaced roles are
	// created if missing.
	if err := s.EnsureNamespaces(ctx, slices.Sorted(maps.Keys(roles))...); err != nil {
		return err
	}
	if err := runAll(rs); err != nil {
		return err
	}
	if err := s.EnsureNamespaces(ctx, slices.Sorted(maps.Keys(nsBindings))...); err != nil {
		return err
	}
	return runAll(rbs)
}

// reconcileRole returns the reconciliation of one bootstrap (Cluster)Role.
func (s *Server) reconcileRole(ctx context.Context, role reconciliation.RuleOwner, r *resources.Resource) func() error {
	return func() error {
		o := reconciliation.ReconcileRoleOptions{Role: role, Confirm: true, Client: ruleOwners{s: s, ctx: ctx, r: r}}
		if _, err := o.Run(); err != nil {
			return fmt.Errorf("apiserver: reconcile %s %s: %w", r.Singular, path.Join(role.GetNamespace(), role.GetName()), err)
		}
		return nil
	}
}

// reconcileBinding returns the reconciliation of one bootstrap
// (Cluster)RoleBinding.
func (s *Server) reconcileBinding(ctx context.Context, b reconciliation.RoleBinding, r *resources.Resource) func() error {
	return func() error {
		o := reconciliation.ReconcileRoleBindingOptions{RoleBinding: b, Confirm: true, Client: bindings{s: s, ctx: ctx, r: r}}
		if _, err := o.Run(); err != nil {
			return fmt.Errorf("apiserver: reconcile %s %s: %w", r.Singular, path.Join(b.GetNamespace(), b.GetName()), err)
		}
		return nil
	}
}

// bootstrapWriters bounds the bootstrap policy's concurrent reconciliations.
const bootstrapWriters = 16

// runAll runs fns, bootstrapWriters at a time, and returns the first error
// once all have returned.
func runAll(fns []func() error) error {
	var g errgroup.Group
	g.SetLimit(bootstrapWriters)
	for _, fn := range fns {
		g.Go(fn)
	}
	return g.Wait()
}

// ruleOwners is reconciliation's RuleOwnerModifier over the server's own
// write path (defaults, validation), as system:apiserver.
type ruleOwners struct {
	s   *Server
	ctx context.Context
	r   *resources.Resource
}

func (m ruleOwners) call(namespace, name string) call {
	return call{user: systemUser(), r: m.r, namespace: namespace, name: name}
}

func (m ruleOwners) Get(namespace, name string) (reconciliation.RuleOwner, error) {
	obj, err := m.s.store.Get(m.ctx, m.r, namespace, name)
	if err != nil {
		return nil, m.s.statusError(err)
	}
	return ruleOwner(obj.DeepCopyObject().(resources.Object))
}

func (m ruleOwners) Create(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	obj := in.GetObject().(resources.Object)
	m.r.SetTypeMeta(obj)
	out, err := m.s.createObject(m.ctx, m.call(in.GetNamespace(), in.GetName()), obj, false)
	if err != nil {
		return nil, m.s.statusError(err)
	}
	return ruleOwner(out)
}

func (m ruleOwners) Update(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	obj := in.GetObject().(resources.Object)
	m.r.SetTypeMeta(obj)
	out, err := m.s.updateObject(m.ctx, m.call(in.GetNamespace(), in.GetName()), obj, false)
	if err != nil {
		return nil, m.s.statusError(err)
	}
	return ruleOwner(out)
}

func ruleOwner(obj resources.Object) (reconciliation.RuleOwner, error) {
	switch o := obj.(type) {
	case *rbacv1.ClusterRole:
		return reconciliation.ClusterRoleRuleOwner{ClusterRole: o}, nil
	case *rbacv1.Role:
		return reconciliation.RoleRuleOwner{Role: o}, nil
	}
	return nil, fmt.Errorf("apiserver: %T is no role", obj)
}

// bindings is reconciliation's RoleBindingModifier, as ruleOwners.
type bindings struct {
	s   *Server
	ctx context.Context
	r   *resources.Resource
}

func (m bindings) Get(namespace, name string) (reconciliation.RoleBinding, error) {
	obj, err := m.s.store.Get(m.ctx, m.r, namespace, name)
	if err != nil {
		return nil, m.s.statusError(err)
	}
	return binding(obj.DeepCopyObject().(resources.Object))
}

func (m bindings) Delete(namespace, name string, uid types.UID) error {
	_, err := m.s.store.Delete(m.ctx, m.r, namespace, name, &store.Preconditions{UID: string(uid)})
	if err != nil {
		return m.s.statusError(err)
	}
	return nil
}

func (m bindings) Create(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	obj := in.GetObject().(resources.Object)
	m.r.SetTypeMeta(obj)
	c := call{user: systemUser(), r: m.r, namespace: in.GetNamespace(), name: in.GetName()}
	out, err := m.s.createObject(m.ctx, c, obj, false)
	if err != nil {
		return nil, m.s.statusError(err)
	}
	return binding(out)
}

func (m bindings) Update(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	obj := in.GetObject().(resources.Object)
	m.r.SetTypeMeta(obj)
	c := call{user: systemUser(), r: m.r, namespace: in.GetNamespace(), name: in.GetName()}
	out, err := m.s.updateObject(m.ctx, c, obj, false)
	if err != nil {
		return nil, m.s.statusError(err)
	}
	return binding(out)
}

func binding(obj resources.Object) (reconciliation.RoleBinding, error) {
	switch o := obj.(type) {
	case *rbacv1.ClusterRoleBinding:
		return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: o}, nil
	case *rbacv1.RoleBinding:
		return reconciliation.RoleBindingAdapter{RoleBinding: o}, nil
	}
	return nil, fmt.Errorf("apiserver: %T is no binding", obj)
}
