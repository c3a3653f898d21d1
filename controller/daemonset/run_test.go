package daemonset

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// fakeStatusWriter fails the first updateErrors UpdateStatus calls and the
// first getErrors Get calls.
type fakeStatusWriter struct {
	updateErrors, getErrors int
	updates, gets           int
	updateErr, getErr       error
}

func (f *fakeStatusWriter) Get(ctx context.Context, r *resources.Resource, ns, name string) (client.Object, error) {
	f.gets++
	if f.gets <= f.getErrors {
		return nil, f.getErr
	}
	return newDaemonSet(name), nil
}

func (f *fakeStatusWriter) UpdateStatus(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error) {
	f.updates++
	if f.updates <= f.updateErrors {
		return nil, f.updateErr
	}
	return obj, nil
}

func TestStoreDaemonSetStatus(t *testing.T) {
	getErr := errors.New("fake get error")
	updateErr := errors.New("fake update error")
	cases := []struct {
		name                  string
		updateErrors, getErrs int
		wantUpdates, wantGets int
		wantErr               error
	}{
		{"succeed immediately", 0, 0, 1, 0, nil},
		{"succeed after one update failure", 1, 0, 2, 1, nil},
		{"fail after two update failures", 2, 0, 2, 1, updateErr},
		{"fail after one update failure and one get failure", 1, 1, 1, 1, getErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds := newDaemonSet("foo")
			w := &fakeStatusWriter{updateErrors: c.updateErrors, getErrors: c.getErrs, updateErr: updateErr, getErr: getErr}
			err := storeDaemonSetStatus(context.Background(), w, ds, statusCounts{desired: 2}, true)
			if (c.wantErr == nil) != (err == nil) || (c.wantErr != nil && !errors.Is(err, c.wantErr)) {
				t.Errorf("err %v, want %v", err, c.wantErr)
			}
			if w.updates != c.wantUpdates || w.gets != c.wantGets {
				t.Errorf("updates %d gets %d, want %d %d", w.updates, w.gets, c.wantUpdates, c.wantGets)
			}
		})
	}
}

func TestStatusWriteSkippedWhenUnchanged(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Generation = 1
	tc := newTestController(t, ds)
	// The DaemonSet as the API stores it (defaulted), as the informer sees it:
	// pod hashes must be computed from that template.
	stored, err := tc.client.Get(context.Background(), resources.DaemonSets, "default", "foo")
	if err != nil {
		t.Fatal(err)
	}
	ds = stored.(*appsv1.DaemonSet)
	addNodes(tc.nodeStore, 0, 2, nil)
	addPods(tc.podStore, "node-0", simpleDaemonSetLabel, ds, 1)
	addPods(tc.podStore, "node-1", simpleDaemonSetLabel, ds, 1)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
	// The cache catches up with the written status.
	o, err := tc.client.Get(context.Background(), resources.DaemonSets, "default", "foo")
	if err != nil {
		t.Fatal(err)
	}
	tc.dsStore.Update(o)
	tc.client.ClearActions()
	expectSyncDaemonSets(t, tc, o.(*appsv1.DaemonSet), 0, 0, 0)
	for _, a := range tc.client.Actions() {
		if a.Subresource == "status" {
			t.Errorf("unchanged status written: %v", a)
		}
	}
}

func TestStatusKeepsClientConditions(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Status.Conditions = []appsv1.DaemonSetCondition{{Type: "Custom", Status: corev1.ConditionTrue}}
	tc := newTestController(t, ds)
	addNodes(tc.nodeStore, 0, 1, nil)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, 1, 0, 0)
	u := lastStatusUpdate(t, tc, ds)
	if u == nil || len(u.Status.Conditions) != 1 || u.Status.DesiredNumberScheduled != 1 {
		t.Errorf("status %+v", u)
	}
}

func TestClientPodControlEvents(t *testing.T) {
	ctx := context.Background()
	fc := fake.New()
	rec := &fakeRecorder{}
	pc := clientPodControl{client: fc, recorder: rec}
	ds := newDaemonSet("foo")
	tmpl := CreatePodTemplate(ds.Spec.Template, nil, "h")

	if err := pc.CreatePod(ctx, NewDaemonPod(&tmpl, ds, "n1"), ds); err != nil {
		t.Fatal(err)
	}
	fc.Fail(fake.VerbCreate, "pods", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", errors.New("quota")))
	if err := pc.CreatePod(ctx, NewDaemonPod(&tmpl, ds, "n2"), ds); err == nil {
		t.Fatal("create did not fail")
	}
	terminating := &apierrors.StatusError{ErrStatus: metav1.Status{Code: 403, Reason: metav1.StatusReasonForbidden,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}}}}
	fc.Fail(fake.VerbCreate, "pods", terminating)
	if err := pc.CreatePod(ctx, NewDaemonPod(&tmpl, ds, "n3"), ds); err == nil {
		t.Fatal("create did not fail")
	}
	if err := pc.CreatePod(ctx, &corev1.Pod{}, ds); err == nil {
		t.Error("pod without labels created")
	}
	pods, _, _ := fc.List(ctx, resources.Pods, "", client.ListOptions{})
	if len(pods) != 1 || pods[0].(*corev1.Pod).Spec.NodeName != "n1" {
		t.Fatalf("pods %v", pods)
	}
	if err := pc.DeletePod(ctx, "default", pods[0].GetName(), ds); err != nil {
		t.Fatal(err)
	}
	if err := pc.DeletePod(ctx, "default", "gone", ds); !apierrors.IsNotFound(err) {
		t.Errorf("delete missing: %v", err)
	}
	want := []string{"Normal SuccessfulCreate Created pod: " + pods[0].GetName(), "Warning FailedCreate Error creating:", "Normal SuccessfulDelete Deleted pod: " + pods[0].GetName()}
	if len(rec.Events) != len(want) {
		t.Fatalf("events %q, want %q", rec.Events, want)
	}
	for i := range want {
		if !strings.HasPrefix(rec.Events[i], want[i]) {
			t.Errorf("event %d %q, want prefix %q", i, rec.Events[i], want[i])
		}
	}
}

// TestControllerEventsReachTheAPI: the controller's recorder writes events
// about a DaemonSet in its namespace, from the daemonset-controller source.
func TestControllerEventsReachTheAPI(t *testing.T) {
	fc := fake.New()
	c, err := New(Config{Client: fc})
	if err != nil {
		t.Fatal(err)
	}
	defer c.queue.ShutDown() // never Run: its queue is ours to stop
	c.events.Start()
	defer c.events.Shutdown()
	ds := newDaemonSet("foo")
	c.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonFailedDaemonPod, "pod %s failed", "p1")
	var evs []client.Object
	testkit.EventuallyTrue(t, 10*time.Second, "event written", func() bool {
		evs, _, _ = fc.List(context.Background(), resources.Events, "default", client.ListOptions{})
		return len(evs) > 0
	})
	if len(evs) != 1 {
		t.Fatalf("%d events written", len(evs))
	}
	ev := evs[0].(*corev1.Event)
	if ev.Reason != ReasonFailedDaemonPod || ev.Message != "pod p1 failed" || ev.Type != "Warning" ||
		ev.InvolvedObject.Kind != "DaemonSet" || ev.InvolvedObject.APIVersion != "apps/v1" ||
		ev.InvolvedObject.Name != "foo" || ev.InvolvedObject.UID != ds.UID ||
		ev.Source.Component != Component || ev.Count != 1 {
		t.Errorf("event %+v", ev)
	}
}

// TestRunAgainstFakeClient runs the whole controller — informers over
// fake.Client watches, workers, real pod control and event recorder — and
// checks it converges, reacts to changes, and stops every goroutine.
func TestRunAgainstFakeClient(t *testing.T) {
	checkLeaks := testkit.LeakCheck(t)
	ctx := context.Background()
	fc := fake.New()
	for i := 0; i < 3; i++ {
		fc.Seed(newNode(fmt.Sprintf("node-%d", i), nil))
	}
	ds := newDaemonSet("foo")
	ds.UID = ""
	if _, err := fc.Create(ctx, ds, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Client: fc})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	var runErr error
	go func() {
		defer wg.Done()
		runErr = c.Run(runCtx, 2)
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	defer stop()

	// podsByNode counts the live pods per node and, standing in for the node
	// agents, finishes the graceful deletion of bound pods.
	podsByNode := func() map[string]int {
		pods, _, _ := fc.List(ctx, resources.Pods, "default", client.ListOptions{})
		out := map[string]int{}
		for _, p := range pods {
			if p.GetDeletionTimestamp() == nil {
				out[p.(*corev1.Pod).Spec.NodeName]++
				continue
			}
			_, _ = fc.Delete(ctx, resources.Pods, "default", p.GetName(), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		return out
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testkit.Eventually(t, 10*time.Second, func() error {
			if !cond() {
				return fmt.Errorf("waiting for %s (pods %v)", what, podsByNode())
			}
			return nil
		})
	}
	onePerNode := func(n int) func() bool {
		return func() bool {
			m := podsByNode()
			if len(m) != n {
				return false
			}
			for _, k := range m {
				if k != 1 {
					return false
				}
			}
			return true
		}
	}
	waitFor("one pod per node", onePerNode(3))
	waitFor("status", func() bool {
		o, _ := fc.Get(ctx, resources.DaemonSets, "default", "foo")
		st := o.(*appsv1.DaemonSet).Status
		return st.DesiredNumberScheduled == 3 && st.CurrentNumberScheduled == 3 && st.UpdatedNumberScheduled == 3 && st.ObservedGeneration == 1
	})
	revs, _, _ := fc.List(ctx, resources.ControllerRevisions, "default", client.ListOptions{})
	if len(revs) != 1 || revs[0].(*appsv1.ControllerRevision).Revision != 1 {
		t.Errorf("revisions %v", revs)
	}

	// A new node gets a pod; a deleted pod is replaced.
	fc.Seed(newNode("node-3", nil))
	waitFor("pod on the new node", onePerNode(4))
	pods, _, _ := fc.List(ctx, resources.Pods, "default", client.ListOptions{FieldSelector: "spec.nodeName=node-0"})
	victim := pods[0]
	// Grace period 0: the node agent's final delete (a bound pod otherwise
	// only gets a deletionTimestamp).
	if _, err := fc.Delete(ctx, resources.Pods, "default", victim.GetName(), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitFor("replacement", func() bool {
		pods, _, _ := fc.List(ctx, resources.Pods, "default", client.ListOptions{FieldSelector: "spec.nodeName=node-0"})
		return len(pods) == 1 && pods[0].GetUID() != victim.GetUID()
	})
	// A node whose labels stop matching loses its pod.
	o, _ := fc.Get(ctx, resources.DaemonSets, "default", "foo")
	d := o.(*appsv1.DaemonSet)
	d.Spec.Template.Spec.NodeSelector = map[string]string{"pick": "me"}
	if _, err := fc.Update(ctx, d, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("pods gone from unlabelled nodes", onePerNode(0))
	n, _ := fc.Get(ctx, resources.Nodes, "", "node-2")
	n.SetLabels(map[string]string{"pick": "me"})
	if _, err := fc.Update(ctx, n, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("pod on the labelled node", func() bool {
		m := podsByNode()
		return len(m) == 1 && m["node-2"] == 1
	})
	evs, _, _ := fc.List(ctx, resources.Events, "default", client.ListOptions{FieldSelector: "reason=SuccessfulCreate"})
	if len(evs) < 5 {
		t.Errorf("%d SuccessfulCreate events, want >= 5", len(evs))
	}

	stop()
	if runErr != nil {
		t.Errorf("Run: %v", runErr)
	}
	if n := fc.Watchers(); n != 0 {
		t.Errorf("%d watches left open", n)
	}
	checkLeaks()
}

func TestRunStopsBeforeCacheSync(t *testing.T) {
	fc := fake.New()
	fc.Fail(fake.VerbList, "*", errors.New("api down"))
	c, err := New(Config{Client: fc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx, 1); err == nil {
		t.Error("Run returned nil although caches never synced")
	}
}

func TestNewRequiresClient(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a client succeeded")
	}
}
