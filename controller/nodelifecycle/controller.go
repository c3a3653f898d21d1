package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/record"
	"github.com/everynode/everynode/controller/internal/informer"
	"github.com/everynode/everynode/controller/internal/workers"
	"github.com/everynode/everynode/resources"
)

// Defaults for Config.
const (
	// DefaultReconcileInterval re-reads membership for every node even without hints.
	DefaultReconcileInterval = 10 * time.Second
	// DefaultGracePeriod is how long a new Node may be unknown to membership
	// before it is considered unreachable (Kubernetes' node monitor grace is 40s).
	DefaultGracePeriod = 40 * time.Second
)

// ReasonTaintManagerEviction is the event reason of an eviction (as Kubernetes).
const ReasonTaintManagerEviction = "TaintManagerEviction"

// Component is the source of the controller's events.
const Component = "node-lifecycle-controller"

const nodeNameIndex = informer.NodeNameIndex

var discard = logr.Discard()

// Config configures a Controller.
type Config struct {
	// Client is the API. Required.
	Client client.Interface
	// Membership says which nodes are alive. Required.
	Membership Membership
	// Logger; nil discards.
	Logger *slog.Logger
	// Clock; nil is the real clock.
	Clock clock.WithTicker
	// ReconcileInterval: full re-check of every node; 0 means DefaultReconcileInterval.
	ReconcileInterval time.Duration
	// GracePeriod for nodes membership does not know yet, counted from the
	// Node's creation or from Run, whichever is later; 0 means DefaultGracePeriod.
	GracePeriod time.Duration
	// Informers, when set, provides informers shared with other
	// controllers, run by its owner (see controller.RunAll); nil makes the
	// controller's own.
	Informers *informer.Shared
}

// Controller keeps Nodes' Ready condition and not-ready/unreachable
// NoExecute taints in line with membership, marks pods on unreachable nodes
// not ready, and evicts pods that do not tolerate a node's NoExecute taints
// (honouring tolerationSeconds). Create with New, start once with Run.
type Controller struct {
	client    client.Interface
	members   Membership
	logger    *slog.Logger
	clock     clock.WithTicker
	reconcile time.Duration
	grace     time.Duration
	// started is when Run began: the grace for nodes membership does not
	// know runs from it too. Set by Run before any worker starts.
	started time.Time

	// round is membership by name, read once per round of syncs (each
	// hint and reconcile tick) while Run runs: a node's sync looks its
	// member up instead of copying all of membership, which made a round
	// O(nodes²). Nil before Run: sync reads membership itself.
	round atomic.Pointer[map[string]Member]

	// nodeLister and podIndexer read the informers' caches, whose
	// objects are shared: read-only, DeepCopy before changing. Pods are
	// read by node through the NodeNameIndex, which listers do not offer.
	informers  *informer.Set
	nodeLister corelisters.NodeLister
	podIndexer cache.Indexer
	queue      workqueue.TypedRateLimitingInterface[string]

	// events and recorder write the eviction events; events runs under Run.
	events   *record.Broadcaster
	recorder record.EventRecorder
}

// New builds a Controller; nothing runs until Run.
func New(cfg Config) (_ *Controller, err error) {
	if cfg.Client == nil || cfg.Membership == nil {
		return nil, errors.New("node lifecycle controller: Config.Client and Config.Membership are required")
	}
	c := &Controller{
		client: cfg.Client, members: cfg.Membership, logger: cfg.Logger, clock: cfg.Clock,
		reconcile: cfg.ReconcileInterval, grace: cfg.GracePeriod,
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.reconcile <= 0 {
		c.reconcile = DefaultReconcileInterval
	}
	if c.grace <= 0 {
		c.grace = DefaultGracePeriod
	}
	c.events = record.NewBroadcaster(cfg.Client, record.Options{Logger: c.logger, Clock: c.clock, ResourceFor: resources.ForObject})
	c.recorder = c.events.NewRecorder(corev1.EventSource{Component: Component})
	c.queue = workers.NewQueue[string](c.clock)
	defer workers.ShutDownOnError(c.queue, &err)
	c.informers = informer.NewSet(cfg.Informers, cfg.Client)
	nodeInf, err := c.informers.Add(resources.Nodes, nil)
	if err != nil {
		return nil, fmt.Errorf("node lifecycle controller: %w", err)
	}
	podInf, err := c.informers.Add(resources.Pods, cache.Indexers{nodeNameIndex: informer.IndexByNodeName})
	if err != nil {
		return nil, fmt.Errorf("node lifecycle controller: %w", err)
	}
	c.nodeLister, c.podIndexer = corelisters.NewNodeLister(nodeInf.GetIndexer()), podInf.GetIndexer()
	if _, err := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueNode,
		UpdateFunc: func(_, cur any) { c.enqueueNode(cur) },
	}); err != nil {
		return nil, fmt.Errorf("node lifecycle controller: %w", err)
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.podChanged,
		UpdateFunc: func(_, cur any) { c.podChanged(cur) },
	}); err != nil {
		return nil, fmt.Errorf("node lifecycle controller: %w", err)
	}
	return c, nil
}

func (c *Controller) enqueueNode(obj any) {
	if n, ok := obj.(*corev1.Node); ok {
		c.queue.Add(n.Name)
	}
}

// podChanged enqueues the pod's node when that node might evict it.
func (c *Controller) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil {
		return
	}
	node, err := c.nodeLister.Get(pod.Spec.NodeName)
	if err != nil {
		return
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoExecute {
			c.queue.Add(node.Name)
			return
		}
	}
	if r := readyCondition(node); r != nil && r.Status == corev1.ConditionUnknown {
		c.queue.Add(node.Name)
	}
}

func (c *Controller) enqueueAll() {
	nodes, _ := c.nodeLister.List(labels.Everything()) // a cache list does not fail
	for _, n := range nodes {
		c.queue.Add(n.Name)
	}
}

// Run starts the informers, waits for their caches, runs n workers and the
// membership loop (hints plus a ReconcileInterval ticker), and blocks until
// ctx ends; it returns after every goroutine it started has stopped.
func (c *Controller) Run(ctx context.Context, n int) error {
	c.started = c.clock.Now()
	c.events.Start()
	defer c.events.Shutdown() // after the workers have stopped
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.queue.ShutDown()
	if err := c.informers.Start(ctx, &wg, "node lifecycle controller"); err != nil {
		return err
	}
	c.readMembers()
	workers.Run(ctx, &wg, n, c.queue, c.sync, c.syncFailed)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := c.clock.NewTicker(c.reconcile)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.members.Changed():
			case <-t.C():
			}
			c.readMembers()
			c.enqueueAll()
		}
	}()
	c.logger.Info("node lifecycle controller: started", "workers", n)
	<-ctx.Done()
	return nil
}

// readMembers starts a round: it reads membership for the syncs that
// follow (see Controller.round). A hint arrives after the change it
// announces, so the round that follows it sees the change.
func (c *Controller) readMembers() {
	ms := c.members.Members()
	byName := make(map[string]Member, len(ms))
	for _, m := range ms {
		byName[m.Name] = m
	}
	c.round.Store(&byName)
}

// member returns name's member in the current round, or, before Run,
// from membership itself.
func (c *Controller) member(name string) (Member, bool) {
	if round := c.round.Load(); round != nil {
		m, ok := (*round)[name]
		return m, ok
	}
	for _, m := range c.members.Members() {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

func (c *Controller) syncFailed(key string, err error) {
	c.logger.Warn("node lifecycle sync failed; will retry", "node", key, "err", err)
}

// sync reconciles one node: Ready condition, lifecycle taints, pod
// readiness on unreachable nodes, evictions. Level-triggered.
func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.nodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	now := c.clock.Now()
	member, known := c.member(name)
	if cond, changed := desiredReady(node, member, known, now, c.grace, c.started); changed {
		toUpdate := node.DeepCopy()
		setCondition(toUpdate, cond)
		o, err := c.client.UpdateStatus(ctx, toUpdate, client.WriteOptions{})
		if err != nil {
			return fmt.Errorf("update node %s ready condition: %w", name, err)
		}
		node = o.(*corev1.Node)
		c.logger.Info("node readiness changed", "node", name, "ready", cond.Status, "reason", cond.Reason)
	}
	ready := readyCondition(node)
	if taints, changed := desiredTaints(node.Spec.Taints, ready, now); changed {
		toUpdate := node.DeepCopy()
		toUpdate.Spec.Taints = taints
		o, err := c.client.Update(ctx, toUpdate, client.WriteOptions{})
		if err != nil {
			return fmt.Errorf("update node %s taints: %w", name, err)
		}
		node = o.(*corev1.Node)
	}

	objs, err := c.podIndexer.ByIndex(nodeNameIndex, name)
	if err != nil {
		return err
	}
	var errs []error
	var next time.Duration
	for _, o := range objs {
		pod := o.(*corev1.Pod)
		if pod.DeletionTimestamp != nil {
			continue
		}
		if ready != nil && ready.Status == corev1.ConditionUnknown {
			if err := c.markPodNotReady(ctx, pod, now); err != nil {
				errs = append(errs, err)
			}
		}
		at, evict := evictionTime(pod, node.Spec.Taints, now)
		if !evict {
			continue
		}
		if d := at.Sub(now); d > 0 {
			if next == 0 || d < next {
				next = d
			}
			continue
		}
		if err := c.evict(ctx, pod, node.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if next > 0 {
		c.queue.AddAfter(name, next)
	}
	return errors.Join(errs...)
}

// markPodNotReady sets the pod's Ready condition False: its agent is
// unreachable and cannot report (Kubernetes' MarkPodsNotReady).
func (c *Controller) markPodNotReady(ctx context.Context, pod *corev1.Pod, now time.Time) error {
	for i, cond := range pod.Status.Conditions {
		if cond.Type != corev1.PodReady || cond.Status == corev1.ConditionFalse {
			continue
		}
		toUpdate := pod.DeepCopy()
		toUpdate.Status.Conditions[i].Status = corev1.ConditionFalse
		toUpdate.Status.Conditions[i].Reason = "NodeUnreachable"
		toUpdate.Status.Conditions[i].LastTransitionTime = metav1.NewTime(now)
		if equality.Semantic.DeepEqual(toUpdate.Status, pod.Status) {
			return nil
		}
		if _, err := c.client.UpdateStatus(ctx, toUpdate, client.WriteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("mark pod %s/%s not ready: %w", pod.Namespace, pod.Name, err)
		}
		return nil
	}
	return nil
}

func (c *Controller) evict(ctx context.Context, pod *corev1.Pod, node string) error {
	uid := pod.UID
	_, err := c.client.Delete(ctx, resources.Pods, pod.Namespace, pod.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("evict pod %s/%s from node %s: %w", pod.Namespace, pod.Name, node, err)
	}
	if err == nil {
		c.logger.Info("evicted pod", "pod", pod.Namespace+"/"+pod.Name, "node", node)
		c.event(pod, "Marking for deletion Pod "+pod.Namespace+"/"+pod.Name)
	}
	return nil
}

// event records a Normal event about pod (best-effort, see client/record).
func (c *Controller) event(pod *corev1.Pod, msg string) {
	c.recorder.Event(pod, corev1.EventTypeNormal, ReasonTaintManagerEviction, msg)
}
