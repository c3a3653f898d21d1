// Package controller runs everynode's controllers together inside
// `everynode server`:
//
//   - daemonset:        the DaemonSet controller (Kubernetes semantics);
//   - nodelifecycle:    Node readiness from membership, NoExecute taints, evictions;
//   - garbagecollector: ownerReference cascades and pods of deleted nodes;
//   - serviceaccount:   the "default" ServiceAccount of every namespace;
//   - clusterroleaggregation: the rules of ClusterRoles with an aggregationRule;
//   - tokencleaner:     expired bootstrap tokens deleted;
//   - leader:           an etcd election so one server's controllers act at a time.
//
// Each sub-package speaks to the API only through client.Interface and can be
// used on its own; RunAll is the usual wiring:
//
//	err := leader.Run(ctx, leader.Config{Client: etcd, Identity: host}, func(ctx context.Context) {
//		if err := controller.RunAll(ctx, controller.Config{Client: api, Membership: m, Logger: log}); err != nil {
//			log.Error("controllers", "err", err)
//		}
//	})
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/clusterroleaggregation"
	"github.com/everynode/everynode/controller/daemonset"
	"github.com/everynode/everynode/controller/garbagecollector"
	"github.com/everynode/everynode/controller/internal/informer"
	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/controller/serviceaccount"
	"github.com/everynode/everynode/controller/tokencleaner"
)

// Config configures RunAll.
type Config struct {
	// Client is the API (in-process for the server). Required.
	Client client.Interface
	// Membership feeds node readiness; nil runs no node lifecycle controller.
	Membership nodelifecycle.Membership
	// Logger; nil discards. Each controller gets it With("controller", name).
	Logger *slog.Logger
	// Clock; nil is the real clock.
	Clock clock.WithTicker
	// DaemonSetWorkers is the number of DaemonSet sync workers; 0 means 2 (Kubernetes' default).
	DaemonSetWorkers int
	// UnreachableGrace is how long a node must have been NotReady or
	// Unknown before a DaemonSet rollout sets it aside; 0 means
	// daemonset.DefaultUnreachableGrace (docs/rollouts.md §7).
	UnreachableGrace time.Duration
	// OrphanQuarantine is how long a pod's Node must have been gone before
	// pod GC deletes the pod; 0 means garbagecollector.DefaultOrphanQuarantine.
	OrphanQuarantine time.Duration
}

// RunAll builds fresh controllers, sharing one informer per resource, and
// runs them until ctx ends; it returns after all of them (and the shared
// informers) have stopped, with the errors they returned.
// Controllers cannot be restarted: call RunAll again (e.g. per leader term)
// to run new ones.
func RunAll(ctx context.Context, cfg Config) error {
	if cfg.Client == nil {
		return errors.New("controller: Config.Client is required")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	workers := cfg.DaemonSetWorkers
	if workers <= 0 {
		workers = 2
	}
	type runner struct {
		name string
		run  func(context.Context) error
	}
	var runners []runner
	// One informer per resource for all controllers: one cache and one
	// watch of pods (and of Nodes...) instead of one per controller.
	shared := informer.NewShared(cfg.Client)
	ds, err := daemonset.New(daemonset.Config{Client: cfg.Client, Logger: logger.With("controller", "daemonset"), Clock: cfg.Clock, Informers: shared,
		UnreachableGrace: cfg.UnreachableGrace})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	runners = append(runners, runner{"daemonset", func(ctx context.Context) error { return ds.Run(ctx, workers) }})
	gc, err := garbagecollector.New(garbagecollector.Config{Client: cfg.Client, Logger: logger.With("controller", "garbagecollector"), Clock: cfg.Clock, Informers: shared,
		OrphanQuarantine: cfg.OrphanQuarantine})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	runners = append(runners, runner{"garbagecollector", func(ctx context.Context) error { return gc.Run(ctx, 2) }})
	sa, err := serviceaccount.New(serviceaccount.Config{Client: cfg.Client, Logger: logger.With("controller", "serviceaccount"), Clock: cfg.Clock, Informers: shared})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	runners = append(runners, runner{"serviceaccount", func(ctx context.Context) error { return sa.Run(ctx, 1) }})
	cra, err := clusterroleaggregation.New(clusterroleaggregation.Config{Client: cfg.Client,
		Logger: logger.With("controller", "clusterroleaggregation"), Clock: cfg.Clock, Informers: shared})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	runners = append(runners, runner{"clusterroleaggregation", func(ctx context.Context) error { return cra.Run(ctx, 1) }})
	tc, err := tokencleaner.New(tokencleaner.Config{Client: cfg.Client, Logger: logger.With("controller", "tokencleaner"), Clock: cfg.Clock})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	runners = append(runners, runner{"tokencleaner", tc.Run})
	if cfg.Membership != nil {
		nl, err := nodelifecycle.New(nodelifecycle.Config{Client: cfg.Client, Membership: cfg.Membership,
			Logger: logger.With("controller", "nodelifecycle"), Clock: cfg.Clock, Informers: shared})
		if err != nil {
			return fmt.Errorf("controller: %w", err)
		}
		runners = append(runners, runner{"nodelifecycle", func(ctx context.Context) error { return nl.Run(ctx, 1) }})
	}

	var wg sync.WaitGroup
	wg.Go(func() { shared.Run(ctx) })
	errs := make([]error, len(runners))
	for i, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.run(ctx); err != nil {
				errs[i] = fmt.Errorf("controller %s: %w", r.name, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
