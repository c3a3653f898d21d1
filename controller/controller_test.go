package controller

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/controller/clusterroleaggregation"
	"github.com/everynode/everynode/controller/daemonset"
	"github.com/everynode/everynode/controller/garbagecollector"
	"github.com/everynode/everynode/controller/internal/informer"
	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/controller/serviceaccount"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// TestRunAll: a DaemonSet gets one pod per node, deleting it (background)
// removes the pods, the namespace gets its default ServiceAccount, and
// RunAll returns once ctx ends.
func TestRunAll(t *testing.T) {
	labels := map[string]string{"app": "agent"}
	fc := fake.New(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- RunAll(ctx, Config{Client: fc, Membership: nodelifecycle.NewStaticMembership(
			nodelifecycle.Member{Name: "n1", Alive: true}, nodelifecycle.Member{Name: "n2", Alive: true})})
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
	// pods counts the live pods and, standing in for the node agents,
	// finishes the graceful deletion of bound pods.
	pods := func() int {
		items, _, _ := fc.List(context.Background(), resources.Pods, "default", client.ListOptions{})
		n := 0
		for _, it := range items {
			if it.GetDeletionTimestamp() == nil {
				n++
				continue
			}
			_, _ = fc.Delete(context.Background(), resources.Pods, "default", it.GetName(), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		return n
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testkit.EventuallyTrue(t, 10*time.Second, what, cond)
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
	waitFor("default ServiceAccount", func() bool {
		_, err := fc.Get(context.Background(), resources.ServiceAccounts, "default", "default")
		return err == nil
	})
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

// errOf is the error of a constructor's results.
func errOf[T any](_ T, err error) error { return err }

// TestNewFailureLeavesNoGoroutine: each controller's New fails when the
// shared informers already run (it can no longer add its own), and then
// stops the work queue it had started, since no Run will.
func TestNewFailureLeavesNoGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func(client.Interface, *informer.Shared) error
	}{
		{"daemonset", func(c client.Interface, s *informer.Shared) error {
			return errOf(daemonset.New(daemonset.Config{Client: c, Informers: s}))
		}},
		{"garbagecollector", func(c client.Interface, s *informer.Shared) error {
			return errOf(garbagecollector.New(garbagecollector.Config{Client: c, Informers: s}))
		}},
		{"nodelifecycle", func(c client.Interface, s *informer.Shared) error {
			return errOf(nodelifecycle.New(nodelifecycle.Config{Client: c, Membership: nodelifecycle.NewStaticMembership(), Informers: s}))
		}},
		{"serviceaccount", func(c client.Interface, s *informer.Shared) error {
			return errOf(serviceaccount.New(serviceaccount.Config{Client: c, Informers: s}))
		}},
		{"clusterroleaggregation", func(c client.Interface, s *informer.Shared) error {
			return errOf(clusterroleaggregation.New(clusterroleaggregation.Config{Client: c, Informers: s}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks := testkit.LeakCheck(t)
			fc := fake.New()
			shared := informer.NewShared(fc)
			shared.Run(context.Background()) // no informers: marks the set running and returns
			if err := tc.new(fc, shared); err == nil {
				t.Fatal("New succeeded over shared informers that already run")
			}
			checkLeaks()
		})
	}
}
