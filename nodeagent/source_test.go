package nodeagent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	clientfake "github.com/everynode/everynode/client/fake"
	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
	"github.com/everynode/everynode/resources"
)

// sinkRecorder is a PodSink that keeps the current set.
type sinkRecorder struct {
	mu       sync.Mutex
	pods     map[types.UID]*corev1.Pod
	replaces int
}

func (s *sinkRecorder) Replace(pods []*corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replaces++
	s.pods = map[types.UID]*corev1.Pod{}
	for _, p := range pods {
		s.pods[p.UID] = p
	}
}

func (s *sinkRecorder) Update(p *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods[p.UID] = p
}

func (s *sinkRecorder) Remove(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, uid)
}

func (s *sinkRecorder) names() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for _, p := range s.pods {
		out[p.Name] = true
	}
	return out
}

func TestAPISource(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	api := clientfake.New(newPod("mine"), newPod("theirs", func(p *corev1.Pod) { p.Spec.NodeName = "n2" }))
	api.Fail(clientfake.VerbList, "pods", errors.New("server unreachable"))
	src := &apiSource{api: api, node: testNode, clock: e.clock, log: e.agent.log}
	sink := &sinkRecorder{}
	waiters := e.clock.Waiters()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink) }()

	// The list fails; the source retries after its back-off on the clock.
	eventually(t, "the source to wait for its back-off", func() bool { return e.clock.Waiters() > waiters })
	api.Fail(clientfake.VerbList, "pods", nil)
	e.clock.Step(relistMinBackoff)
	eventually(t, "the first list", func() bool { n := sink.names(); return n["mine"] && !n["theirs"] })

	bg := context.Background()
	if _, err := api.Create(bg, newPod("late", func(p *corev1.Pod) { p.UID = "" }), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a created pod", func() bool { return sink.names()["late"] })
	// Grace period 0: the pod is removed, not only marked for deletion.
	zero := int64(0)
	if _, err := api.Delete(bg, resources.Pods, "default", "mine", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a deleted pod", func() bool { return !sink.names()["mine"] })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("source did not stop")
	}
	if api.Watchers() != 0 {
		t.Errorf("%d watchers left open", api.Watchers())
	}
}

func TestStaleCacheWritesOnce(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.seed(newPod("stale"))
	stale := e.get("stale")
	ctx := context.Background()
	for range 3 {
		// The cache keeps the pre-write pod, as when the watch lags.
		e.agent.pods.Update(stale)
		if _, err := e.agent.syncPod(ctx, stale.UID); err != nil {
			t.Fatal(err)
		}
		e.clock.Step(time.Second)
	}
	writes := 0
	for _, a := range e.api.Actions() {
		if a.Subresource == "status" {
			writes++
		}
	}
	if writes != 1 {
		t.Errorf("%d status writes, want 1", writes)
	}
	if p := e.get("stale"); !p.Status.StartTime.Time.Equal(t0) {
		t.Errorf("startTime %v, want %v", p.Status.StartTime, t0)
	}
}
