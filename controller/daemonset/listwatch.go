package daemonset

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// namespaceIndex indexes cached objects by namespace.
const namespaceIndex = cache.NamespaceIndex

// listWatcher adapts client.Interface to client-go's reflector. It declares
// that the client does not speak the streaming watch-list protocol, so the
// reflector lists and then watches from the list's resourceVersion.
type listWatcher struct {
	*cache.ListWatch
}

func (listWatcher) IsWatchListSemanticsUnSupported() bool { return true }

// newListWatcher lists and watches r in every namespace through c.
func newListWatcher(c client.Interface, r *resources.Resource) cache.ListerWatcher {
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

func newInformer(c client.Interface, r *resources.Resource) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(newListWatcher(c, r), r.New(), 0,
		cache.Indexers{namespaceIndex: cache.MetaNamespaceIndexFunc})
}
