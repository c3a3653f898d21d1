package daemonset

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// TestExpectationsOnRecreate is Kubernetes' test of the same name: real
// informers over the fake API feed the queue; a deleted DaemonSet forgets its
// expectations and a re-created one (new UID) starts clean.
func TestExpectationsOnRecreate(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := fake.New()
	c, err := New(Config{Client: fc})
	if err != nil {
		t.Fatal(err)
	}
	defer c.queue.ShutDown() // Run, which would shut it down, is not called
	// A pod control whose own expectations and store the controller does not see.
	pc := &fakePodControl{podStore: cache.NewStore(cache.MetaNamespaceKeyFunc), expectations: newExpectations(c.clock), created: map[string]*corev1.Pod{}}
	c.podControl, c.recorder = pc, &fakeRecorder{}
	tc := &testController{Controller: c, client: fc, podControl: pc, recorder: c.recorder.(*fakeRecorder)}

	if _, err := fc.Create(ctx, newNode("master-0", nil), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, inf := range c.informers.Informers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inf.RunWithContext(ctx)
		}()
	}
	synced := make([]cache.InformerSynced, len(c.informers.Informers()))
	for i, inf := range c.informers.Informers() {
		synced[i] = inf.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("caches did not sync")
	}
	queuedKeys(tc) // the node add enqueues nothing: there is no DaemonSet yet

	waitForQueueLength := func(want int, msg string) {
		t.Helper()
		testkit.Eventually(t, 10*time.Second, func() error {
			n := c.queue.Len()
			if n > want {
				t.Fatalf("%s: queue length %d, want %d", msg, n, want)
			}
			if n != want {
				return fmt.Errorf("%s: queue length %d, want %d", msg, n, want)
			}
			return nil
		})
	}

	oldDS := newDaemonSet("test")
	oldDS.UID = ""
	o, err := fc.Create(ctx, oldDS, client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := dsKey(oldDS)
	waitForQueueLength(1, "created DS")
	if !c.processNextWorkItem(ctx) {
		t.Fatal("queue shut down")
	}
	if err := validateSyncDaemonSets(tc, 1, 0, 0); err != nil {
		t.Error(err)
	}
	pc.Clear()
	if add, _, ok := c.expectations.get(key); !ok || add <= 0 {
		t.Fatalf("expectations after create: add=%d exists=%t, want unfulfilled", add, ok)
	}

	// The status write comes back as an update and is processed once.
	waitForQueueLength(1, "updated DS")
	c.processNextWorkItem(ctx)
	if err := validateSyncDaemonSets(tc, 0, 0, 0); err != nil {
		t.Error(err)
	}

	if _, err := fc.Delete(ctx, resources.DaemonSets, "default", "test", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForQueueLength(1, "deleted DS")
	if _, _, ok := c.expectations.get(key); ok {
		t.Error("expectations kept after the DaemonSet was deleted")
	}
	k, _ := c.queue.Get()
	c.queue.Done(k)
	if k != key {
		t.Fatalf("queued %q, want %q", k, key)
	}

	newDS := newDaemonSet("test")
	newDS.UID = ""
	n, err := fc.Create(ctx, newDS, client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.GetUID() == o.GetUID() {
		t.Fatal("re-created DaemonSet has the old UID")
	}
	waitForQueueLength(1, "re-created DS")
	c.processNextWorkItem(ctx)
	if add, _, ok := c.expectations.get(key); !ok || add <= 0 {
		t.Errorf("expectations of the re-created DS: add=%d exists=%t, want unfulfilled", add, ok)
	}
	if err := validateSyncDaemonSets(tc, 1, 0, 0); err != nil {
		t.Error(err)
	}
}
