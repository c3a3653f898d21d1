package informer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

func TestInformerListsThenWatches(t *testing.T) {
	fc := fake.New(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p1"}})
	inf := New(fc, resources.Pods, cache.Indexers{"node": func(o any) ([]string, error) {
		return []string{o.(*corev1.Pod).Spec.NodeName}, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("no sync")
	}
	if _, ok, _ := inf.GetIndexer().GetByKey("a/p1"); !ok {
		t.Fatal("listed pod missing")
	}
	p2 := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "p2"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "img"}}}}
	if _, err := fc.Create(ctx, p2, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		objs, _ := inf.GetIndexer().ByIndex("node", "n1")
		byNS, _ := inf.GetIndexer().ByIndex(NamespaceIndex, "b")
		if len(objs) != 1 || len(byNS) != 1 {
			return fmt.Errorf("watched pod not indexed: %d by node n1, %d in namespace b", len(objs), len(byNS))
		}
		return nil
	})
	cancel()
	<-done
	if n := fc.Watchers(); n != 0 {
		t.Errorf("%d watches open after stop", n)
	}
}

// readOnlyFake serves fixed objects through the readOnlyClient methods, as
// the API server's local client serves the store's cached objects.
type readOnlyFake struct {
	*fake.Client
	items []client.Object
	w     *watch.FakeWatcher
}

func (f *readOnlyFake) ListReadOnly(context.Context, *resources.Resource, string, client.ListOptions) ([]client.Object, string, error) {
	return f.items, "7", nil
}

func (f *readOnlyFake) WatchReadOnly(context.Context, *resources.Resource, string, client.ListOptions) (watch.Interface, error) {
	return f.w, nil
}

// TestInformerKeepsReadOnlyObjects: with a client that serves shared
// objects, the informer's cache holds those very objects, listed and
// watched, and never calls the copying List and Watch.
func TestInformerKeepsReadOnlyObjects(t *testing.T) {
	listed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p1", ResourceVersion: "5"}}
	f := &readOnlyFake{Client: fake.New(), items: []client.Object{listed}, w: watch.NewFake()}
	inf := New(f, resources.Pods, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("no sync")
	}
	if o, ok, _ := inf.GetIndexer().GetByKey("a/p1"); !ok || o != listed {
		t.Errorf("listed pod in cache = %p (found %v), want the served object %p", o, ok, listed)
	}
	watched := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p2", ResourceVersion: "8"}}
	f.w.Add(watched)
	testkit.Eventually(t, 5*time.Second, func() error {
		if _, ok, _ := inf.GetIndexer().GetByKey("a/p2"); !ok {
			return errors.New("watched pod never cached")
		}
		return nil
	})
	if o, _, _ := inf.GetIndexer().GetByKey("a/p2"); o != watched {
		t.Errorf("watched pod in cache = %p, want the served object %p", o, watched)
	}
	if n := f.Watchers(); n != 0 {
		t.Errorf("the copying Watch was used: %d watches", n)
	}
}

// TestSharedInformers: two controllers' sets asking for pods get one
// informer with both indexers, run by the Shared's owner; a set without a
// Shared makes and runs its own.
func TestSharedInformers(t *testing.T) {
	fc := fake.New(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p1"}, Spec: corev1.PodSpec{NodeName: "n1"}})
	shared := NewShared(fc)
	one, two := NewSet(shared, fc), NewSet(shared, fc)
	byName := cache.Indexers{"name": func(o any) ([]string, error) { return []string{o.(*corev1.Pod).Name}, nil }}
	p1, err := one.Add(resources.Pods, cache.Indexers{NodeNameIndex: IndexByNodeName})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := two.Add(resources.Pods, byName)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := two.Add(resources.Nodes, cache.Indexers{NodeNameIndex: IndexByNodeName})
	if err != nil {
		t.Fatal(err)
	}
	if p1 != p2 || p1 == n2 {
		t.Fatalf("pods informers shared: %v; pods and nodes share one: %v", p1 == p2, p1 == n2)
	}
	own := NewSet(nil, fc)
	p3, err := own.Add(resources.Pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p3 == p1 {
		t.Fatal("a set without Shared got the shared informer")
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { shared.Run(ctx) })
	for _, s := range []*Set{one, two, own} {
		if err := s.Start(ctx, &wg, "test"); err != nil {
			t.Fatal(err)
		}
	}
	for name, idx := range map[string]string{NodeNameIndex: "n1", "name": "p1"} {
		if objs, err := p1.GetIndexer().ByIndex(name, idx); err != nil || len(objs) != 1 {
			t.Errorf("shared pods informer, index %s=%s: %v %d", name, idx, err, len(objs))
		}
	}
	if _, ok, _ := p3.GetIndexer().GetByKey("a/p1"); !ok {
		t.Error("the set's own informer did not run")
	}
	if _, err := NewSet(shared, fc).Add(resources.DaemonSets, nil); err == nil {
		t.Error("an informer was handed out after the shared ones started")
	}
}
