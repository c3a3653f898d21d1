package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// PodSink receives the desired pods of this node from a PodSource. Its
// methods are safe for concurrent use, never block for long, and keep the
// pods they are given (the source must not modify them afterwards).
type PodSink interface {
	// Replace sets the complete desired set (after a list); the sink counts
	// as synced from then on.
	Replace(pods []*corev1.Pod)
	// Update adds or replaces one pod.
	Update(pod *corev1.Pod)
	// Remove drops one pod.
	Remove(uid types.UID)
}

// PodSource delivers the desired pods. The API watch is one source; a
// disk-backed or static-manifest source fits the same shape.
type PodSource interface {
	// Run feeds sink until ctx ends (then it returns nil) or it cannot go on
	// (then it returns the error). It must not keep goroutines after returning.
	Run(ctx context.Context, sink PodSink) error
}

// podCache is the agent's PodSink: the desired pods by UID. Every change
// enqueues the UIDs concerned.
type podCache struct {
	enqueue  func(types.UID)
	replaced func() // called after every Replace

	mu     sync.RWMutex
	pods   map[types.UID]*corev1.Pod
	synced bool
}

func newPodCache(enqueue func(types.UID), replaced func()) *podCache {
	return &podCache{enqueue: enqueue, replaced: replaced, pods: make(map[types.UID]*corev1.Pod)}
}

func (c *podCache) Replace(pods []*corev1.Pod) {
	c.mu.Lock()
	old := c.pods
	c.pods = make(map[types.UID]*corev1.Pod, len(pods))
	for _, p := range pods {
		c.pods[p.UID] = p
	}
	c.synced = true
	c.mu.Unlock()
	for uid := range old {
		c.enqueue(uid)
	}
	for _, p := range pods {
		if _, ok := old[p.UID]; !ok {
			c.enqueue(p.UID)
		}
	}
	c.replaced()
}

func (c *podCache) Update(pod *corev1.Pod) {
	c.mu.Lock()
	c.pods[pod.UID] = pod
	c.mu.Unlock()
	c.enqueue(pod.UID)
}

func (c *podCache) Remove(uid types.UID) {
	c.mu.Lock()
	delete(c.pods, uid)
	c.mu.Unlock()
	c.enqueue(uid)
}

// get returns the desired pod (shared, read-only) and whether the cache has
// synced at least once.
func (c *podCache) get(uid types.UID) (*corev1.Pod, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.pods[uid], c.synced
}

// uids returns the desired UIDs and whether the cache has synced.
func (c *podCache) uids() (map[types.UID]bool, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make(map[types.UID]bool, len(c.pods))
	for uid := range c.pods {
		out[uid] = true
	}
	return out, c.synced
}

// apiSource lists and watches the pods bound to node through the API,
// re-listing after errors with back-off (1s doubling to 30s).
type apiSource struct {
	api   client.Interface
	node  string
	clock clock.Clock
	log   *slog.Logger
}

const (
	relistMinBackoff = time.Second
	relistMaxBackoff = 30 * time.Second
)

func (s *apiSource) Run(ctx context.Context, sink PodSink) error {
	backoff := relistMinBackoff
	for {
		healthy, err := s.listAndWatch(ctx, sink)
		if ctx.Err() != nil {
			return nil
		}
		if healthy {
			backoff = relistMinBackoff
		}
		if err != nil {
			s.log.Warn("pod watch failed, re-listing", "err", err, "after", backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.clock.After(backoff):
		}
		if !healthy {
			backoff = min(backoff*2, relistMaxBackoff)
		}
	}
}

// listAndWatch lists, then follows the watch until it ends. healthy reports
// whether the list succeeded (the back-off then restarts from its minimum).
func (s *apiSource) listAndWatch(ctx context.Context, sink PodSink) (healthy bool, err error) {
	opts := client.ListOptions{FieldSelector: "spec.nodeName=" + s.node}
	objs, rv, err := s.api.List(ctx, resources.Pods, "", opts)
	if err != nil {
		return false, fmt.Errorf("nodeagent: list pods: %w", err)
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	sink.Replace(pods)
	opts.ResourceVersion = rv
	w, err := s.api.Watch(ctx, resources.Pods, "", opts)
	if err != nil {
		return true, fmt.Errorf("nodeagent: watch pods: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return true, nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if p, ok := ev.Object.(*corev1.Pod); ok {
					if p.Spec.NodeName == s.node {
						sink.Update(p)
					} else {
						sink.Remove(p.UID)
					}
				}
			case watch.Deleted:
				if p, ok := ev.Object.(*corev1.Pod); ok {
					sink.Remove(p.UID)
				}
			case watch.Error:
				return true, fmt.Errorf("nodeagent: watch pods: %w", apierrors.FromObject(ev.Object))
			}
		}
	}
}
