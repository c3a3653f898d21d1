package informer

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
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
	p2 := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "p2"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	if _, err := fc.Create(ctx, p2, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		objs, _ := inf.GetIndexer().ByIndex("node", "n1")
		byNS, _ := inf.GetIndexer().ByIndex(NamespaceIndex, "b")
		if len(objs) == 1 && len(byNS) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("watched pod not indexed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if n := fc.Watchers(); n != 0 {
		t.Errorf("%d watches open after stop", n)
	}
}
