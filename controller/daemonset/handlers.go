package daemonset

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	everynodeimages "github.com/everynode/everynode/images"
)

// The event handlers below only enqueue DaemonSet keys and account
// expectations (docs/controller-rules.md §2.1); all work happens in sync.

func tombstone[T any](obj any) (T, bool) {
	if t, ok := obj.(T); ok {
		return t, true
	}
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		t, ok := d.Obj.(T)
		return t, ok
	}
	var zero T
	return zero, false
}

func (c *Controller) addDaemonSet(obj any) {
	if ds, ok := obj.(*appsv1.DaemonSet); ok {
		c.enqueue(ds)
	}
}

func (c *Controller) updateDaemonSet(oldObj, curObj any) {
	old, ok1 := oldObj.(*appsv1.DaemonSet)
	cur, ok2 := curObj.(*appsv1.DaemonSet)
	if !ok1 || !ok2 {
		return
	}
	if old.UID != cur.UID {
		c.deleteDaemonSet(cache.DeletedFinalStateUnknown{Key: dsKey(old), Obj: old})
	}
	c.enqueue(cur)
}

func (c *Controller) deleteDaemonSet(obj any) {
	ds, ok := tombstone[*appsv1.DaemonSet](obj)
	if !ok {
		return
	}
	c.forget(dsKey(ds))
	c.enqueue(ds)
}

// forget drops what the controller keeps per DaemonSet key, its
// expectations and its status-only pacing, so that a DaemonSet created
// again under the key starts clean.
func (c *Controller) forget(key string) {
	c.expectations.Delete(key)
	c.statusPacer.forget(key)
}

// resolveControllerRef returns the cached DaemonSet ref points to, or nil
// when it is not a DaemonSet, not cached, or a different incarnation (UID).
func (c *Controller) resolveControllerRef(namespace string, ref *metav1.OwnerReference) *appsv1.DaemonSet {
	if ref.Kind != controllerKind.Kind {
		return nil
	}
	ds, err := c.dsLister.DaemonSets(namespace).Get(ref.Name)
	if err != nil {
		return nil
	}
	if ds.UID != ref.UID {
		return nil
	}
	return ds
}

// daemonSetsSelecting returns the cached DaemonSets of namespace whose
// non-empty selector matches lbls.
func (c *Controller) daemonSetsSelecting(namespace string, lbls map[string]string) []*appsv1.DaemonSet {
	var out []*appsv1.DaemonSet
	for _, ds := range c.listDaemonSets(namespace) {
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(lbls)) {
			continue
		}
		out = append(out, ds)
	}
	return out
}

func (c *Controller) addPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.DeletionTimestamp != nil {
		c.deletePod(pod)
		return
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		ds := c.resolveControllerRef(pod.Namespace, ref)
		if ds == nil {
			return
		}
		c.expectations.CreationObserved(dsKey(ds))
		c.enqueue(ds)
		return
	}
	for _, ds := range c.daemonSetsSelecting(pod.Namespace, pod.Labels) {
		c.enqueue(ds)
	}
}

func (c *Controller) updatePod(oldObj, curObj any) {
	old, ok1 := oldObj.(*corev1.Pod)
	cur, ok2 := curObj.(*corev1.Pod)
	if !ok1 || !ok2 || cur.ResourceVersion == old.ResourceVersion {
		return
	}
	if cur.DeletionTimestamp != nil {
		// Graceful deletion started: expect the replacement now.
		c.deletePod(cur)
		return
	}
	curRef, oldRef := metav1.GetControllerOfNoCopy(cur), metav1.GetControllerOfNoCopy(old)
	refChanged := !equality.Semantic.DeepEqual(curRef, oldRef)
	if refChanged && oldRef != nil {
		if ds := c.resolveControllerRef(old.Namespace, oldRef); ds != nil {
			c.enqueue(ds)
		}
	}
	if curRef != nil {
		ds := c.resolveControllerRef(cur.Namespace, curRef)
		if ds == nil {
			return
		}
		c.enqueue(ds)
		if !IsPodReady(old) && IsPodReady(cur) && ds.Spec.MinReadySeconds > 0 {
			c.enqueueAfter(ds, time.Duration(ds.Spec.MinReadySeconds)*time.Second+time.Second)
		}
		return
	}
	if refChanged || !equality.Semantic.DeepEqual(cur.Labels, old.Labels) {
		for _, ds := range c.daemonSetsSelecting(cur.Namespace, cur.Labels) {
			c.enqueue(ds)
		}
	}
}

func (c *Controller) deletePod(obj any) {
	pod, ok := tombstone[*corev1.Pod](obj)
	if !ok {
		return
	}
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil {
		return
	}
	ds := c.resolveControllerRef(pod.Namespace, ref)
	if ds == nil {
		return
	}
	c.expectations.DeletionObserved(dsKey(ds))
	c.enqueue(ds)
}

func (c *Controller) addNode(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	for _, ds := range c.listDaemonSets("") {
		if run, _ := NodeShouldRunDaemonPod(node, ds); run {
			c.enqueue(ds)
		}
	}
}

// shouldIgnoreNodeUpdate: only label and taint changes matter
// (docs/controller-rules.md §1.5).
func shouldIgnoreNodeUpdate(old, cur *corev1.Node) bool {
	return equality.Semantic.DeepEqual(old.Labels, cur.Labels) && equality.Semantic.DeepEqual(old.Spec.Taints, cur.Spec.Taints)
}

// updateNode re-syncs the DaemonSets whose eligibility on the node changed
// and, when the node went down or came back (NotReady/Unknown ↔ Ready),
// every DaemonSet that runs or wants a pod there: a rollout sets aside
// unreachable nodes and updates a returning one at once
// (docs/rollouts.md §7).
func (c *Controller) updateNode(oldObj, curObj any) {
	old, ok1 := oldObj.(*corev1.Node)
	cur, ok2 := curObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	reach := isDown(old) != isDown(cur)
	images := !equality.Semantic.DeepEqual(old.Status.Images, cur.Status.Images)
	if !reach && !images && shouldIgnoreNodeUpdate(old, cur) {
		return
	}
	for _, ds := range c.listDaemonSets("") {
		if images && ds.Annotations[everynodeimages.PrePullAnnotation] == "true" {
			c.enqueue(ds) // a pre-pull may be complete (prepull.go)
			continue
		}
		oldRun, oldCont := NodeShouldRunDaemonPod(old, ds)
		curRun, curCont := NodeShouldRunDaemonPod(cur, ds)
		if oldRun != curRun || oldCont != curCont || reach && (curRun || curCont) {
			c.enqueue(ds)
		}
	}
}

// deleteNode re-syncs every DaemonSet that had pods or wanted one there, so
// status counters follow node removal (Kubernetes has no node delete handler;
// see the package doc).
func (c *Controller) deleteNode(obj any) {
	node, ok := tombstone[*corev1.Node](obj)
	if !ok {
		return
	}
	for _, ds := range c.listDaemonSets("") {
		run, cont := NodeShouldRunDaemonPod(node, ds)
		if run || cont {
			c.enqueue(ds)
		}
	}
}

func (c *Controller) addHistory(obj any) {
	cr, ok := obj.(*appsv1.ControllerRevision)
	if !ok {
		return
	}
	if cr.DeletionTimestamp != nil {
		c.deleteHistory(cr)
		return
	}
	if ref := metav1.GetControllerOfNoCopy(cr); ref != nil {
		// Owned revisions do not trigger a sync
		// (docs/controller-rules.md §10.7).
		return
	}
	for _, ds := range c.daemonSetsSelecting(cr.Namespace, cr.Labels) {
		c.enqueue(ds)
	}
}

func (c *Controller) updateHistory(oldObj, curObj any) {
	old, ok1 := oldObj.(*appsv1.ControllerRevision)
	cur, ok2 := curObj.(*appsv1.ControllerRevision)
	if !ok1 || !ok2 || cur.ResourceVersion == old.ResourceVersion {
		return
	}
	curRef, oldRef := metav1.GetControllerOfNoCopy(cur), metav1.GetControllerOfNoCopy(old)
	refChanged := !equality.Semantic.DeepEqual(curRef, oldRef)
	if refChanged && oldRef != nil {
		if ds := c.resolveControllerRef(old.Namespace, oldRef); ds != nil {
			c.enqueue(ds)
		}
	}
	if curRef != nil {
		if ds := c.resolveControllerRef(cur.Namespace, curRef); ds != nil {
			c.enqueue(ds)
		}
		return
	}
	if refChanged || !equality.Semantic.DeepEqual(cur.Labels, old.Labels) {
		for _, ds := range c.daemonSetsSelecting(cur.Namespace, cur.Labels) {
			c.enqueue(ds)
		}
	}
}

func (c *Controller) deleteHistory(obj any) {
	cr, ok := tombstone[*appsv1.ControllerRevision](obj)
	if !ok {
		return
	}
	ref := metav1.GetControllerOfNoCopy(cr)
	if ref == nil {
		return
	}
	if ds := c.resolveControllerRef(cr.Namespace, ref); ds != nil {
		c.enqueue(ds)
	}
}
