package daemonset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/record"
	"github.com/everynode/everynode/controller/internal/informer"
	"github.com/everynode/everynode/controller/internal/workers"
	"github.com/everynode/everynode/resources"
)

// BackoffGCInterval is how often expired failed-pod back-off entries are dropped.
const BackoffGCInterval = time.Minute

// Config configures a Controller.
type Config struct {
	// Client is the API. Required. The controller lists and watches
	// daemonsets, pods, nodes and controllerrevisions in all namespaces and
	// writes pods, revisions, daemonset status and events.
	Client client.Interface
	// Logger receives the controller's logs; nil discards them.
	Logger *slog.Logger
	// Clock drives back-off, minReadySeconds and expectations; nil is the real clock.
	Clock clock.WithTicker
	// Informers, when set, provides informers shared with other
	// controllers, run by its owner (see controller.RunAll); nil makes the
	// controller's own.
	Informers *informer.Shared
	// UnreachableGrace is how long a node must have been NotReady or
	// Unknown before a rollout sets it aside (docs/rollouts.md §7); 0 means
	// DefaultUnreachableGrace.
	UnreachableGrace time.Duration
}

// Controller is the DaemonSet controller: the sample-controller skeleton
// around Kubernetes' syncDaemonSet. Create it with New and start it once with Run.
type Controller struct {
	client     client.Interface
	podControl podControl
	recorder   eventRecorder
	// rolloutRecorder records the rollout settings' events (RolloutComponent).
	rolloutRecorder eventRecorder
	events          *record.Broadcaster // the recorders'; runs under Run
	logger          *slog.Logger
	clock           clock.WithTicker

	burstReplicas     int
	unreachableGrace  time.Duration
	failedPodsBackoff *flowcontrol.Backoff
	expectations      *expectations
	statusPacer       *pacer // status-only syncs, one per StatusOnlyInterval

	// The listers read the informers' caches. Their objects are shared
	// with the informers (and, in process, with the API server's watch
	// cache): read-only, DeepCopy before changing.
	informers  *informer.Set
	dsLister   appslisters.DaemonSetLister
	podLister  corelisters.PodLister
	nodeLister corelisters.NodeLister
	crLister   appslisters.ControllerRevisionLister

	queue workqueue.TypedRateLimitingInterface[string]
}

// New builds a Controller. Nothing runs until Run.
func New(cfg Config) (_ *Controller, err error) {
	if cfg.Client == nil {
		return nil, errors.New("daemonset controller: Config.Client is required")
	}
	if cfg.UnreachableGrace < 0 {
		return nil, errors.New("daemonset controller: Config.UnreachableGrace must not be negative")
	}
	if cfg.UnreachableGrace == 0 {
		cfg.UnreachableGrace = DefaultUnreachableGrace
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	events := record.NewBroadcaster(cfg.Client, record.Options{Logger: logger, Clock: clk, ResourceFor: resources.ForObject})
	rec := events.NewRecorder(corev1.EventSource{Component: Component})
	c := &Controller{
		client:            cfg.Client,
		recorder:          rec,
		rolloutRecorder:   events.NewRecorder(corev1.EventSource{Component: RolloutComponent}),
		events:            events,
		logger:            logger,
		clock:             clk,
		burstReplicas:     BurstReplicas,
		unreachableGrace:  cfg.UnreachableGrace,
		failedPodsBackoff: flowcontrol.NewFakeBackOff(FailedPodBackoffInitial, FailedPodBackoffMax, clk),
		expectations:      newExpectations(clk),
		statusPacer:       newPacer(),
		queue:             workers.NewQueue[string](clk),
	}
	defer workers.ShutDownOnError(c.queue, &err)
	c.podControl = clientPodControl{client: cfg.Client, recorder: rec}

	c.informers = informer.NewSet(cfg.Informers, cfg.Client)
	infs := make([]cache.SharedIndexInformer, 4)
	for i, r := range []*resources.Resource{resources.DaemonSets, resources.Pods, resources.Nodes, resources.ControllerRevisions} {
		inf, err := c.informers.Add(r, nil)
		if err != nil {
			return nil, fmt.Errorf("daemonset controller: %w", err)
		}
		infs[i] = inf
	}
	dsInf, podInf, nodeInf, crInf := infs[0], infs[1], infs[2], infs[3]
	c.dsLister = appslisters.NewDaemonSetLister(dsInf.GetIndexer())
	c.podLister = corelisters.NewPodLister(podInf.GetIndexer())
	c.nodeLister = corelisters.NewNodeLister(nodeInf.GetIndexer())
	c.crLister = appslisters.NewControllerRevisionLister(crInf.GetIndexer())

	for _, reg := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandlerFuncs
	}{
		{dsInf, cache.ResourceEventHandlerFuncs{AddFunc: c.addDaemonSet, UpdateFunc: c.updateDaemonSet, DeleteFunc: c.deleteDaemonSet}},
		{podInf, cache.ResourceEventHandlerFuncs{AddFunc: c.addPod, UpdateFunc: c.updatePod, DeleteFunc: c.deletePod}},
		{nodeInf, cache.ResourceEventHandlerFuncs{AddFunc: c.addNode, UpdateFunc: c.updateNode, DeleteFunc: c.deleteNode}},
		{crInf, cache.ResourceEventHandlerFuncs{AddFunc: c.addHistory, UpdateFunc: c.updateHistory, DeleteFunc: c.deleteHistory}},
	} {
		if _, err := reg.inf.AddEventHandler(reg.h); err != nil {
			return nil, fmt.Errorf("daemonset controller: add event handler: %w", err)
		}
	}
	return c, nil
}

// Run starts the informers, waits for their caches, runs n sync
// workers and blocks until ctx ends; it returns after every goroutine it
// started has stopped. It returns ctx's error if the caches never synced.
// Run may be called once.
func (c *Controller) Run(ctx context.Context, n int) error {
	c.events.Start()
	defer c.events.Shutdown() // after the workers have stopped
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.queue.ShutDown()

	c.logger.Info("daemonset controller: waiting for caches")
	if err := c.informers.Start(ctx, &wg, "daemonset controller"); err != nil {
		return err
	}
	c.logger.Info("daemonset controller: started", "workers", n)
	workers.Run(ctx, &wg, n, c.queue, c.sync, c.syncFailed)
	workers.Every(ctx, &wg, c.clock, BackoffGCInterval, c.failedPodsBackoff.GC)
	<-ctx.Done()
	c.logger.Info("daemonset controller: stopping")
	return nil
}

// processNextWorkItem syncs one queued daemonset; tests drive it directly.
func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	return workers.ProcessNext(ctx, c.queue, c.sync, c.syncFailed)
}

func (c *Controller) syncFailed(key string, err error) {
	c.logger.Warn("daemonset sync failed; will retry", "daemonset", key, "err", err)
}

func dsKey(ds *appsv1.DaemonSet) string { return ds.Namespace + "/" + ds.Name }

func (c *Controller) enqueue(ds *appsv1.DaemonSet) { c.queue.Add(dsKey(ds)) }

func (c *Controller) enqueueAfter(ds *appsv1.DaemonSet, d time.Duration) {
	c.queue.AddAfter(dsKey(ds), d)
}

// listNodes returns the cached nodes sorted by name (read-only).
func (c *Controller) listNodes() []*corev1.Node {
	nodes, _ := c.nodeLister.List(labels.Everything()) // a cache list does not fail
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	return nodes
}

// listDaemonSets returns the cached DaemonSets (read-only), optionally of one namespace.
func (c *Controller) listDaemonSets(namespace string) []*appsv1.DaemonSet {
	// namespace "" is metav1.NamespaceAll; a cache list does not fail.
	out, _ := c.dsLister.DaemonSets(namespace).List(labels.Everything())
	sort.Slice(out, func(i, j int) bool { return dsKey(out[i]) < dsKey(out[j]) })
	return out
}
