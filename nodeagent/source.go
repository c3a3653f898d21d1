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
	resources "github.com/everynode/everynode/resources/core"
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

// Names of the desired-pod sets the podCache merges.
const (
	// setAPI holds the pods assigned through the API (or its disk copy).
	setAPI = "api"
	// setStatic holds the static pods of the manifest directory.
	setStatic = "static"
)

// podCache is the agent's desired pods: the merge of named sets, each fed
// by one PodSource through sink(name). Every change enqueues the UIDs
// concerned. Used directly as a PodSink it feeds the API set.
type podCache struct {
	enqueue  func(types.UID)
	replaced func() // called after every Replace

	mu    sync.RWMutex
	order []string // set names, in precedence order
	sets  map[string]*podSet
	// origin remembers the set a UID was last desired by, so a UID dropped
	// by a synced set is torn down even while another set has not synced.
	origin map[types.UID]string
}

type podSet struct {
	pods   map[types.UID]*corev1.Pod
	synced bool
}

func newPodCache(enqueue func(types.UID), replaced func(), sets ...string) *podCache {
	c := &podCache{enqueue: enqueue, replaced: replaced, sets: make(map[string]*podSet), origin: make(map[types.UID]string)}
	for _, name := range append([]string{setAPI}, sets...) {
		if _, ok := c.sets[name]; ok {
			continue
		}
		c.order = append(c.order, name)
		c.sets[name] = &podSet{pods: make(map[types.UID]*corev1.Pod)}
	}
	return c
}

// setSink is the PodSink of one set.
type setSink struct {
	c    *podCache
	name string
}

func (s setSink) Replace(pods []*corev1.Pod) { s.c.replace(s.name, pods) }
func (s setSink) Update(pod *corev1.Pod)     { s.c.update(s.name, pod) }
func (s setSink) Remove(uid types.UID)       { s.c.remove(s.name, uid) }

// sink returns the PodSink feeding the named set (which New registered).
func (c *podCache) sink(name string) PodSink { return setSink{c: c, name: name} }

func (c *podCache) Replace(pods []*corev1.Pod) { c.replace(setAPI, pods) }
func (c *podCache) Update(pod *corev1.Pod)     { c.update(setAPI, pod) }
func (c *podCache) Remove(uid types.UID)       { c.remove(setAPI, uid) }

func (c *podCache) replace(name string, pods []*corev1.Pod) {
	c.mu.Lock()
	set := c.sets[name]
	old := set.pods
	set.pods = make(map[types.UID]*corev1.Pod, len(pods))
	for _, p := range pods {
		set.pods[p.UID] = p
		c.origin[p.UID] = name
	}
	set.synced = true
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

func (c *podCache) update(name string, pod *corev1.Pod) {
	c.mu.Lock()
	c.sets[name].pods[pod.UID] = pod
	c.origin[pod.UID] = name
	c.mu.Unlock()
	c.enqueue(pod.UID)
}

func (c *podCache) remove(name string, uid types.UID) {
	c.mu.Lock()
	delete(c.sets[name].pods, uid)
	c.mu.Unlock()
	c.enqueue(uid)
}

// allSynced reports whether every set has had its first Replace; lock held.
func (c *podCache) allSynced() bool {
	for _, s := range c.sets {
		if !s.synced {
			return false
		}
	}
	return true
}

// lookup returns the desired pod and its set's name; lock held.
func (c *podCache) lookup(uid types.UID) (*corev1.Pod, string) {
	for _, name := range c.order {
		if p, ok := c.sets[name].pods[uid]; ok {
			return p, name
		}
	}
	return nil, ""
}

// get returns the desired pod (shared, read-only) and whether the cache
// knows enough to tear the UID down when it is not desired: every set has
// synced, or the set that last desired it has.
func (c *podCache) get(uid types.UID) (*corev1.Pod, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p, _ := c.lookup(uid)
	if p == nil {
		if src, ok := c.origin[uid]; ok && c.sets[src].synced {
			return nil, true
		}
	}
	return p, c.allSynced()
}

// isStatic reports whether uid is a static pod (from the manifest directory).
func (c *podCache) isStatic(uid types.UID) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, name := c.lookup(uid)
	return name == setStatic
}

// list returns the pods of one set (shared, read-only) and whether it synced.
func (c *podCache) list(name string) ([]*corev1.Pod, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	set := c.sets[name]
	if set == nil {
		return nil, false
	}
	out := make([]*corev1.Pod, 0, len(set.pods))
	for _, p := range set.pods {
		out = append(out, p)
	}
	return out, set.synced
}

// forget drops what the cache remembers of a UID no set desires any more.
func (c *podCache) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, _ := c.lookup(uid); p == nil {
		delete(c.origin, uid)
	}
}

// synced reports whether every set has synced.
func (c *podCache) synced() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.allSynced()
}

// desires reports whether some set desires uid.
func (c *podCache) desires(uid types.UID) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p, _ := c.lookup(uid)
	return p != nil
}

// find returns the desired pod with this namespace and name, or nil.
func (c *podCache) find(namespace, name string) *corev1.Pod {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, setName := range c.order {
		for _, p := range c.sets[setName].pods {
			if p.Namespace == namespace && p.Name == name {
				return p
			}
		}
	}
	return nil
}

// apiSource lists and watches the pods bound to node through the API,
// re-listing after errors with back-off (1s doubling to 30s). Mirror pods
// (the API's view of this node's static pods) are not desired pods: they
// are left out, and any event about one calls onMirror (when set).
type apiSource struct {
	api      client.Interface
	node     string
	clock    clock.Clock
	log      *slog.Logger
	onMirror func()
	// onListed, if set, is called after each successful list: the server
	// answers again.
	onListed func()
}

func (s *apiSource) mirror(p *corev1.Pod) bool {
	if !isMirrorPod(p) {
		return false
	}
	if s.onMirror != nil {
		s.onMirror()
	}
	return true
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
	if s.onListed != nil {
		s.onListed()
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && !s.mirror(p) {
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
				if p, ok := ev.Object.(*corev1.Pod); ok && !s.mirror(p) {
					if p.Spec.NodeName == s.node {
						sink.Update(p)
					} else {
						sink.Remove(p.UID)
					}
				}
			case watch.Deleted:
				if p, ok := ev.Object.(*corev1.Pod); ok && !s.mirror(p) {
					sink.Remove(p.UID)
				}
			case watch.Error:
				return true, fmt.Errorf("nodeagent: watch pods: %w", apierrors.FromObject(ev.Object))
			}
		}
	}
}
