package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// rolloutWatcher follows the pods of a selector during a rollout in two
// ways and records the worst moments either saw: it polls (lists as fast as
// the API answers) and it watches, re-evaluating the whole pod set after
// every event — the watch delivers every change in etcd order, so no
// intermediate state escapes it.
type rolloutWatcher struct {
	stop  chan struct{}
	done  sync.WaitGroup
	nodes []string

	mu sync.Mutex
	// maxNodesWithoutReady is the largest number of nodes seen at once
	// without a running, ready, non-terminating pod.
	maxNodesWithoutReady int
	worstWithoutReady    string
	// maxPodsOnANode is the most pods (terminating included) seen on one node.
	maxPodsOnANode int
	worstPods      string
	polls, events  int
	errs           []error

	// dsName, when set, is also read each poll: the lowest
	// status.numberAvailable and any desiredNumberScheduled other than
	// len(nodes) are recorded.
	dsName       string
	minAvailable int32
	badDesired   []int32
}

func (c *cluster) watchRollout(selector string, nodes []string) *rolloutWatcher {
	return c.watchRolloutStatus(selector, nodes, "")
}

// watchRolloutStatus is watchRollout that also follows dsName's status.
func (c *cluster) watchRolloutStatus(selector string, nodes []string, dsName string) *rolloutWatcher {
	w := &rolloutWatcher{stop: make(chan struct{}), nodes: nodes, dsName: dsName, minAvailable: int32(len(nodes))}
	// The watch starts from a list, before the poller, so it sees everything.
	objs, rv, err := c.admin.List(c.ctx, resources.Pods, ns, client.ListOptions{LabelSelector: selector})
	if err != nil {
		c.t.Fatalf("rollout watcher: list: %v", err)
	}
	state := map[types.UID]*corev1.Pod{}
	for _, o := range objs {
		state[o.GetUID()] = o.(*corev1.Pod)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	wi, err := c.admin.Watch(ctx, resources.Pods, ns, client.ListOptions{LabelSelector: selector, ResourceVersion: rv})
	if err != nil {
		cancel()
		c.t.Fatalf("rollout watcher: watch: %v", err)
	}
	w.done.Add(2)
	go func() {
		defer w.done.Done()
		defer cancel()
		defer wi.Stop()
		for {
			select {
			case <-w.stop:
				return
			case ev, ok := <-wi.ResultChan():
				if !ok {
					w.mu.Lock()
					w.errs = append(w.errs, errors.New("pod watch ended early"))
					w.mu.Unlock()
					<-w.stop
					return
				}
				p, isPod := ev.Object.(*corev1.Pod)
				if !isPod {
					w.mu.Lock()
					w.errs = append(w.errs, fmt.Errorf("pod watch: %s event with %T", ev.Type, ev.Object))
					w.mu.Unlock()
					continue
				}
				if ev.Type == watch.Deleted {
					delete(state, p.UID)
				} else {
					state[p.UID] = p
				}
				pods := make([]*corev1.Pod, 0, len(state))
				for _, p := range state {
					pods = append(pods, p)
				}
				w.mu.Lock()
				w.events++
				w.observe(pods)
				w.mu.Unlock()
			}
		}
	}()
	go func() {
		defer w.done.Done()
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			if dsName != "" {
				obj, err := c.admin.Get(c.ctx, resources.DaemonSets, ns, dsName)
				if err == nil {
					st := obj.(*appsv1.DaemonSet).Status
					w.mu.Lock()
					w.minAvailable = min(w.minAvailable, st.NumberAvailable)
					if st.DesiredNumberScheduled != int32(len(nodes)) {
						w.badDesired = append(w.badDesired, st.DesiredNumberScheduled)
					}
					w.mu.Unlock()
				}
			}
			pods, err := c.pods(selector)
			w.mu.Lock()
			if err != nil {
				w.errs = append(w.errs, err)
			} else {
				w.polls++
				w.observe(pods)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// observe records the figures of one view of the pods; w.mu is held.
func (w *rolloutWatcher) observe(pods []*corev1.Pod) {
	grouped := byNode(pods)
	without := 0
	var missing []string
	for _, n := range w.nodes {
		ok := false
		for _, p := range grouped[n] {
			if runningReady(p) {
				ok = true
			}
		}
		if !ok {
			without++
			missing = append(missing, n)
		}
		if len(grouped[n]) > w.maxPodsOnANode {
			w.maxPodsOnANode = len(grouped[n])
			w.worstPods = n + ": " + podNames(grouped[n])
		}
	}
	if without > w.maxNodesWithoutReady {
		w.maxNodesWithoutReady = without
		w.worstWithoutReady = strings.Join(missing, ",")
	}
}

// lowestAvailable is the lowest status.numberAvailable seen (after finish).
func (w *rolloutWatcher) lowestAvailable() int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.minAvailable
}

// finish stops polling and returns the figures.
func (w *rolloutWatcher) finish(t testing.TB) (maxWithout, maxPods, polls int) {
	t.Helper()
	close(w.stop)
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) > 0 {
		t.Errorf("rollout watcher: %d list errors, first: %v", len(w.errs), w.errs[0])
	}
	t.Logf("rollout watcher: %d polls, %d watch events; max nodes without a ready pod %d (%s); max pods on a node %d (%s)",
		w.polls, w.events, w.maxNodesWithoutReady, w.worstWithoutReady, w.maxPodsOnANode, w.worstPods)
	if w.dsName != "" {
		t.Logf("rollout watcher: %s status: lowest numberAvailable %d", w.dsName, w.minAvailable)
		if len(w.badDesired) > 0 {
			t.Errorf("rollout watcher: %s desiredNumberScheduled seen as %v during the rollout", w.dsName, w.badDesired)
		}
	}
	return w.maxNodesWithoutReady, w.maxPodsOnANode, w.polls
}
