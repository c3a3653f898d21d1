// Package informer feeds client-go shared informers from client.Interface List
// and Watch, so controllers get watch caches without a Kubernetes clientset.
//
// Under controller.RunAll the controllers share one informer per resource
// (Shared), and with the API server's in-process client those informers
// hold the store's cached objects themselves, not copies (readOnlyClient):
// the server keeps one decoded copy of each object. A controller built on
// its own makes and runs its own informers (Set).
package informer

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// NamespaceIndex indexes cached objects by namespace (every informer has it).
const NamespaceIndex = cache.NamespaceIndex

// NodeNameIndex indexes pods by spec.nodeName (see IndexByNodeName).
const NodeNameIndex = "spec.nodeName"

// IndexByNodeName is the NodeNameIndex function: a bound pod's node name.
func IndexByNodeName(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

// readOnlyClient is implemented by in-process clients that can hand out the
// server's cached objects instead of copies (the API server's local client:
// ListReadOnly and WatchReadOnly). Informers use it when their client offers
// it, so the informers of the server's controllers hold pointers to the one
// decoded copy of each object in the store's watch cache rather than copies
// of their own.
//
// Those objects are shared with the API server and every other reader. They
// are READ-ONLY, as informer objects always are: DeepCopy before changing.
type readOnlyClient interface {
	ListReadOnly(ctx context.Context, r *resources.Resource, namespace string, opts client.ListOptions) ([]client.Object, string, error)
	WatchReadOnly(ctx context.Context, r *resources.Resource, namespace string, opts client.ListOptions) (watch.Interface, error)
}

// listWatcher adapts client.Interface to client-go's reflector. It declares
// that the client does not speak the streaming watch-list protocol, so the
// reflector lists and then watches from the list's resourceVersion.
type listWatcher struct {
	*cache.ListWatch
}

func (listWatcher) IsWatchListSemanticsUnSupported() bool { return true }

// NewListWatcher lists and watches r in every namespace through c, without
// copying when c is a readOnlyClient.
func NewListWatcher(c client.Interface, r *resources.Resource) cache.ListerWatcher {
	return newListWatcher(c, r, "")
}

// newListWatcher is NewListWatcher for the objects that match fieldSelector
// too ("" selects all).
func newListWatcher(c client.Interface, r *resources.Resource, fieldSelector string) cache.ListerWatcher {
	fields := func(opts metav1.ListOptions) string {
		switch {
		case fieldSelector == "":
			return opts.FieldSelector
		case opts.FieldSelector == "":
			return fieldSelector
		}
		return fieldSelector + "," + opts.FieldSelector
	}
	list, watchFn := c.List, c.Watch
	if ro, ok := c.(readOnlyClient); ok {
		list, watchFn = ro.ListReadOnly, ro.WatchReadOnly
	}
	return listWatcher{&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			items, rv, err := list(ctx, r, "", client.ListOptions{LabelSelector: opts.LabelSelector, FieldSelector: fields(opts)})
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", r.Name, err)
			}
			// A generic list: the reflector takes each item's pointer as
			// is, where a typed list (PodList) would hold a copy of every
			// object in one array, and the reflector another.
			list := &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: make([]runtime.RawExtension, len(items))}
			for i := range items {
				list.Items[i].Object = items[i]
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			lo := client.ListOptions{LabelSelector: opts.LabelSelector, FieldSelector: fields(opts), ResourceVersion: opts.ResourceVersion}
			if opts.TimeoutSeconds != nil {
				lo.TimeoutSeconds = *opts.TimeoutSeconds
			}
			w, err := watchFn(ctx, r, "", lo)
			if err != nil {
				return nil, fmt.Errorf("watch %s: %w", r.Name, err)
			}
			return w, nil
		},
	}}
}

// New returns a shared informer over r in all namespaces, without periodic
// resync, indexed by namespace plus the given extra indexers. The informer
// runs until the context passed to its RunWithContext ends.
func New(c client.Interface, r *resources.Resource, extra cache.Indexers) cache.SharedIndexInformer {
	idx := cache.Indexers{NamespaceIndex: cache.MetaNamespaceIndexFunc}
	for k, v := range extra {
		idx[k] = v
	}
	return cache.NewSharedIndexInformer(NewListWatcher(c, r), r.New(), 0, idx)
}

// Shared hands out one informer per resource to several controllers, so
// the server's controllers keep one cache and one watch per resource
// instead of one each (as kube-controller-manager's shared informer
// factory). Lifecycle:
//
//  1. build every controller with the same Shared (each asks for the
//     informers it needs, with its indexers, through a Set);
//  2. the owner calls Run, which runs every informer handed out until ctx
//     ends; the controllers' Set.Start waits for them to sync.
//
// Indexers are identified by name: an indexer whose name an informer
// already has is not added again, so controllers sharing an informer must
// mean the same index by the same name (use NamespaceIndex and
// NodeNameIndex). Safe for concurrent use.
type Shared struct {
	client client.Interface

	mu        sync.Mutex
	informers map[*resources.Resource]cache.SharedIndexInformer
	order     []cache.SharedIndexInformer
	running   bool
}

// NewShared returns a Shared over c.
func NewShared(c client.Interface) *Shared {
	return &Shared{client: c, informers: map[*resources.Resource]cache.SharedIndexInformer{}}
}

// get returns r's informer with the extra indexers added.
func (s *Shared) get(r *resources.Resource, extra cache.Indexers) (cache.SharedIndexInformer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil, fmt.Errorf("informer for %s: the shared informers already run", r.Name)
	}
	inf := s.informers[r]
	if inf == nil {
		inf = New(s.client, r, extra)
		s.informers[r] = inf
		s.order = append(s.order, inf)
		return inf, nil
	}
	have := inf.GetIndexer().GetIndexers()
	add := cache.Indexers{}
	for name, f := range extra {
		if _, ok := have[name]; !ok {
			add[name] = f
		}
	}
	if len(add) > 0 {
		if err := inf.AddIndexers(add); err != nil {
			return nil, fmt.Errorf("informer for %s: %w", r.Name, err)
		}
	}
	return inf, nil
}

// Run runs every informer handed out so far, each in a goroutine Run
// waits for, until ctx ends. Call it once, after the controllers were
// built; informers cannot be handed out afterwards.
func (s *Shared) Run(ctx context.Context) {
	s.mu.Lock()
	s.running = true
	infs := s.order
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, inf := range infs {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Wait()
}

// Set is one controller's informers: taken from a Shared, whose owner runs
// them, or, without one, made and run by the controller itself.
type Set struct {
	shared *Shared // nil: the controller's own informers
	client client.Interface
	all    []cache.SharedIndexInformer
	own    []cache.SharedIndexInformer
}

// NewSet returns an empty Set over c, drawing from shared unless it is nil.
func NewSet(shared *Shared, c client.Interface) *Set { return &Set{shared: shared, client: c} }

// Add returns an informer over r in all namespaces with the extra
// indexers (see New and Shared).
func (s *Set) Add(r *resources.Resource, extra cache.Indexers) (cache.SharedIndexInformer, error) {
	if s.shared != nil {
		inf, err := s.shared.get(r, extra)
		if err != nil {
			return nil, err
		}
		s.all = append(s.all, inf)
		return inf, nil
	}
	inf := New(s.client, r, extra)
	s.all = append(s.all, inf)
	s.own = append(s.own, inf)
	return inf, nil
}

// AddFiltered returns an informer of the set's own (never shared) over the
// objects of r that match fieldSelector ("metadata.namespace=kube-system,
// type=bootstrap.kubernetes.io/token"), for a controller that needs a few
// objects of a resource whose whole cache it should not hold.
func (s *Set) AddFiltered(r *resources.Resource, fieldSelector string) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformer(newListWatcher(s.client, r, fieldSelector), r.New(), 0,
		cache.Indexers{NamespaceIndex: cache.MetaNamespaceIndexFunc})
	s.all = append(s.all, inf)
	s.own = append(s.own, inf)
	return inf
}

// Informers returns every informer of the set.
func (s *Set) Informers() []cache.SharedIndexInformer { return s.all }

// Start runs the set's own informers, each in its own goroutine on wg, and
// waits for every informer of the set to sync. The caller owns the
// goroutines: they stop when ctx ends, and the caller waits for them with
// wg.Wait, also when Start fails. Start fails, with an error naming the
// caller (name), only if ctx ends before the caches have synced.
func (s *Set) Start(ctx context.Context, wg *sync.WaitGroup, name string) error {
	synced := make([]cache.InformerSynced, len(s.all))
	for i, inf := range s.all {
		synced[i] = inf.HasSynced
	}
	for _, inf := range s.own {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("%s: caches did not sync: %w", name, ctx.Err())
	}
	return nil
}
