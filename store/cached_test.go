package store

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/resources"
)

// TestCachedReadsSeeOwnWrites checks that GetCached and ListCached reflect
// every write this Store completed before the call, right after it.
func TestCachedReadsSeeOwnWrites(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	for i := range 20 {
		name := fmt.Sprintf("ns-%d", i)
		mustCreate(t, s, resources.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
		got, err := s.GetCached(ctx, resources.Namespaces, "", name)
		if err != nil {
			t.Fatalf("GetCached right after create: %v", err)
		}
		if got.GetName() != name {
			t.Fatalf("GetCached returned %q, want %q", got.GetName(), name)
		}
		upd, err := s.GuaranteedUpdate(ctx, resources.Namespaces, "", name, func(cur resources.Object) (resources.Object, error) {
			ns := cur.(*corev1.Namespace)
			ns.Status.Phase = corev1.NamespaceTerminating
			return ns, nil
		})
		if err != nil {
			t.Fatalf("update: %v", err)
		}
		got, err = s.GetCached(ctx, resources.Namespaces, "", name)
		if err != nil {
			t.Fatalf("GetCached right after update: %v", err)
		}
		if ns := got.(*corev1.Namespace); ns.Status.Phase != corev1.NamespaceTerminating || ns.ResourceVersion != upd.GetResourceVersion() {
			t.Fatalf("GetCached after update: phase %q rv %s, want Terminating rv %s", ns.Status.Phase, ns.ResourceVersion, upd.GetResourceVersion())
		}
		if _, err := s.Delete(ctx, resources.Namespaces, "", name, nil); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := s.GetCached(ctx, resources.Namespaces, "", name); !IsNotFound(err) {
			t.Fatalf("GetCached right after delete: err %v, want NotFound", err)
		}

		pc := fmt.Sprintf("pc-%d", i)
		mustCreate(t, s, resources.PriorityClasses, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: pc}, Value: int32(i)})
		items, _, err := s.ListCached(ctx, resources.PriorityClasses, "", Selector{})
		if err != nil {
			t.Fatalf("ListCached: %v", err)
		}
		found := false
		for _, it := range items {
			found = found || it.GetName() == pc
		}
		if !found || len(items) != i+1 {
			t.Fatalf("ListCached right after creating %s: %d items, found %v; want %d, true", pc, len(items), found, i+1)
		}
	}
}

// TestGetCachedWhileUpdated: GetCached always returns the object while
// writes replace its cache entry (the cache clears a replaced entry's
// object: reading it outside the cache's lock returned nil, and raced).
func TestGetCachedWhileUpdated(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	mustCreate(t, s, resources.Pods, newPod("default", "p", "", map[string]string{"n": "0"}))
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				obj, err := s.GetCached(ctx, resources.Pods, "default", "p")
				if err != nil || obj == nil {
					errs <- fmt.Errorf("GetCached: %v, %v", obj, err)
					return
				}
			}
		})
	}
	for i := range 200 {
		if _, err := s.GuaranteedUpdate(ctx, resources.Pods, "default", "p", func(cur resources.Object) (resources.Object, error) {
			cur.GetLabels()["n"] = strconv.Itoa(i + 1)
			return cur, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
