package store

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/resources"
)

func newEvent(ns, name, pod, reason string) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: name},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod},
		Reason:         reason,
		Message:        "message of " + name,
	}
}

// TestEventsCacheKeepsNoObjects: the Events watch cache holds selector data
// only, yet List (few and many matches, field selectors, namespaces) and
// Watch (from 0, live, resumed, deletions with their last state) serve the
// stored objects with their resourceVersions, as for any other resource.
func TestEventsCacheKeepsNoObjects(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	start, err := s.currentRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	onB := Selector{Field: mustField(t, "involvedObject.name=b")}
	live, err := s.Watch(ctx, resources.Events, "ns1", 0, onB)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Stop()
	reasonB := Selector{Field: mustField(t, "reason=B")}
	leaving, err := s.Watch(ctx, resources.Events, "", 0, reasonB) // sees b.1 stop matching
	if err != nil {
		t.Fatal(err)
	}
	defer leaving.Stop()

	many := fetchTxnOps + 36 // read by a range read, not one transaction
	rvs := map[string]int64{}
	for i := range many {
		name := fmt.Sprintf("a.%03d", i)
		rvs[name] = rvOf(t, mustCreate(t, s, resources.Events, newEvent("ns1", name, "a", "A")))
	}
	b := mustCreate(t, s, resources.Events, newEvent("ns1", "b.1", "b", "B"))
	mustCreate(t, s, resources.Events, newEvent("ns2", "c.1", "c", "C"))

	all, _, err := s.List(ctx, resources.Events, "ns1", Selector{})
	if err != nil || len(all) != many+1 {
		t.Fatalf("List ns1: %v, %d items, want %d", err, len(all), many+1)
	}
	for _, o := range all[:many] {
		ev := o.(*corev1.Event)
		if ev.Reason != "A" || ev.Message != "message of "+ev.Name || rvOf(t, ev) != rvs[ev.Name] || ev.Kind != "Event" {
			t.Fatalf("listed %s: reason %q message %q rv %s kind %q", ev.Name, ev.Reason, ev.Message, ev.ResourceVersion, ev.Kind)
		}
	}
	few, _, err := s.List(ctx, resources.Events, "", onB)
	if err != nil || len(few) != 1 || few[0].(*corev1.Event).Reason != "B" || rvOf(t, few[0]) != rvOf(t, b) {
		t.Fatalf("List involvedObject.name=b: %v %v", err, few)
	}
	if other, _, err := s.List(ctx, resources.Events, "ns2", Selector{}); err != nil || len(other) != 1 || other[0].GetName() != "c.1" {
		t.Fatalf("List ns2: %v %v", err, other)
	}

	c := s.caches[resources.Events.Name]
	c.mu.RLock()
	for k, e := range c.objects {
		if e.obj != nil {
			t.Errorf("the events cache holds the object of %s", k)
		}
	}
	c.mu.RUnlock()

	upd := b.(*corev1.Event).DeepCopy()
	upd.Reason = "B2"
	b2, err := s.Update(ctx, resources.Events, upd)
	if err != nil {
		t.Fatal(err)
	}
	del, err := s.Delete(ctx, resources.Events, "ns1", "b.1", nil)
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := s.Watch(ctx, resources.Events, "ns1", start, onB)
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Stop()
	for name, w := range map[string]watch.Interface{"live": live, "resumed": resumed} {
		for i, wnt := range []struct {
			typ    watch.EventType
			reason string
			rv     int64
		}{{watch.Added, "B", rvOf(t, b)}, {watch.Modified, "B2", rvOf(t, b2)}, {watch.Deleted, "B2", rvOf(t, del)}} {
			e := next(t, w)
			ev := e.Object.(*corev1.Event)
			if e.Type != wnt.typ || ev.Reason != wnt.reason || rvOf(t, ev) != wnt.rv {
				t.Errorf("%s event %d = %s %q rv %s, want %s %q rv %d", name, i, e.Type, ev.Reason, ev.ResourceVersion, wnt.typ, wnt.reason, wnt.rv)
			}
		}
		expectNone(t, s, resources.Events, w)
	}
	// Stopping to match arrives as DELETED with the state the watcher knew.
	leftAt, err := s.Watch(ctx, resources.Events, "", start, reasonB)
	if err != nil {
		t.Fatal(err)
	}
	defer leftAt.Stop()
	for name, w := range map[string]watch.Interface{"live": leaving, "resumed": leftAt} {
		for i, wnt := range []struct {
			typ watch.EventType
			rv  int64
		}{{watch.Added, rvOf(t, b)}, {watch.Deleted, rvOf(t, b2)}} {
			e := next(t, w)
			ev := e.Object.(*corev1.Event)
			if e.Type != wnt.typ || ev.Reason != "B" || rvOf(t, ev) != wnt.rv {
				t.Errorf("reason=B %s event %d = %s %q rv %s, want %s \"B\" rv %d", name, i, e.Type, ev.Reason, ev.ResourceVersion, wnt.typ, wnt.rv)
			}
		}
		expectNone(t, s, resources.Events, w)
	}

	w0, err := s.Watch(ctx, resources.Events, "ns1", 0, Selector{Field: mustField(t, "involvedObject.name=a")})
	if err != nil {
		t.Fatal(err)
	}
	defer w0.Stop()
	for i := range many {
		e := next(t, w0)
		ev := e.Object.(*corev1.Event)
		if want := fmt.Sprintf("a.%03d", i); e.Type != watch.Added || ev.Name != want || ev.Reason != "A" || rvOf(t, ev) != rvs[want] {
			t.Fatalf("initial event %d = %s %s %q, want ADDED %s", i, e.Type, ev.Name, ev.Reason, want)
		}
	}
	expectNone(t, s, resources.Events, w0)
}
