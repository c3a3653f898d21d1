// Package informer feeds client-go shared informers from client.Interface List
// and Watch, so controllers get watch caches without a Kubernetes clientset.
package informer

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// NamespaceIndex indexes cached objects by namespace (every informer has it).
const NamespaceIndex = cache.NamespaceIndex

// listWatcher adapts client.Interface to client-go's reflector. It declares
// that the client does not speak the streaming watch-list protocol, so the
// reflector lists and then watches from the list's resourceVersion.
type listWatcher struct {
	*cache.ListWatch
}

func (listWatcher) IsWatchListSemanticsUnSupported() bool { return true }

// NewListWatcher lists and watches r in every namespace through c.
func NewListWatcher(c client.Interface, r *resources.Resource) cache.ListerWatcher {
	return listWatcher{&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			items, rv, err := c.List(ctx, r, "", client.ListOptions{LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector})
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", r.Name, err)
			}
			list := r.NewList()
			objs := make([]runtime.Object, len(items))
			for i := range items {
				objs[i] = items[i]
			}
			if err := meta.SetList(list, objs); err != nil {
				return nil, fmt.Errorf("list %s: %w", r.Name, err)
			}
			la, err := meta.ListAccessor(list)
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", r.Name, err)
			}
			la.SetResourceVersion(rv)
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			lo := client.ListOptions{LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector, ResourceVersion: opts.ResourceVersion}
			if opts.TimeoutSeconds != nil {
				lo.TimeoutSeconds = *opts.TimeoutSeconds
			}
			w, err := c.Watch(ctx, r, "", lo)
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

// Start runs each informer in its own goroutine on wg and waits for all their
// caches to sync. The caller owns the goroutines: they stop when ctx ends, and
// the caller waits for them with wg.Wait, also when Start fails. Start fails,
// with an error naming the caller (name), only if ctx ends before the caches
// have synced.
func Start(ctx context.Context, wg *sync.WaitGroup, name string, informers ...cache.SharedIndexInformer) error {
	synced := make([]cache.InformerSynced, len(informers))
	for i, inf := range informers {
		synced[i] = inf.HasSynced
		wg.Add(1)
		go func() {
			defer wg.Done()
			inf.RunWithContext(ctx)
		}()
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("%s: caches did not sync: %w", name, ctx.Err())
	}
	return nil
}
