package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

const (
	ns         = "default"
	adminToken = "admin-token"
	imageV1    = "example/daemon:v1"
	imageV2    = "example/daemon:v2"
	// brokenImage can never be pulled by the simulated nodes.
	brokenImage = "example/broken:v1"
	hashLabel   = appsv1.ControllerRevisionHashLabelKey
	// waitLong bounds any single convergence in these tests.
	waitLong = 30 * time.Second
	// orphanQuarantine is pod GC's quarantine in these tests (40 s by
	// default): the pods of a deleted Node go after it.
	orphanQuarantine = 2 * time.Second
)

// eventually is testkit.Eventually: fn until it returns nil, failing the
// test with fn's last error after timeout.
func eventually(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	testkit.Eventually(t, timeout, fn)
}

// consistently is testkit.Consistently: fn over the whole window d, failing
// the test at the first error. For "nothing happens" assertions, after a
// positive convergence.
func consistently(t testing.TB, d time.Duration, fn func() error) {
	t.Helper()
	testkit.Consistently(t, d, fn)
}

// newDaemonSet is a DaemonSet selecting app=<name>, running imageV1, with a
// RollingUpdate strategy of maxUnavailable 1 (the API's default).
func newDaemonSet(name string) *appsv1.DaemonSet {
	grace := int64(5)
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers:                    []corev1.Container{{Name: "daemon", Image: imageV1}},
				},
			},
		},
	}
	resources.DaemonSets.SetTypeMeta(ds)
	return ds
}

func maxUnavailable(n int) *appsv1.RollingUpdateDaemonSet {
	v := intstr.FromInt32(int32(n))
	return &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &v}
}

func (c *cluster) createDS(ds *appsv1.DaemonSet) *appsv1.DaemonSet {
	c.t.Helper()
	out, err := c.admin.Create(c.ctx, ds, client.WriteOptions{})
	if err != nil {
		c.t.Fatalf("create daemonset %s: %v", ds.Name, err)
	}
	return out.(*appsv1.DaemonSet)
}

func (c *cluster) getDS(name string) *appsv1.DaemonSet {
	c.t.Helper()
	out, err := c.admin.Get(c.ctx, resources.DaemonSets, ns, name)
	if err != nil {
		c.t.Fatalf("get daemonset %s: %v", name, err)
	}
	return out.(*appsv1.DaemonSet)
}

// updateDS applies mutate to the latest DaemonSet, retrying on conflicts.
func (c *cluster) updateDS(name string, mutate func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	c.t.Helper()
	for {
		ds := c.getDS(name)
		mutate(ds)
		out, err := c.admin.Update(c.ctx, ds, client.WriteOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			c.t.Fatalf("update daemonset %s: %v", name, err)
		}
		return out.(*appsv1.DaemonSet)
	}
}

// patchNode applies a strategic-merge patch to a Node (kubectl label/taint).
func (c *cluster) patchNode(name string, patch any) {
	c.t.Helper()
	data, err := json.Marshal(patch)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.admin.Patch(c.ctx, resources.Nodes, "", name, types.StrategicMergePatchType, data, client.WriteOptions{}, ""); err != nil {
		c.t.Fatalf("patch node %s: %v", name, err)
	}
}

// setTaints replaces a Node's taints (retrying on conflicts with its agent).
func (c *cluster) setTaints(name string, taints ...corev1.Taint) {
	c.t.Helper()
	for {
		obj, err := c.admin.Get(c.ctx, resources.Nodes, "", name)
		if err != nil {
			c.t.Fatalf("get node %s: %v", name, err)
		}
		node := obj.(*corev1.Node)
		var keep []corev1.Taint
		for _, tt := range node.Spec.Taints {
			if strings.HasPrefix(tt.Key, "node.kubernetes.io/") {
				keep = append(keep, tt)
			}
		}
		node.Spec.Taints = append(keep, taints...)
		_, err = c.admin.Update(c.ctx, node, client.WriteOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			c.t.Fatalf("update node %s taints: %v", name, err)
		}
		return
	}
}

// pods lists the pods with the label selector.
func (c *cluster) pods(selector string) ([]*corev1.Pod, error) {
	objs, _, err := c.admin.List(c.ctx, resources.Pods, ns, client.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	return out, nil
}

// byNode groups pods by spec.nodeName ("" for unbound ones).
func byNode(pods []*corev1.Pod) map[string][]*corev1.Pod {
	m := map[string][]*corev1.Pod{}
	for _, p := range pods {
		m[p.Spec.NodeName] = append(m[p.Spec.NodeName], p)
	}
	return m
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// runningReady is a pod that runs, is Ready and is not being deleted.
func runningReady(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p)
}

// onePodPerNode checks that exactly the given nodes have exactly one pod of
// the selector each, bound, running, ready, not terminating and (if hash is
// not empty) on that revision; it returns the pods by node.
func (c *cluster) onePodPerNode(selector string, nodes []string, hash string) (map[string]*corev1.Pod, error) {
	pods, err := c.pods(selector)
	if err != nil {
		return nil, err
	}
	grouped := byNode(pods)
	want := map[string]bool{}
	for _, n := range nodes {
		want[n] = true
	}
	out := map[string]*corev1.Pod{}
	for node, ps := range grouped {
		if !want[node] {
			return nil, fmt.Errorf("%d pod(s) on node %q, which should have none (%s)", len(ps), node, podNames(ps))
		}
	}
	for _, n := range nodes {
		ps := grouped[n]
		if len(ps) != 1 {
			return nil, fmt.Errorf("node %s has %d pods (%s), want 1", n, len(ps), podNames(ps))
		}
		p := ps[0]
		if !runningReady(p) {
			return nil, fmt.Errorf("pod %s on %s: phase %s, ready %v, deleting %v", p.Name, n, p.Status.Phase, podReady(p), p.DeletionTimestamp != nil)
		}
		if hash != "" && p.Labels[hashLabel] != hash {
			return nil, fmt.Errorf("pod %s on %s has revision %q, want %q", p.Name, n, p.Labels[hashLabel], hash)
		}
		out[n] = p
	}
	return out, nil
}

func podNames(ps []*corev1.Pod) string {
	var names []string
	for _, p := range ps {
		s := p.Name
		if p.DeletionTimestamp != nil {
			s += "(deleting)"
		}
		names = append(names, s)
	}
	return strings.Join(names, ",")
}

// uids maps node → pod uid.
func uids(m map[string]*corev1.Pod) map[string]types.UID {
	out := make(map[string]types.UID, len(m))
	for n, p := range m {
		out[n] = p.UID
	}
	return out
}

// counts are the status counters a test expects.
type counts struct {
	desired, current, ready, updated, available, misscheduled int32
}

// waitStatus waits until the DaemonSet's status has the counters and has
// observed its current generation; it returns the DaemonSet.
func (c *cluster) waitStatus(name string, want counts) *appsv1.DaemonSet {
	c.t.Helper()
	var ds *appsv1.DaemonSet
	eventually(c.t, waitLong, func() error {
		ds = c.getDS(name)
		s := ds.Status
		got := counts{s.DesiredNumberScheduled, s.CurrentNumberScheduled, s.NumberReady, s.UpdatedNumberScheduled, s.NumberAvailable, s.NumberMisscheduled}
		if got != want {
			return fmt.Errorf("status %s: got %+v, want %+v", name, got, want)
		}
		if s.NumberUnavailable != want.desired-want.available {
			return fmt.Errorf("status %s: numberUnavailable %d, want %d", name, s.NumberUnavailable, want.desired-want.available)
		}
		if s.ObservedGeneration != ds.Generation {
			return fmt.Errorf("status %s: observedGeneration %d, generation %d", name, s.ObservedGeneration, ds.Generation)
		}
		return nil
	})
	return ds
}

// revisions lists the ControllerRevisions of the selector, by revision.
func (c *cluster) revisions(selector string) []*appsv1.ControllerRevision {
	c.t.Helper()
	objs, _, err := c.admin.List(c.ctx, resources.ControllerRevisions, ns, client.ListOptions{LabelSelector: selector})
	if err != nil {
		c.t.Fatalf("list controllerrevisions: %v", err)
	}
	out := make([]*appsv1.ControllerRevision, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*appsv1.ControllerRevision))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out
}

// currentRevision waits until the controller has observed the DaemonSet's
// generation and returns its highest-numbered ControllerRevision, which is
// then the current one.
func (c *cluster) currentRevision(name, selector string) *appsv1.ControllerRevision {
	c.t.Helper()
	var cur *appsv1.ControllerRevision
	eventually(c.t, waitLong, func() error {
		ds := c.getDS(name)
		if ds.Status.ObservedGeneration != ds.Generation {
			return fmt.Errorf("generation %d not observed yet (%d)", ds.Generation, ds.Status.ObservedGeneration)
		}
		revs := c.revisions(selector)
		if len(revs) == 0 {
			return errors.New("no controllerrevisions")
		}
		cur = revs[len(revs)-1]
		return nil
	})
	return cur
}

// nodeNames returns node-0 … node-(n-1).
func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i)
	}
	return out
}

// deletePod deletes a pod as kubectl delete pod does (default grace).
func (c *cluster) deletePod(name string) {
	c.t.Helper()
	if _, err := c.admin.Delete(c.ctx, resources.Pods, ns, name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatalf("delete pod %s: %v", name, err)
	}
}

// podGone reports nil once no pod name with uid (any uid if empty) exists.
func (c *cluster) podGone(name string, uid types.UID) error {
	obj, err := c.admin.Get(c.ctx, resources.Pods, ns, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if uid != "" && obj.GetUID() != uid {
		return nil
	}
	return fmt.Errorf("pod %s (%s) still exists", name, uid)
}
