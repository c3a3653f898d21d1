package integration

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestControllerRestartDuringRollout stops the controllers at a random
// moment of a rolling update and starts fresh ones (new caches, no
// expectations), as a server restart or leader change does; per rollout the
// bounds still hold — maxUnavailable=1: never two pods on a node, never two
// nodes without a ready pod; maxSurge=1: never three pods on a node, never a
// node without a ready pod — and every rollout completes.
func TestControllerRestartDuringRollout(t *testing.T) {
	const n, rounds = 4, 4
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	for _, tc := range []struct {
		name               string
		strategy           appsv1.RollingUpdateDaemonSet
		maxWithout, maxPod int
	}{
		{"maxUnavailable=1", appsv1.RollingUpdateDaemonSet{MaxUnavailable: &one, MaxSurge: &zero}, 1, 1},
		{"maxSurge=1", appsv1.RollingUpdateDaemonSet{MaxUnavailable: &zero, MaxSurge: &one}, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, n)
			ds := newDaemonSet("agent")
			ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &tc.strategy}
			c.startDS(ds, n)
			for round := range rounds {
				image := fmt.Sprintf("%s-r%d", imageV2, round)
				stopAfter := time.Duration(rng.IntN(400)) * time.Millisecond
				downFor := time.Duration(rng.IntN(100)) * time.Millisecond
				w := c.watchRollout("app=agent", nodeNames(n))
				c.updateDS("agent", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = image })
				time.Sleep(stopAfter) // a random point of the rollout, not an assertion
				c.stopControllers()
				time.Sleep(downFor)
				c.startControllers()
				cur := c.currentRevision("agent", "app=agent")
				after := c.waitRolledOut("agent", n, cur.Labels[hashLabel])
				maxWithout, maxPods, _ := w.finish(t)
				t.Logf("round %d: controllers stopped after %s for %s", round, stopAfter, downFor)
				if maxWithout > tc.maxWithout || maxPods > tc.maxPod {
					t.Errorf("round %d: %d node(s) without a ready pod and up to %d pods on a node; bounds %d and %d",
						round, maxWithout, maxPods, tc.maxWithout, tc.maxPod)
				}
				for node, p := range after {
					if p.Spec.Containers[0].Image != image {
						t.Errorf("round %d: node %s runs %s", round, node, p.Spec.Containers[0].Image)
					}
				}
			}
		})
	}
}
