package nodeagent

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/everynode/everynode/client"
	clientfake "github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent/runtime"
	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
	"github.com/everynode/everynode/resources"
)

const testNode = "n1"

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// deleteRecorder is a client that remembers the options of every Delete.
type deleteRecorder struct {
	*clientfake.Client
	mu      sync.Mutex
	deletes []metav1.DeleteOptions
}

func (d *deleteRecorder) Delete(ctx context.Context, r *resources.Resource, ns, name string, opts metav1.DeleteOptions) (client.Object, error) {
	d.mu.Lock()
	d.deletes = append(d.deletes, opts)
	d.mu.Unlock()
	return d.Client.Delete(ctx, r, ns, name, opts)
}

func (d *deleteRecorder) deleteOptions() []metav1.DeleteOptions {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]metav1.DeleteOptions(nil), d.deletes...)
}

type env struct {
	t     testing.TB
	agent *Agent
	api   *deleteRecorder
	rt    *rtfake.Fake
	clock *testingclock.FakeClock
	marks int // events barriers so far
}

func newEnv(t testing.TB, rcfg rtfake.Config, objs ...resources.Object) *env {
	t.Helper()
	clk := testingclock.NewFakeClock(t0)
	rcfg.Clock = clk
	if rcfg.Images == nil {
		rcfg.Images = []string{"busybox:1.36"}
	}
	api := &deleteRecorder{Client: clientfake.New(objs...)}
	api.SetClock(clk)
	rt := rtfake.New(rcfg)
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := New(Config{
		NodeName: testNode, NodeIP: "192.0.2.10", Client: api, Runtime: rt, Clock: clk,
		Logger: logger, DataDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	a.scheme = rtfake.Name
	// The tests drive syncs without Run: events are written all the same.
	a.events.Start()
	t.Cleanup(a.events.Shutdown)
	return &env{t: t, agent: a, api: api, rt: rt, clock: clk}
}

type podOpt func(*corev1.Pod)

func withAnnotations(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func withContainer(f func(*corev1.Container)) podOpt {
	return func(p *corev1.Pod) { f(&p.Spec.Containers[0]) }
}

func newPod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: name, UID: types.UID("uid-" + name),
		},
		Spec: corev1.PodSpec{
			NodeName:      testNode,
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{
				Name: "app", Image: "busybox:1.36", Command: []string{"sleep", "infinity"},
			}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// seed stores pod in the API and hands the API's copy to the agent's cache,
// as the watch would.
func (e *env) seed(pod *corev1.Pod) {
	e.t.Helper()
	if err := e.api.Seed(pod); err != nil {
		e.t.Fatal(err)
	}
	e.refresh(pod.Name)
}

// refresh copies the API's current pod into the agent's cache.
func (e *env) refresh(name string) *corev1.Pod {
	e.t.Helper()
	p := e.get(name)
	e.agent.pods.Update(p)
	if _, synced := e.agent.pods.get(p.UID); !synced {
		e.agent.pods.Replace([]*corev1.Pod{p})
	}
	return p
}

func (e *env) get(name string) *corev1.Pod {
	e.t.Helper()
	o, err := e.api.Get(context.Background(), resources.Pods, "default", name)
	if err != nil {
		e.t.Fatal(err)
	}
	return o.(*corev1.Pod)
}

// sync runs one sync pass of the pod (after refreshing it from the API) and
// returns the pod as the API then holds it and the requested wake-up delay.
func (e *env) sync(name string) (*corev1.Pod, time.Duration) {
	e.t.Helper()
	p := e.refresh(name)
	wake, err := e.agent.syncPod(context.Background(), p.UID)
	if err != nil {
		e.t.Fatalf("syncPod(%s): %v", name, err)
	}
	return e.get(name), wake
}

func (e *env) containers(filter runtime.Labels) []runtime.Container {
	e.t.Helper()
	l, err := e.rt.ListContainers(context.Background(), filter)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func cstatus(t *testing.T, p *corev1.Pod) corev1.ContainerStatus {
	t.Helper()
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod %s: %d container statuses, want 1: %+v", p.Name, len(p.Status.ContainerStatuses), p.Status)
	}
	return p.Status.ContainerStatuses[0]
}

func waitingReason(s corev1.ContainerStatus) string {
	if s.State.Waiting == nil {
		return ""
	}
	return s.State.Waiting.Reason
}

// eventually is testkit.EventuallyTrue with this package's deadline: cond
// (a real asynchronous system: the agent's goroutines) must hold within 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.EventuallyTrue(t, 10*time.Second, what, cond)
}
