package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/internal/informer"
	"github.com/everynode/everynode/controller/internal/workers"
	"github.com/everynode/everynode/resources"
)

// DefaultResyncInterval is how often every dependent and deleting owner is re-checked.
const DefaultResyncInterval = time.Minute

// DefaultOrphanQuarantine is how long a pod's Node must have been gone
// before pod GC deletes the pod: Kubernetes' pod GC quarantine, which lets
// a node that is re-registered at once (a Node deleted while its agent
// runs) keep its pods.
const DefaultOrphanQuarantine = 40 * time.Second

const (
	ownerUIDIndex = "ownerUID"
	nodeNameIndex = informer.NodeNameIndex
)

// Config configures a Collector.
type Config struct {
	// Client is the API. Required.
	Client client.Interface
	// Logger; nil discards.
	Logger *slog.Logger
	// Clock; nil is the real clock.
	Clock clock.WithTicker
	// ResyncInterval; 0 means DefaultResyncInterval.
	ResyncInterval time.Duration
	// OrphanQuarantine; 0 means DefaultOrphanQuarantine.
	OrphanQuarantine time.Duration
	// Informers, when set, provides informers shared with other
	// controllers, run by its owner (see controller.RunAll); nil makes the
	// collector's own.
	Informers *informer.Shared
}

// kind of work item.
type kind int

const (
	dependentItem kind = iota // check a dependent's owners
	ownerItem                 // release finalizers of an owner being deleted
	boundPodItem              // pod GC: is the pod's node gone?
)

// item is a work queue key.
type item struct {
	kind      kind
	resource  string // plural name
	namespace string
	name      string
}

// Collector is the garbage collector. Create with New, start once with Run.
type Collector struct {
	client     client.Interface
	logger     *slog.Logger
	clock      clock.WithTicker
	resync     time.Duration
	quarantine time.Duration

	// nodesGone: when each Node that pods are bound to was first found
	// missing (by a live read), for pod GC's quarantine.
	mu        sync.Mutex
	nodesGone map[string]time.Time

	// stores by resource: the watched kinds.
	stores    map[*resources.Resource]cache.Indexer
	informers *informer.Set
	queue     workqueue.TypedRateLimitingInterface[item]
}

// dependentResources are the kinds whose ownerReferences are collected.
var dependentResources = []*resources.Resource{resources.Pods, resources.ControllerRevisions}

// ownerResources are watched as owners (dependents may also own).
var ownerResources = []*resources.Resource{resources.DaemonSets, resources.Nodes}

// New builds a Collector; nothing runs until Run.
func New(cfg Config) (_ *Collector, err error) {
	if cfg.Client == nil {
		return nil, errors.New("garbage collector: Config.Client is required")
	}
	c := &Collector{client: cfg.Client, logger: cfg.Logger, clock: cfg.Clock, resync: cfg.ResyncInterval,
		quarantine: cfg.OrphanQuarantine, nodesGone: map[string]time.Time{}, stores: map[*resources.Resource]cache.Indexer{}}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.resync <= 0 {
		c.resync = DefaultResyncInterval
	}
	if c.quarantine <= 0 {
		c.quarantine = DefaultOrphanQuarantine
	}
	c.queue = workers.NewQueue[item](c.clock)
	defer workers.ShutDownOnError(c.queue, &err)
	c.informers = informer.NewSet(cfg.Informers, cfg.Client)
	for _, r := range append(append([]*resources.Resource(nil), dependentResources...), ownerResources...) {
		idx := cache.Indexers{ownerUIDIndex: indexOwnerUIDs}
		if r == resources.Pods {
			idx[nodeNameIndex] = informer.IndexByNodeName
		}
		inf, err := c.informers.Add(r, idx)
		if err != nil {
			return nil, fmt.Errorf("garbage collector: %w", err)
		}
		c.stores[r] = inf.GetIndexer()
		if _, err := inf.AddEventHandler(c.handlers(r)); err != nil {
			return nil, fmt.Errorf("garbage collector: %w", err)
		}
	}
	return c, nil
}

func indexOwnerUIDs(obj any) ([]string, error) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, ref := range o.GetOwnerReferences() {
		out = append(out, string(ref.UID))
	}
	return out, nil
}

func isDependent(r *resources.Resource) bool {
	for _, d := range dependentResources {
		if d == r {
			return true
		}
	}
	return false
}

func metaOf(obj any) (metav1.Object, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(metav1.Object)
	return o, ok
}

func (c *Collector) handlers(r *resources.Resource) cache.ResourceEventHandlerFuncs {
	onChange := func(obj any) {
		o, ok := metaOf(obj)
		if !ok {
			return
		}
		if isDependent(r) && len(o.GetOwnerReferences()) > 0 {
			c.queue.Add(item{dependentItem, r.Name, o.GetNamespace(), o.GetName()})
		}
		if r == resources.Pods {
			if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
				if _, exists, _ := c.stores[resources.Nodes].GetByKey(p.Spec.NodeName); !exists {
					c.queue.Add(item{boundPodItem, r.Name, p.Namespace, p.Name})
				}
			}
		}
		if o.GetDeletionTimestamp() != nil && len(o.GetFinalizers()) > 0 {
			c.queue.Add(item{ownerItem, r.Name, o.GetNamespace(), o.GetName()})
			c.enqueueDependents(o.GetUID())
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := metaOf(obj); ok && r == resources.Nodes {
				c.nodeBack(o.GetName())
			}
			onChange(obj)
		},
		UpdateFunc: func(oldObj, cur any) {
			if o, ok := metaOf(cur); ok && r == resources.Nodes {
				c.nodeBack(o.GetName()) // also undoes a live read that raced the Node's return
			}
			onChange(cur)
			c.enqueueDeletingOwners(oldObj)
		},
		DeleteFunc: func(obj any) {
			o, ok := metaOf(obj)
			if !ok {
				return
			}
			// Its dependents may now dangle; its owners may now be free to go.
			c.enqueueDependents(o.GetUID())
			c.enqueueDeletingOwners(obj)
			if r == resources.Nodes {
				objs, _ := c.stores[resources.Pods].ByIndex(nodeNameIndex, o.GetName())
				for _, p := range objs {
					pod := p.(*corev1.Pod)
					c.queue.Add(item{boundPodItem, resources.Pods.Name, pod.Namespace, pod.Name})
				}
			}
		},
	}
}

// enqueueDependents enqueues every cached dependent referencing uid.
func (c *Collector) enqueueDependents(uid types.UID) {
	for _, r := range dependentResources {
		objs, _ := c.stores[r].ByIndex(ownerUIDIndex, string(uid))
		for _, obj := range objs {
			o := obj.(metav1.Object)
			c.queue.Add(item{dependentItem, r.Name, o.GetNamespace(), o.GetName()})
		}
	}
}

// enqueueDeletingOwners enqueues the owners of obj, so finalizers waiting on
// it get another look.
func (c *Collector) enqueueDeletingOwners(obj any) {
	o, ok := metaOf(obj)
	if !ok {
		return
	}
	for _, ref := range o.GetOwnerReferences() {
		r := resources.ByGVK(schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind))
		if r == nil {
			continue
		}
		ns := ""
		if r.Namespaced {
			ns = o.GetNamespace()
		}
		c.queue.Add(item{ownerItem, r.Name, ns, ref.Name})
	}
}

// Run starts the informers, waits for their caches, runs n workers and the
// resync ticker, and blocks until ctx ends; it returns after every goroutine
// it started has stopped.
func (c *Collector) Run(ctx context.Context, n int) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.queue.ShutDown()
	if err := c.informers.Start(ctx, &wg, "garbage collector"); err != nil {
		return err
	}
	workers.Run(ctx, &wg, n, c.queue, c.sync, c.syncFailed)
	workers.Every(ctx, &wg, c.clock, c.resync, c.enqueueAll)
	c.logger.Info("garbage collector: started", "workers", n)
	<-ctx.Done()
	return nil
}

// enqueueAll re-checks every dependent, deleting owner and bound pod, and
// forgets the missing Nodes no cached pod is bound to any more.
func (c *Collector) enqueueAll() {
	c.mu.Lock()
	for name := range c.nodesGone {
		if objs, _ := c.stores[resources.Pods].ByIndex(nodeNameIndex, name); len(objs) == 0 {
			delete(c.nodesGone, name)
		}
	}
	c.mu.Unlock()
	for r, store := range c.stores {
		for _, obj := range store.List() {
			o := obj.(metav1.Object)
			if isDependent(r) && len(o.GetOwnerReferences()) > 0 {
				c.queue.Add(item{dependentItem, r.Name, o.GetNamespace(), o.GetName()})
			}
			if o.GetDeletionTimestamp() != nil && len(o.GetFinalizers()) > 0 {
				c.queue.Add(item{ownerItem, r.Name, o.GetNamespace(), o.GetName()})
			}
			if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
				c.queue.Add(item{boundPodItem, r.Name, p.Namespace, p.Name})
			}
		}
	}
}

func (c *Collector) syncFailed(it item, err error) {
	c.logger.Warn("garbage collection failed; will retry", "resource", it.resource, "object", it.namespace+"/"+it.name, "err", err)
}

func (c *Collector) sync(ctx context.Context, it item) error {
	r := resources.ByName(it.resource)
	if r == nil {
		return nil
	}
	switch it.kind {
	case dependentItem:
		return c.syncDependent(ctx, r, it.namespace, it.name)
	case ownerItem:
		return c.syncOwner(ctx, r, it.namespace, it.name)
	case boundPodItem:
		return c.syncBoundPod(ctx, it.namespace, it.name)
	}
	return nil
}
