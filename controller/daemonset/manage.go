package daemonset

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/flowcontrol"
)

// BurstReplicas caps the creates and the deletes of one sync
// (docs/controller-rules.md §2.6).
const BurstReplicas = 250

// slowStartInitialBatchSize is the first create batch; batches then double.
const slowStartInitialBatchSize = 1

// Failed-pod back-off per (DaemonSet, observed generation, node): 1s doubling to 15 min.
const (
	FailedPodBackoffInitial = time.Second
	FailedPodBackoffMax     = 15 * time.Minute
)

// nodeDecision is what podsShouldBeOnNode wants done on one node.
type nodeDecision struct {
	create    bool          // create one daemon pod on the node
	deletes   []string      // names of pods to delete
	failed    []*corev1.Pod // failed pods among deletes (FailedDaemonPod events)
	succeeded []*corev1.Pod // succeeded pods among deletes (SucceededDaemonPod events)
	// requeueAfter > 0: a failed pod is in back-off; sync again after this long.
	requeueAfter time.Duration
}

func failedPodsBackoffKey(ds *appsv1.DaemonSet, nodeName string) string {
	return fmt.Sprintf("%s/%d/%s", ds.UID, ds.Status.ObservedGeneration, nodeName)
}

// podsShouldBeOnNode decides creates and deletes for one node
// (docs/controller-rules.md §2.5). pods are the DaemonSet's pods targeting the
// node; exists says whether the node had an entry in the node-to-pods map.
// backoff is advanced for every failed pod chosen for deletion.
func podsShouldBeOnNode(node *corev1.Node, pods []*corev1.Pod, exists bool, ds *appsv1.DaemonSet, hash string,
	backoff *flowcontrol.Backoff, now time.Time) nodeDecision {
	return podsShouldBeOnNodeWith(newEligibility(ds), node, pods, exists, hash, backoff, now)
}

// podsShouldBeOnNodeWith is podsShouldBeOnNode with the DaemonSet's
// eligibility built once for all nodes.
func podsShouldBeOnNodeWith(elig *eligibility, node *corev1.Node, pods []*corev1.Pod, exists bool, hash string,
	backoff *flowcontrol.Backoff, now time.Time) nodeDecision {
	ds := elig.ds
	var d nodeDecision
	shouldRun, shouldContinueRunning := elig.nodeShouldRun(node)
	switch {
	case shouldRun && !exists:
		d.create = true
	case shouldContinueRunning:
		var running []*corev1.Pod
		for _, pod := range pods {
			if pod.DeletionTimestamp != nil {
				continue
			}
			switch pod.Status.Phase {
			case corev1.PodFailed:
				key := failedPodsBackoffKey(ds, node.Name)
				if backoff.IsInBackOffSinceUpdate(key, now) {
					d.requeueAfter = backoff.Get(key)
					continue
				}
				backoff.Next(key, now)
				d.deletes = append(d.deletes, pod.Name)
				d.failed = append(d.failed, pod)
			case corev1.PodSucceeded:
				d.deletes = append(d.deletes, pod.Name)
				d.succeeded = append(d.succeeded, pod)
			default:
				running = append(running, pod)
			}
		}
		if !AllowsSurge(ds) {
			if len(running) > 1 {
				sortPodsOldestFirst(running)
				for _, p := range running[1:] {
					d.deletes = append(d.deletes, p.Name)
				}
			}
			break
		}
		if len(running) == 0 && shouldRun {
			d.create = true
			break
		}
		if len(running) < 2 {
			break
		}
		sortPodsOldestFirst(running)
		var oldestNew, oldestOld *corev1.Pod
		for _, p := range running {
			if p.Labels[RevisionHashLabel] == hash {
				if oldestNew == nil {
					oldestNew = p
					continue
				}
			} else if oldestOld == nil {
				oldestOld = p
				continue
			}
			d.deletes = append(d.deletes, p.Name)
		}
		if oldestNew != nil && oldestOld != nil {
			switch {
			case !IsPodReady(oldestOld):
				d.deletes = append(d.deletes, oldestOld.Name)
			case IsPodAvailable(oldestNew, ds.Spec.MinReadySeconds, now):
				d.deletes = append(d.deletes, oldestOld.Name)
			}
		}
	case !shouldContinueRunning && exists:
		for _, pod := range pods {
			if pod.DeletionTimestamp == nil {
				d.deletes = append(d.deletes, pod.Name)
			}
		}
	}
	return d
}

// unscheduledPodsWithoutNode returns pods without spec.nodeName whose target
// node is not in nodes.
func unscheduledPodsWithoutNode(nodes []*corev1.Node, nodeToPods map[string][]*corev1.Pod) []string {
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		known[n.Name] = true
	}
	var out []string
	for _, name := range sortedKeys(nodeToPods) {
		if known[name] {
			continue
		}
		for _, p := range nodeToPods[name] {
			if p.Spec.NodeName == "" {
				out = append(out, p.Name)
			}
		}
	}
	return out
}

// manage creates and deletes pods so each eligible node runs one daemon pod.
// A node the rollout settings hold back gets a pod of the stable old
// revision (docs/rollouts.md); old lists the DaemonSet's old revisions.
func (c *Controller) manage(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, hash string, old []*appsv1.ControllerRevision, pods *syncPods) error {
	nodeToPods, err := pods.get(ctx, c, ds)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemonset %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	gate := c.rolloutGate(ds, nodes, nodeToPods, hash)
	if gate.mayUpdate != nil {
		if gate.stable, err = stableRevision(ds, nodeToPods, hash, old); err != nil {
			c.logger.Warn("old revision unreadable; held-back nodes get the current one", "daemonset", dsKey(ds), "err", err)
		}
	}
	now := c.clock.Now()
	var create, del []string
	elig := newEligibility(ds)
	for _, node := range nodes {
		pods, exists := nodeToPods[node.Name]
		d := podsShouldBeOnNodeWith(elig, node, pods, exists, hash, c.failedPodsBackoff, now)
		if d.create {
			create = append(create, node.Name)
		}
		del = append(del, d.deletes...)
		for _, p := range d.failed {
			c.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonFailedDaemonPod,
				"Found failed daemon pod %s/%s on node %s, will try to kill it", p.Namespace, p.Name, node.Name)
		}
		for _, p := range d.succeeded {
			c.recorder.Eventf(ds, corev1.EventTypeNormal, ReasonSucceededDaemonPod,
				"Found succeeded daemon pod %s/%s on node %s, will try to delete it", p.Namespace, p.Name, node.Name)
		}
		if d.requeueAfter > 0 {
			c.enqueueAfter(ds, d.requeueAfter)
		}
	}
	del = append(del, unscheduledPodsWithoutNode(nodes, nodeToPods)...)
	return c.syncNodes(ctx, ds, del, create, hash, gate, pods)
}

// syncNodes deletes podsToDelete and creates a pod on each of nodesNeedingPods,
// at most burstReplicas of each, creates in slow-start batches, with
// expectations set before any request (docs/controller-rules.md §2.6).
// Nodes gate holds back get a pod of gate's stable revision; a nil gate
// holds back none.
func (c *Controller) syncNodes(ctx context.Context, ds *appsv1.DaemonSet, podsToDelete, nodesNeedingPods []string, hash string, gate *rolloutGate, pods *syncPods) error {
	if len(podsToDelete) > 0 || len(nodesNeedingPods) > 0 {
		pods.changed()
	}
	key := dsKey(ds)
	createDiff := min(len(nodesNeedingPods), c.burstReplicas)
	deleteDiff := min(len(podsToDelete), c.burstReplicas)
	c.expectations.Set(key, createDiff, deleteDiff)

	var mu sync.Mutex
	var errs []error
	report := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	errCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(errs)
	}

	generation, err := templateGeneration(ds)
	if err != nil {
		generation = nil
	}
	template := CreatePodTemplate(ds.Spec.Template, generation, hash)
	templateFor := func(string) *corev1.PodTemplateSpec { return &template }
	if gate != nil && gate.stable != nil {
		stable := CreatePodTemplate(gate.stable.template, nil, gate.stable.hash)
		templateFor = func(node string) *corev1.PodTemplateSpec {
			if gate.updates(node) {
				return &template
			}
			return &stable
		}
	}
	batch := min(createDiff, slowStartInitialBatchSize)
	for pos := 0; pos < createDiff; pos, batch = pos+batch, min(2*batch, createDiff-(pos+batch)) {
		before := errCount()
		var wg sync.WaitGroup
		for i := pos; i < pos+batch; i++ {
			wg.Add(1)
			go func(node string) {
				defer wg.Done()
				err := c.podControl.CreatePod(ctx, NewDaemonPod(templateFor(node), ds, node), ds)
				if err == nil {
					return
				}
				if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
					return
				}
				c.expectations.CreationObserved(key)
				report(fmt.Errorf("create daemon pod on node %s: %w", node, err))
			}(nodesNeedingPods[i])
		}
		wg.Wait()
		if skipped := createDiff - (pos + batch); errCount() > before && skipped > 0 {
			c.expectations.Lower(key, skipped, 0)
			break
		}
	}

	var wg sync.WaitGroup
	for _, name := range podsToDelete[:deleteDiff] {
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			if err := c.podControl.DeletePod(ctx, ds.Namespace, name, ds); err != nil {
				c.expectations.DeletionObserved(key)
				if !apierrors.IsNotFound(err) {
					report(fmt.Errorf("delete daemon pod %s/%s: %w", ds.Namespace, name, err))
				}
			}
		}(name)
	}
	wg.Wait()
	return errors.Join(errs...)
}
