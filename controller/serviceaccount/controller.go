// Package serviceaccount gives every namespace its "default" ServiceAccount,
// as kube-controller-manager's serviceaccount controller does
// (k8s.io/kubernetes pkg/controller/serviceaccount/serviceaccounts_controller.go):
//
//   - a namespace that is added or updated, or whose "default" account is
//     deleted, is synced;
//   - syncing an Active namespace creates each missing account (an account
//     that exists is never changed); a namespace that is gone or terminating
//     is left alone, and so is a create refused because the namespace went
//     away or began terminating meanwhile;
//   - a periodic resync re-checks every namespace.
//
// It acts only through client.Interface. Tokens for the accounts are not
// made here (Kubernetes no longer makes token Secrets either).
package serviceaccount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/internal/informer"
	"github.com/everynode/everynode/controller/internal/workers"
	"github.com/everynode/everynode/resources"
)

// DefaultName is the account every namespace gets.
const DefaultName = "default"

// DefaultResyncInterval is how often every namespace is re-checked.
const DefaultResyncInterval = 5 * time.Minute

// Config configures a Controller.
type Config struct {
	// Client is the API. Required.
	Client client.Interface
	// Logger; nil discards.
	Logger *slog.Logger
	// Clock; nil is the real clock.
	Clock clock.WithTicker
	// ResyncInterval; 0 means DefaultResyncInterval.
	ResyncInterval time.Duration
	// Informers, when set, provides informers shared with other
	// controllers, run by its owner (see controller.RunAll); nil makes the
	// controller's own.
	Informers *informer.Shared
}

// Controller ensures the accounts of every namespace. Create with New,
// start once with Run.
type Controller struct {
	client client.Interface
	logger *slog.Logger
	clock  clock.WithTicker
	resync time.Duration
	// names are the accounts each namespace gets.
	names []string

	informers  *informer.Set
	namespaces cache.Indexer
	accounts   cache.Indexer
	queue      workqueue.TypedRateLimitingInterface[string] // namespace names
}

// New builds a Controller; nothing runs until Run.
func New(cfg Config) (_ *Controller, err error) {
	if cfg.Client == nil {
		return nil, errors.New("serviceaccount controller: Config.Client is required")
	}
	c := &Controller{client: cfg.Client, logger: cfg.Logger, clock: cfg.Clock, resync: cfg.ResyncInterval,
		names: []string{DefaultName}}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.resync <= 0 {
		c.resync = DefaultResyncInterval
	}
	c.queue = workers.NewQueue[string](c.clock)
	defer workers.ShutDownOnError(c.queue, &err)
	c.informers = informer.NewSet(cfg.Informers, cfg.Client)
	nsInf, err := c.informers.Add(resources.Namespaces, nil)
	if err != nil {
		return nil, fmt.Errorf("serviceaccount controller: %w", err)
	}
	saInf, err := c.informers.Add(resources.ServiceAccounts, nil)
	if err != nil {
		return nil, fmt.Errorf("serviceaccount controller: %w", err)
	}
	c.namespaces, c.accounts = nsInf.GetIndexer(), saInf.GetIndexer()
	enqueue := func(obj any) {
		if ns, ok := metaOf(obj); ok {
			c.queue.Add(ns.GetName())
		}
	}
	if _, err := nsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, cur any) { enqueue(cur) },
	}); err != nil {
		return nil, fmt.Errorf("serviceaccount controller: %w", err)
	}
	if _, err := saInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if sa, ok := metaOf(obj); ok && c.ensures(sa.GetName()) {
				c.queue.Add(sa.GetNamespace())
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("serviceaccount controller: %w", err)
	}
	return c, nil
}

func metaOf(obj any) (metav1.Object, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(metav1.Object)
	return o, ok
}

// ensures reports whether name is one of the accounts every namespace gets.
func (c *Controller) ensures(name string) bool {
	for _, n := range c.names {
		if n == name {
			return true
		}
	}
	return false
}

// Run starts the informers, waits for their caches, runs n workers and the
// resync ticker, and blocks until ctx ends; it returns after every goroutine
// it started has stopped.
func (c *Controller) Run(ctx context.Context, n int) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.queue.ShutDown()
	if err := c.informers.Start(ctx, &wg, "serviceaccount controller"); err != nil {
		return err
	}
	workers.Run(ctx, &wg, n, c.queue, c.sync, c.syncFailed)
	workers.Every(ctx, &wg, c.clock, c.resync, c.enqueueAll)
	c.logger.Info("serviceaccount controller: started", "workers", n)
	<-ctx.Done()
	return nil
}

func (c *Controller) enqueueAll() {
	for _, key := range c.namespaces.ListKeys() {
		c.queue.Add(key)
	}
}

func (c *Controller) syncFailed(namespace string, err error) {
	c.logger.Warn("ensuring service accounts failed; will retry", "namespace", namespace, "err", err)
}

// sync creates the missing accounts of one namespace.
func (c *Controller) sync(ctx context.Context, namespace string) error {
	obj, exists, err := c.namespaces.GetByKey(namespace)
	if err != nil || !exists {
		return err
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok || ns.Status.Phase != corev1.NamespaceActive || ns.DeletionTimestamp != nil {
		return nil // nothing is created in a namespace on its way out
	}
	var errs []error
	for _, name := range c.names {
		_, exists, err := c.accounts.GetByKey(namespace + "/" + name)
		if err != nil {
			return err
		}
		if exists {
			continue
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		_, err = c.client.Create(ctx, sa, client.WriteOptions{FieldManager: "serviceaccount-controller"})
		switch {
		case err == nil:
			c.logger.Info("created service account", "namespace", namespace, "name", name)
		case apierrors.IsAlreadyExists(err), namespaceGone(err):
		default:
			errs = append(errs, fmt.Errorf("create service account %s/%s: %w", namespace, name, err))
		}
	}
	return errors.Join(errs...)
}

// namespaceGone reports a create refused because its namespace no longer
// exists or is terminating (kube-apiserver's NamespaceLifecycle admission
// marks the latter with the NamespaceTerminating cause).
func namespaceGone(err error) bool {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return true
	}
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return false
	}
	d := se.Status().Details
	return apierrors.IsNotFound(err) && d != nil && d.Kind == resources.Namespaces.Name
}
