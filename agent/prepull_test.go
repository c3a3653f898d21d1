package agent_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/images"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/rollout"
)

// TestPrePullHoldsRolloutUntilEveryNodeHasTheImages: a DaemonSet with
// image.everynode.io/prepull "true" on three nodes (fake runtime) moves to
// app:v2, which node pp-2 cannot pull. The nodes that can pull it report
// app:v2 in status.images before any pod of theirs runs it, no pod is
// replaced anywhere, and the Progressing condition (what `rollout status`
// prints) says 2 of 3 nodes have the images. Once the annotation is
// removed the rollout proceeds on the nodes that can.
func TestPrePullHoldsRolloutUntilEveryNodeHasTheImages(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	defer testkit.LeakCheck(t)()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startServer(t)
	defer s.Close()
	for i := range 3 {
		cfg := agentConfig(t, s, fmt.Sprintf("pp-%d", i))
		cfg.Node.FakeImages = []string{"app:v1"}
		if i == 2 {
			cfg.Node.FakeUnpullable = "app:v2"
		}
		a, err := agent.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
	}
	api := s.Admin()
	labels := map[string]string{"app": "pp"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "pp", Namespace: "default", Annotations: map[string]string{images.PrePullAnnotation: "true"}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app:v1"}}},
			},
		},
	}
	resources.DaemonSets.SetTypeMeta(ds)
	if _, err := api.Create(ctx, ds, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	podImages := func() (map[string]string, error) {
		objs, _, err := api.List(ctx, resources.Pods, "default", client.ListOptions{})
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, o := range objs {
			p := o.(*corev1.Pod)
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				out[p.Spec.NodeName] = p.Spec.Containers[0].Image
			}
		}
		return out, nil
	}
	testkit.Eventually(t, time.Minute, func() error {
		got, err := podImages()
		if err != nil {
			return err
		}
		if len(got) != 3 {
			return fmt.Errorf("running pods by node: %v", got)
		}
		return nil
	})
	firstPods, _, err := api.List(ctx, resources.Pods, "default", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"app:v2"}]}}}}`)
	if _, err := api.Patch(ctx, resources.DaemonSets, "default", "pp", types.StrategicMergePatchType, patch, client.WriteOptions{}, ""); err != nil {
		t.Fatal(err)
	}
	v2, _ := images.Normalize("app:v2")
	testkit.Eventually(t, time.Minute, func() error {
		for _, n := range []string{"pp-0", "pp-1"} {
			obj, err := api.Get(ctx, resources.Nodes, "", n)
			if err != nil {
				return err
			}
			found := false
			for _, ci := range obj.(*corev1.Node).Status.Images {
				found = found || slices.Contains(ci.Names, v2)
			}
			if !found {
				return fmt.Errorf("node %s does not report %s yet", n, v2)
			}
		}
		obj, err := api.Get(ctx, resources.DaemonSets, "default", "pp")
		if err != nil {
			return err
		}
		c := rollout.Condition(obj.(*appsv1.DaemonSet).Status, rollout.ConditionProgressing)
		if c == nil || c.Reason != rollout.ReasonPrePulling || c.Message != "pre-pulling the new revision's images: 2 of 3 nodes have them" {
			return fmt.Errorf("Progressing condition %+v", c)
		}
		return nil
	})
	// Held: every first pod still there, none replaced, none on app:v2.
	testkit.Consistently(t, 3*time.Second, func() error {
		objs, _, err := api.List(ctx, resources.Pods, "default", client.ListOptions{})
		if err != nil {
			return err
		}
		if len(objs) != len(firstPods) {
			return fmt.Errorf("%d pods, had %d", len(objs), len(firstPods))
		}
		for i, o := range objs {
			p := o.(*corev1.Pod)
			if p.UID != firstPods[i].GetUID() || p.DeletionTimestamp != nil || p.Spec.Containers[0].Image != "app:v1" {
				return fmt.Errorf("pod %s on %s replaced or deleted during the pre-pull (uid %s was %s, deleting %v, image %s)", p.Name, p.Spec.NodeName, p.UID, firstPods[i].GetUID(), p.DeletionTimestamp, p.Spec.Containers[0].Image)
			}
		}
		return nil
	})

	// Without the annotation the rollout goes on.
	if _, err := api.Patch(ctx, resources.DaemonSets, "default", "pp", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+images.PrePullAnnotation+`":null}}}`), client.WriteOptions{}, ""); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 2*time.Minute, func() error {
		got, err := podImages()
		if err != nil {
			return err
		}
		if got["pp-0"] != "app:v2" && got["pp-1"] != "app:v2" {
			return fmt.Errorf("running pods by node: %v", got)
		}
		return nil
	})
}
