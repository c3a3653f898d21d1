package record

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

const wait = 10 * time.Second

var source = corev1.EventSource{Component: "test-controller"}

func daemonSet(name string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
}

// started returns a started Broadcaster over a fake client, shut down at
// the end of the test, and a recorder for source.
func started(t *testing.T, o Options) (*Broadcaster, EventRecorder, *fake.Client) {
	t.Helper()
	fc := fake.New()
	if o.ResourceFor == nil {
		o.ResourceFor = resources.ForObject // the tests' objects are DaemonSets
	}
	b := NewBroadcaster(fc, o)
	b.Start()
	t.Cleanup(b.Shutdown)
	return b, b.NewRecorder(source), fc
}

// events lists the events in ns about the object named name.
func events(t *testing.T, fc *fake.Client, ns, name string) []*corev1.Event {
	t.Helper()
	objs, _, err := fc.List(context.Background(), resources.Events, ns, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []*corev1.Event
	for _, o := range objs {
		if ev := o.(*corev1.Event); ev.InvolvedObject.Name == name {
			out = append(out, ev)
		}
	}
	return out
}

// barrier records a marker event about its own object and waits until it is
// written: the sink writes events in order, so every event recorded before
// it has then been written or dropped.
func barrier(t *testing.T, rec EventRecorder, fc *fake.Client) {
	t.Helper()
	marker := daemonSet(fmt.Sprint("marker-", time.Now().UnixNano()))
	rec.Event(marker, corev1.EventTypeNormal, "Marker", "m")
	testkit.EventuallyTrue(t, wait, "marker event written", func() bool { return len(events(t, fc, "ns", marker.Name)) == 1 })
}

func TestEventReachesTheAPI(t *testing.T) {
	_, rec, fc := started(t, Options{})
	ds := daemonSet("foo")
	ds.ResourceVersion = "7"
	rec.Eventf(ds, corev1.EventTypeWarning, "FailedCreate", "Error creating: %v", "quota")
	testkit.EventuallyTrue(t, wait, "event written", func() bool { return len(events(t, fc, "ns", "foo")) == 1 })
	ev := events(t, fc, "ns", "foo")[0]
	want := corev1.ObjectReference{Kind: "DaemonSet", APIVersion: "apps/v1", Namespace: "ns", Name: "foo", UID: ds.UID, ResourceVersion: "7"}
	if ev.InvolvedObject != want {
		t.Errorf("involvedObject %+v, want %+v", ev.InvolvedObject, want)
	}
	if ev.Namespace != "ns" || ev.Type != corev1.EventTypeWarning || ev.Reason != "FailedCreate" || ev.Message != "Error creating: quota" ||
		ev.Source != source || ev.ReportingController != source.Component || ev.Count != 1 || ev.FirstTimestamp.IsZero() ||
		!strings.HasPrefix(ev.Name, "foo.") {
		t.Errorf("event %+v", ev)
	}
}

// TestEventNamespaces: an event lives in its object's namespace; one about a
// cluster-scoped object (a Node) in "default", as in Kubernetes. A
// reference names a part of an object (a container) and a node's
// component its host.
func TestEventNamespaces(t *testing.T) {
	fc := fake.New()
	b := NewBroadcaster(fc, Options{ResourceFor: resources.ForObject})
	b.Start()
	defer b.Shutdown()
	agent := b.NewRecorder(corev1.EventSource{Component: "agent", Host: "n1"})
	agent.Event(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1"}}, corev1.EventTypeNormal, "Starting", "starting")
	agent.Event(&corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "kube", Name: "p", UID: "u2", FieldPath: "spec.containers{app}"},
		corev1.EventTypeNormal, "Started", "Started container app")
	testkit.EventuallyTrue(t, wait, "both events written", func() bool {
		return len(events(t, fc, "default", "n1")) == 1 && len(events(t, fc, "kube", "p")) == 1
	})
	node := events(t, fc, "default", "n1")[0]
	if node.InvolvedObject.Kind != "Node" || node.InvolvedObject.APIVersion != "v1" || node.InvolvedObject.Namespace != "" {
		t.Errorf("node event's object %+v", node.InvolvedObject)
	}
	pod := events(t, fc, "kube", "p")[0]
	if pod.InvolvedObject.FieldPath != "spec.containers{app}" || pod.Source.Host != "n1" || pod.ReportingInstance != "n1" {
		t.Errorf("pod event %+v", pod)
	}
}

// TestSimilarEventsAggregated: as Kubernetes' recorder, the same event again
// raises the count of one Event; past ten events about an object that
// differ only by message within ten minutes, they are folded into one
// "(combined from similar events)" Event whose count rises.
func TestSimilarEventsAggregated(t *testing.T) {
	_, rec, fc := started(t, Options{})
	ds := daemonSet("foo")
	for range 3 {
		rec.Event(ds, corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: p0")
	}
	for i := 1; i <= 12; i++ {
		rec.Eventf(ds, corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: p%d", i)
	}
	barrier(t, rec, fc)

	evs := events(t, fc, "ns", "foo")
	var combined []*corev1.Event
	plain := map[string]int32{}
	for _, ev := range evs {
		if strings.HasPrefix(ev.Message, "(combined from similar events): ") {
			combined = append(combined, ev)
		} else {
			plain[ev.Message] = ev.Count
		}
	}
	// p0 (three times, one Event), p1..p8 alone; from the 10th distinct
	// message on they are combined: p9..p12 in one Event, count 4.
	if len(plain) != 9 || plain["Created pod: p0"] != 3 || plain["Created pod: p8"] != 1 {
		t.Errorf("plain events (message: count) %v", plain)
	}
	if len(combined) != 1 || combined[0].Count != 4 || combined[0].Message != "(combined from similar events): Created pod: p12" {
		for _, ev := range combined {
			t.Logf("combined: count %d %q", ev.Count, ev.Message)
		}
		t.Fatalf("%d combined events, want one with count 4", len(combined))
	}
	if combined[0].Reason != "SuccessfulCreate" || combined[0].InvolvedObject.UID != ds.UID {
		t.Errorf("combined event %+v", combined[0])
	}
}

// TestSpamFilter: as Kubernetes' recorder, a source writes a burst of 25
// events about an object, then one per 5 minutes; another object has its
// own allowance. (The Event's count still counts every occurrence.)
func TestSpamFilter(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	_, rec, fc := started(t, Options{Clock: clk})
	ds, other := daemonSet("foo"), daemonSet("bar")
	record := func(n int, obj *appsv1.DaemonSet) {
		for range n {
			rec.Event(obj, corev1.EventTypeWarning, "FailedDaemonPod", "Found failed daemon pod")
		}
	}
	writes := func(name string) int { return writes(fc, fake.VerbCreate, name) + writes(fc, fake.VerbPatch, name) }
	record(40, ds)
	record(1, other)
	barrier(t, rec, fc)
	if n := writes("foo"); n != 25 {
		t.Fatalf("after 40 events: %d writes, want 25 (the burst)", n)
	}
	if n := writes("bar"); n != 1 {
		t.Errorf("other object: %d writes, want 1", n)
	}
	clk.Step(5*time.Minute - time.Second)
	record(1, ds)
	barrier(t, rec, fc)
	if n := writes("foo"); n != 25 {
		t.Fatalf("before a refill: %d writes, want 25", n)
	}
	clk.Step(time.Second)
	record(3, ds)
	barrier(t, rec, fc)
	if n := writes("foo"); n != 26 {
		t.Fatalf("after one refill period: %d writes, want 26 (one token back)", n)
	}
	if evs := events(t, fc, "ns", "foo"); len(evs) != 1 || evs[0].Count != 42 {
		t.Errorf("events %+v, want one with count 42", evs)
	}
}

// TestSinkErrors: an API Status reaches the writer unwrapped (it then gives
// up on the event rather than retrying), other errors are wrapped.
func TestSinkErrors(t *testing.T) {
	fc := fake.New()
	s := &sink{api: fc, timeout: time.Second}
	ctx := context.Background()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "x", errors.New("no"))
	fc.Fail(fake.VerbCreate, "events", fmt.Errorf("wrapped: %w", forbidden))
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "e"}}
	if _, err := s.create(ctx, ev); err != forbidden { // the very error, unwrapped
		t.Errorf("create: %v (%T), want the StatusError itself", err, err)
	}
	boom := errors.New("connection refused")
	fc.Fail(fake.VerbCreate, "events", boom)
	if _, err := s.create(ctx, ev); !errors.Is(err, boom) {
		t.Errorf("create: %v, want it to wrap %v", err, boom)
	}
	if _, err := s.patch(ctx, ev, []byte(`{"count":2}`)); !apierrors.IsNotFound(err) {
		t.Errorf("patch of a missing event: %v, want NotFound", err)
	}
}

// writes counts the creates and patches of events about the object named
// name.
func writes(fc *fake.Client, verb, name string) int {
	n := 0
	for _, a := range fc.Actions() {
		if a.Resource == "events" && a.Verb == verb && strings.HasPrefix(a.Name, name+".") {
			n++
		}
	}
	return n
}

// TestFailedWritesRetried: a write that fails for want of the API is tried
// again, up to 12 times; one the API refuses is not.
func TestFailedWritesRetried(t *testing.T) {
	fc := fake.New()
	b := NewBroadcaster(fc, Options{ResourceFor: resources.ForObject})
	b.retrySleep = time.Millisecond
	rec := b.NewRecorder(source)
	b.Start()
	defer b.Shutdown()

	var failures atomic.Int32
	fc.FailFunc(fake.VerbCreate, "events", func(a fake.Action) error {
		switch {
		case strings.HasPrefix(a.Name, "flaky.") && failures.Add(1) <= 3:
			return errors.New("connection refused")
		case strings.HasPrefix(a.Name, "down."):
			return errors.New("connection refused")
		case strings.HasPrefix(a.Name, "refused."):
			return apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, a.Name, errors.New("no"))
		}
		return nil
	})
	rec.Event(daemonSet("flaky"), corev1.EventTypeNormal, "R", "m")
	rec.Event(daemonSet("down"), corev1.EventTypeNormal, "R", "m")
	rec.Event(daemonSet("refused"), corev1.EventTypeNormal, "R", "m")
	barrier(t, rec, fc)
	if n := len(events(t, fc, "ns", "flaky")); n != 1 || failures.Load() != 4 {
		t.Errorf("flaky API: %d events after %d tries, want 1 after 4", n, failures.Load())
	}
	if n := writes(fc, fake.VerbCreate, "down"); n != maxTriesPerEvent {
		t.Errorf("API down: %d tries, want %d", n, maxTriesPerEvent)
	}
	if n := writes(fc, fake.VerbCreate, "refused"); n != 1 {
		t.Errorf("refused by the API: %d tries, want 1", n)
	}
}

// TestMissingEventCreatedAfresh: a further occurrence patches the earlier
// Event; when that is gone (expired, deleted), it is created again with the
// count so far.
func TestMissingEventCreatedAfresh(t *testing.T) {
	_, rec, fc := started(t, Options{})
	ds := daemonSet("foo")
	rec.Event(ds, corev1.EventTypeNormal, "R", "m")
	rec.Event(ds, corev1.EventTypeNormal, "R", "m")
	barrier(t, rec, fc)
	evs := events(t, fc, "ns", "foo")
	if len(evs) != 1 || evs[0].Count != 2 || writes(fc, fake.VerbPatch, "foo") != 1 {
		t.Fatalf("events %+v after two occurrences, want one patched to count 2", evs)
	}
	if _, err := fc.Delete(context.Background(), resources.Events, "ns", evs[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.Event(ds, corev1.EventTypeNormal, "R", "m")
	barrier(t, rec, fc)
	evs = events(t, fc, "ns", "foo")
	if len(evs) != 1 || evs[0].Count != 3 {
		t.Fatalf("events %+v after the Event was deleted, want it created again with count 3", evs)
	}
}

// TestPausedDropsEvents: while paused, events are not written (nor retried
// later); once unpaused they are.
func TestPausedDropsEvents(t *testing.T) {
	var paused atomic.Bool
	var asked atomic.Int32
	paused.Store(true)
	_, rec, fc := started(t, Options{Paused: func() bool { asked.Add(1); return paused.Load() }})
	rec.Event(daemonSet("foo"), corev1.EventTypeNormal, "R", "while paused")
	testkit.EventuallyTrue(t, wait, "event handed to the sink", func() bool { return asked.Load() == 1 })
	paused.Store(false)
	barrier(t, rec, fc)
	if evs := events(t, fc, "ns", "foo"); len(evs) != 0 {
		t.Errorf("event written while paused: %+v", evs)
	}
}

// TestNotStartedDropsEvents: a recorder made before Start drops events
// until Start, then records them; after Shutdown it drops them again.
func TestNotStartedDropsEvents(t *testing.T) {
	fc := fake.New()
	b := NewBroadcaster(fc, Options{ResourceFor: resources.ForObject})
	rec := b.NewRecorder(source)
	rec.Event(daemonSet("early"), corev1.EventTypeNormal, "R", "m")
	b.Start()
	rec.Event(daemonSet("foo"), corev1.EventTypeNormal, "R", "m")
	barrier(t, rec, fc)
	b.Shutdown()
	rec.Event(daemonSet("late"), corev1.EventTypeNormal, "R", "m")
	if n := len(events(t, fc, "ns", "foo")); n != 1 {
		t.Errorf("%d events while started, want 1", n)
	}
	if n := len(events(t, fc, "ns", "early")); n != 0 {
		t.Errorf("%d events before Start, want 0", n)
	}
	if n := len(events(t, fc, "ns", "late")); n != 0 {
		t.Errorf("%d events after Shutdown, want 0", n)
	}
}

// hangingClient's writes block until their context ends.
type hangingClient struct {
	*fake.Client
	calls atomic.Int32
}

func (h *hangingClient) Create(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error) {
	h.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestShutdownLeavesNoGoroutine: Shutdown stops the writer goroutine, also with an API call hanging; Run stops when ctx ends.
func TestShutdownLeavesNoGoroutine(t *testing.T) {
	checkLeaks := testkit.LeakCheck(t)
	hc := &hangingClient{Client: fake.New()}
	b := NewBroadcaster(hc, Options{ResourceFor: resources.ForObject})
	rec := b.NewRecorder(source)
	b.Start()
	b.Start() // no-op
	rec.Event(daemonSet("hangs"), corev1.EventTypeNormal, "R", "m")
	testkit.EventuallyTrue(t, wait, "write under way", func() bool { return hc.calls.Load() == 1 })
	b.Shutdown()
	b.Shutdown() // no-op
	checkLeaks()

	// Started again, and stopped through Run's context.
	fc := fake.New()
	b = NewBroadcaster(fc, Options{ResourceFor: resources.ForObject})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.Run(ctx); close(done) }()
	rec = b.NewRecorder(source)
	testkit.Eventually(t, wait, func() error {
		rec.Event(daemonSet("run"), corev1.EventTypeNormal, "R", "m")
		if len(events(t, fc, "ns", "run")) == 0 {
			return errors.New("no event yet")
		}
		return nil
	})
	cancel()
	<-done
	checkLeaks()
}

// TestNothingLoggedAfterShutdown: the writer goroutine, waiting to
// retry a failed write when Shutdown comes, logs nothing once Shutdown has
// returned (a test's logger may be gone by then).
func TestNothingLoggedAfterShutdown(t *testing.T) {
	checkLeaks := testkit.LeakCheck(t)
	var out testkit.Buffer
	fc := fake.New()
	fc.Fail(fake.VerbCreate, "events", errors.New("connection refused"))
	b := NewBroadcaster(fc, Options{Logger: slog.New(slog.NewTextHandler(&out, nil)), ResourceFor: resources.ForObject})
	b.Start()
	b.NewRecorder(source).Event(daemonSet("foo"), corev1.EventTypeNormal, "R", "m")
	testkit.EventuallyTrue(t, wait, "failed write logged", func() bool { return out.Contains("may retry after sleeping") })
	b.Shutdown()
	logged := out.String()
	checkLeaks()
	if after := strings.TrimPrefix(out.String(), logged); after != "" {
		t.Errorf("logged after Shutdown: %s", after)
	}
}

// TestDefaultKindsAreCore: without Options.ResourceFor the recorder names
// core/v1 objects without TypeMeta, and objects of other kinds only when
// their TypeMeta says what they are.
func TestDefaultKindsAreCore(t *testing.T) {
	var out testkit.Buffer
	fc := fake.New()
	b := NewBroadcaster(fc, Options{Logger: slog.New(slog.NewTextHandler(&out, nil))})
	b.Start()
	defer b.Shutdown()
	rec := b.NewRecorder(source)
	rec.Event(daemonSet("unnamed"), corev1.EventTypeNormal, "R", "m")
	testkit.EventuallyTrue(t, wait, "the unnamed DaemonSet's event refused in the log", func() bool {
		return out.Contains("Could not construct reference")
	})
	typed := daemonSet("typed")
	typed.APIVersion, typed.Kind = "apps/v1", "DaemonSet"
	rec.Event(typed, corev1.EventTypeNormal, "R", "m")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod", UID: "uid-pod", ResourceVersion: "7"}}
	rec.Event(pod, corev1.EventTypeNormal, "R", "m")
	testkit.EventuallyTrue(t, wait, "events written", func() bool {
		return len(events(t, fc, "ns", "typed")) == 1 && len(events(t, fc, "ns", "pod")) == 1
	})
	want := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "ns", Name: "pod", UID: "uid-pod", ResourceVersion: "7"}
	if ev := events(t, fc, "ns", "pod")[0]; ev.InvolvedObject != want {
		t.Errorf("pod event's object %+v, want %+v", ev.InvolvedObject, want)
	}
	if ev := events(t, fc, "ns", "typed")[0]; ev.InvolvedObject.Kind != "DaemonSet" || ev.InvolvedObject.APIVersion != "apps/v1" {
		t.Errorf("typed DaemonSet event's object %+v", ev.InvolvedObject)
	}
	if n := len(events(t, fc, "ns", "unnamed")); n != 0 {
		t.Errorf("%d events about the unnamed DaemonSet", n)
	}
}
