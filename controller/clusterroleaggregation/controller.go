// Package clusterroleaggregation fills the rules of every ClusterRole that
// has an aggregationRule, as kube-controller-manager's clusterrole-aggregation
// controller does (k8s.io/kubernetes pkg/controller/clusterroleaggregation):
//
//   - any ClusterRole added, changed or deleted re-syncs every aggregated
//     ClusterRole;
//   - syncing one sets its rules to the rules of the ClusterRoles its
//     selectors match (itself excepted), each selector in turn, the matches
//     by name, a rule already gathered not repeated; the role is written only
//     when that differs from its rules.
//
// That is how the default roles admin, edit and view get their rules (from
// the system:aggregate-to-* roles), and how a ClusterRole labelled
// rbac.authorization.k8s.io/aggregate-to-view=true extends view. It acts only
// through client.Interface.
package clusterroleaggregation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/internal/informer"
	"github.com/everynode/everynode/controller/internal/workers"
	"github.com/everynode/everynode/resources"
)

// FieldManager is the manager of the rules the controller writes (upstream's).
const FieldManager = "clusterrole-aggregation-controller"

// Config configures a Controller.
type Config struct {
	// Client is the API. Required.
	Client client.Interface
	// Logger; nil discards.
	Logger *slog.Logger
	// Clock; nil is the real clock.
	Clock clock.WithTicker
	// Informers, when set, provides informers shared with other
	// controllers, run by their owner; nil makes the controller's own.
	Informers *informer.Shared
}

// Controller aggregates ClusterRoles. Create with New, start once with Run.
type Controller struct {
	client    client.Interface
	logger    *slog.Logger
	informers *informer.Set
	roles     cache.Indexer
	queue     workqueue.TypedRateLimitingInterface[string] // names of aggregated ClusterRoles
}

// New builds a Controller; nothing runs until Run.
func New(cfg Config) (_ *Controller, err error) {
	if cfg.Client == nil {
		return nil, errors.New("clusterrole aggregation controller: Config.Client is required")
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	c := &Controller{client: cfg.Client, logger: cfg.Logger, queue: workers.NewQueue[string](clk)}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	defer workers.ShutDownOnError(c.queue, &err)
	c.informers = informer.NewSet(cfg.Informers, cfg.Client)
	inf, err := c.informers.Add(resources.ClusterRoles, nil)
	if err != nil {
		return nil, fmt.Errorf("clusterrole aggregation controller: %w", err)
	}
	c.roles = inf.GetIndexer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueueAggregated() },
		UpdateFunc: func(_, _ any) { c.enqueueAggregated() },
		DeleteFunc: func(any) { c.enqueueAggregated() },
	}); err != nil {
		return nil, fmt.Errorf("clusterrole aggregation controller: %w", err)
	}
	return c, nil
}

// Run starts the informer, waits for its cache, runs n workers and blocks
// until ctx ends; it returns after every goroutine it started has stopped.
func (c *Controller) Run(ctx context.Context, n int) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.queue.ShutDown()
	if err := c.informers.Start(ctx, &wg, "clusterrole aggregation controller"); err != nil {
		return err
	}
	workers.Run(ctx, &wg, n, c.queue, c.sync, c.syncFailed)
	c.logger.Info("clusterrole aggregation controller: started", "workers", n)
	<-ctx.Done()
	return nil
}

// enqueueAggregated queues every ClusterRole with an aggregationRule.
func (c *Controller) enqueueAggregated() {
	for _, obj := range c.roles.List() {
		if cr, ok := obj.(*rbacv1.ClusterRole); ok && cr.AggregationRule != nil {
			c.queue.Add(cr.Name)
		}
	}
}

func (c *Controller) syncFailed(name string, err error) {
	lvl := slog.LevelWarn
	if apierrors.IsConflict(err) {
		// The role changed since it was read (at start-up the server
		// reconciles the bootstrap roles while this runs): the retry reads
		// the new version; nothing is wrong.
		lvl = slog.LevelDebug
	}
	c.logger.Log(context.Background(), lvl, "aggregating clusterrole failed; will retry", "clusterrole", name, "err", err)
}

// sync sets the rules of one aggregated ClusterRole.
func (c *Controller) sync(ctx context.Context, name string) error {
	obj, exists, err := c.roles.GetByKey(name)
	if err != nil || !exists {
		return err
	}
	cr, ok := obj.(*rbacv1.ClusterRole)
	if !ok || cr.AggregationRule == nil {
		return nil
	}
	rules, err := c.aggregate(cr)
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(rules, cr.Rules) {
		return nil
	}
	next := cr.DeepCopy()
	next.Rules = rules
	resources.ClusterRoles.SetTypeMeta(next)
	if _, err := c.client.Update(ctx, next, client.WriteOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("update clusterrole %s: %w", name, err)
	}
	c.logger.Info("aggregated clusterrole", "clusterrole", name, "rules", len(rules))
	return nil
}

// aggregate gathers the rules of the ClusterRoles cr's selectors match.
func (c *Controller) aggregate(cr *rbacv1.ClusterRole) ([]rbacv1.PolicyRule, error) {
	all := make([]*rbacv1.ClusterRole, 0, len(c.roles.List()))
	for _, obj := range c.roles.List() {
		if o, ok := obj.(*rbacv1.ClusterRole); ok {
			all = append(all, o)
		}
	}
	slices.SortFunc(all, func(a, b *rbacv1.ClusterRole) int { return strings.Compare(a.Name, b.Name) })
	rules := []rbacv1.PolicyRule{}
	for i := range cr.AggregationRule.ClusterRoleSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&cr.AggregationRule.ClusterRoleSelectors[i])
		if err != nil {
			return nil, fmt.Errorf("clusterrole %s: selector %d: %w", cr.Name, i, err)
		}
		for _, o := range all {
			if o.Name == cr.Name || !sel.Matches(labels.Set(o.Labels)) {
				continue
			}
			for _, rule := range o.Rules {
				if !slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(r, rule) }) {
					rules = append(rules, rule)
				}
			}
		}
	}
	return rules, nil
}
