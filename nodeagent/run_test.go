package nodeagent

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clientfake "github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent/runtime"
	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
	"github.com/everynode/everynode/resources"
)

// graceRecorder is a runtime that remembers the grace of every stop.
type graceRecorder struct {
	*rtfake.Fake
	mu    sync.Mutex
	grace []time.Duration
}

func (g *graceRecorder) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	g.mu.Lock()
	g.grace = append(g.grace, grace)
	g.mu.Unlock()
	return g.Fake.StopContainer(ctx, id, grace)
}

func TestDeletionStopsWithGraceThenDeletesPod(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	rec := &graceRecorder{Fake: e.rt}
	e.agent.rt = rec
	e.seed(newPod("gone"))
	e.sync("gone")
	if n := len(e.containers(runtime.Labels{runtime.LabelPodUID: "uid-gone"})); n != 1 {
		t.Fatalf("%d containers before deletion", n)
	}

	p := e.get("gone")
	now := metav1.NewTime(e.clock.Now())
	grace := int64(17)
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, &grace
	e.agent.pods.Update(p)
	if _, err := e.agent.syncPod(context.Background(), p.UID); err != nil {
		t.Fatal(err)
	}
	if n := len(e.containers(runtime.Labels{runtime.LabelPodUID: "uid-gone"})); n != 0 {
		t.Errorf("%d containers after deletion", n)
	}
	if len(rec.grace) != 1 || rec.grace[0] != 17*time.Second {
		t.Errorf("stop grace %v, want [17s]", rec.grace)
	}
	dels := e.api.deleteOptions()
	if len(dels) != 1 || dels[0].GracePeriodSeconds == nil || *dels[0].GracePeriodSeconds != 0 ||
		dels[0].Preconditions == nil || *dels[0].Preconditions.UID != "uid-gone" {
		t.Fatalf("deletes %+v", dels)
	}
	if _, err := e.api.Get(context.Background(), resources.Pods, "default", "gone"); !apierrors.IsNotFound(err) {
		t.Errorf("pod still there: %v", err)
	}
}

// run starts the agent and returns a stop function that cancels it, waits
// for Run to return and checks that no goroutine outlives it.
func (e *env) run() (stop func()) {
	e.t.Helper()
	checkLeaks := testkit.LeakCheck(e.t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.agent.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				e.t.Fatal("Run did not return after cancel")
			}
			checkLeaks()
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// stepUntil advances the fake clock by step between polls until cond holds.
func (e *env) stepUntil(what string, step time.Duration, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s (fake clock at +%s)", what, e.clock.Since(t0))
		}
		e.clock.Step(step)
		time.Sleep(2 * time.Millisecond)
	}
}

func (e *env) apiPod(name string) *corev1.Pod {
	o, err := e.api.Get(context.Background(), resources.Pods, "default", name)
	if err != nil {
		return nil
	}
	return o.(*corev1.Pod)
}

func TestRunPodLifecycle(t *testing.T) {
	e := newEnv(t, rtfake.Config{IP: "10.88.0.9"})
	if err := e.api.Seed(newPod("crashy", withAnnotations(rtfake.AnnotationExitAfter, "30s", rtfake.AnnotationExitCode, "1"))); err != nil {
		t.Fatal(err)
	}
	if err := e.api.Seed(newPod("other", func(p *corev1.Pod) { p.Spec.NodeName = "n2" })); err != nil {
		t.Fatal(err)
	}
	stop := e.run()

	eventually(t, "pod running and ready", func() bool {
		p := e.apiPod("crashy")
		return p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady) != nil &&
			podCondition(p, corev1.PodReady).Status == corev1.ConditionTrue
	})
	e.stepUntil("CrashLoopBackOff", time.Second, func() bool {
		s := e.apiPod("crashy").Status.ContainerStatuses
		return len(s) == 1 && waitingReason(s[0]) == reasonCrashLoopBackOff
	})
	if p := e.apiPod("crashy"); podCondition(p, corev1.PodReady).Status != corev1.ConditionFalse {
		t.Errorf("ready while crash looping: %+v", p.Status.Conditions)
	}
	e.stepUntil("restart", time.Second, func() bool {
		s := e.apiPod("crashy").Status.ContainerStatuses
		return len(s) == 1 && s[0].RestartCount == 1 && s[0].State.Running != nil
	})
	if p := e.apiPod("other"); len(p.Status.ContainerStatuses) != 0 {
		t.Errorf("pod of another node got a status: %+v", p.Status)
	}
	stop()
}

func TestRunDeletionAndSweep(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	ctx := context.Background()
	held := newPod("held", func(p *corev1.Pod) { p.Finalizers = []string{"test.everynode.io/hold"} })
	for _, p := range []*corev1.Pod{held, newPod("forced")} {
		if err := e.api.Seed(p); err != nil {
			t.Fatal(err)
		}
	}
	// Strays: a container of this node for a pod that does not exist, one
	// with no pod label at all, and one of another node that must stay.
	for _, labels := range []map[string]string{
		{runtime.LabelNode: testNode, runtime.LabelPodUID: "uid-ghost", runtime.LabelContainer: "app"},
		{runtime.LabelNode: testNode},
		{runtime.LabelNode: "n2", runtime.LabelPodUID: "uid-ghost", runtime.LabelContainer: "app"},
	} {
		id, err := e.rt.CreateContainer(ctx, runtime.ContainerSpec{Name: "app", Image: "busybox:1.36", Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.rt.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	e.run()

	count := func(uid string) int {
		return len(e.containers(runtime.Labels{runtime.LabelNode: testNode, runtime.LabelPodUID: uid}))
	}
	eventually(t, "both pods running and strays swept", func() bool {
		return count("uid-held") == 1 && count("uid-forced") == 1 &&
			len(e.containers(runtime.Labels{runtime.LabelNode: testNode})) == 2
	})
	if n := len(e.containers(runtime.Labels{runtime.LabelNode: "n2"})); n != 1 {
		t.Errorf("another node's container was touched: %d left", n)
	}

	// Graceful: the finalizer keeps the object, so the agent sees the
	// deletionTimestamp, removes the containers and deletes with grace 0.
	if _, err := e.api.Delete(ctx, resources.Pods, "default", "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "held pod's containers removed and pod deleted", func() bool {
		if count("uid-held") != 0 {
			return false
		}
		for _, d := range e.api.deleteOptions() {
			if d.GracePeriodSeconds != nil && *d.GracePeriodSeconds == 0 && d.Preconditions != nil {
				return true
			}
		}
		return false
	})
	// Forced: the object vanishes at once; the containers go with it.
	zero := int64(0)
	if _, err := e.api.Delete(ctx, resources.Pods, "default", "forced", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "forced pod's containers removed", func() bool { return count("uid-forced") == 0 })
}

func TestRunFailsWithoutRuntime(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.rt.InjectError("Version", context.DeadlineExceeded)
	if err := e.agent.Run(context.Background()); err == nil {
		t.Fatal("Run succeeded although the runtime does not answer")
	}
}

func TestNewValidates(t *testing.T) {
	rt := rtfake.New(rtfake.Config{})
	api := clientfake.New()
	for _, cfg := range []Config{{Runtime: rt, Client: api}, {NodeName: "n", Client: api}, {NodeName: "n", Runtime: rt, Source: staticSource{}}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// staticSource is a PodSource with a fixed set of pods, as a disk-backed
// source would be.
type staticSource struct{ pods []*corev1.Pod }

func (s staticSource) Run(ctx context.Context, sink PodSink) error {
	sink.Replace(s.pods)
	<-ctx.Done()
	return nil
}

func TestRunWithCustomSource(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	a, err := New(Config{NodeName: testNode, Runtime: e.rt, Client: e.api, Clock: e.clock,
		Source: staticSource{pods: []*corev1.Pod{newPod("static")}}})
	if err != nil {
		t.Fatal(err)
	}
	e.agent = a
	e.run()
	eventually(t, "static pod's container running", func() bool {
		l := e.containers(runtime.Labels{runtime.LabelPodUID: "uid-static"})
		return len(l) == 1 && l[0].State == runtime.StateRunning
	})
}

type failingSource struct{}

func (failingSource) Run(ctx context.Context, sink PodSink) error {
	return context.DeadlineExceeded
}

func TestRunStopsWhenSourceFails(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	a, err := New(Config{NodeName: testNode, Runtime: e.rt, Client: e.api, Clock: e.clock, Source: failingSource{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(context.Background()); err == nil {
		t.Fatal("Run returned nil after its source failed")
	}
}
