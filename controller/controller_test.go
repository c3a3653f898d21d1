package controller

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/resources"
)

type staticMembership []nodelifecycle.Member

func (m staticMembership) Members() []nodelifecycle.Member { return m }
func (m staticMembership) Changed() <-chan struct{}        { return nil }

// TestRunAll: a DaemonSet gets one pod per node, deleting it (background)
// removes the pods, and RunAll returns once ctx ends.
func TestRunAll(t *testing.T) {
	labels := map[string]string{"app": "agent"}
	fc := fake.New(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- RunAll(ctx, Config{Client: fc, Membership: staticMembership{{Name: "n1", Alive: true}, {Name: "n2", Alive: true}}})
	}()
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}}},
		},
	}
	if _, err := fc.Create(ctx, ds, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := func() int {
		items, _, _ := fc.List(context.Background(), resources.Pods, "default", client.ListOptions{})
		return len(items)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("2 pods", func() bool { return pods() == 2 })
	waitFor("nodes ready", func() bool {
		o, _ := fc.Get(context.Background(), resources.Nodes, "", "n2")
		for _, c := range o.(*corev1.Node).Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
	if _, err := fc.Delete(ctx, resources.DaemonSets, "default", "agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("pods collected", func() bool { return pods() == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunAll: %v", err)
	}
}

func TestRunAllValidates(t *testing.T) {
	if err := RunAll(context.Background(), Config{}); err == nil {
		t.Error("RunAll without client succeeded")
	}
}
