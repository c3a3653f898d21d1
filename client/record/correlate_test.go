package record

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kuberecord "k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

// eventStream draws events as recorders emit them, about a few objects
// from a few sources, with the clock moving on between them. It never
// repeats a message in a group of similar events that has been combined
// (ten distinct messages within ten minutes): there client-go drops an
// arbitrary message from the group, so what a repeat then does differs
// between two runs of client-go itself.
type eventStream struct {
	rng      *rand.Rand
	clk      *testingclock.FakeClock
	n        int
	combined map[string]time.Time // aggregate key of a combined group → its last event
	distinct map[string]map[string]bool
	last     map[string]time.Time
}

func (s *eventStream) next() *corev1.Event {
	s.n++
	pick := func(xs ...string) string { return xs[s.rng.IntN(len(xs))] }
	obj := pick("a", "b", "c")
	if s.rng.IntN(2) == 0 { // one of many objects: more keys than the caches hold
		obj = fmt.Sprintf("p%d", s.rng.IntN(100000))
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", obj, s.n), Namespace: "ns"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "ns", Name: obj,
			UID: types.UID("uid-" + obj), FieldPath: pick("", "spec.containers{app}")},
		Reason:  pick("BackOff", "Pulled"),
		Message: "message " + strconv.Itoa(s.rng.IntN(12)),
		Count:   1,
		Type:    pick(corev1.EventTypeNormal, corev1.EventTypeWarning),
		Source:  corev1.EventSource{Component: "kubelet", Host: pick("n1", "n2")},
	}
	ev.ReportingController, ev.ReportingInstance = ev.Source.Component, ev.Source.Host
	now := metav1.NewTime(s.clk.Now())
	ev.FirstTimestamp, ev.LastTimestamp = now, now
	switch s.rng.IntN(50) { // the corners of the count patch
	case 0:
		ev.Message = ""
	case 3:
		ev.Message = "bad \xff\xfe bytes & <tags>"
	case 1:
		ev.LastTimestamp = metav1.Time{}
	case 2:
		ev.LastTimestamp = metav1.NewTime(time.Unix(0, 0))
	}
	key := join(ev.Source.Component, ev.Source.Host, ev.InvolvedObject.Kind, ev.InvolvedObject.Namespace,
		ev.InvolvedObject.Name, string(ev.InvolvedObject.UID), ev.InvolvedObject.APIVersion, ev.Type, ev.Reason,
		ev.ReportingController, ev.ReportingInstance)
	if s.clk.Now().Sub(s.last[key]) > aggregateInterval*time.Second {
		s.distinct[key] = map[string]bool{}
		delete(s.combined, key)
	}
	if _, ok := s.combined[key]; ok {
		ev.Message = fmt.Sprintf("fresh message %d", s.n)
	}
	s.distinct[key][ev.Message] = true
	if len(s.distinct[key]) >= aggregateMaxKinds {
		s.combined[key] = s.clk.Now()
	}
	s.last[key] = s.clk.Now()
	return ev
}

// TestCorrelatorMatchesClientGo runs client-go's EventCorrelator and
// correlator side by side over the same long stream of events, clock
// readings and API writes (some failing, so not observed): every decision,
// every event field and every patch byte must be the same. The stream
// crosses the spam filter's burst and refill, the aggregation threshold and
// window, and the caches' eviction (half of the events are about one of
// 100,000 objects: more keys than the caches' 4,096).
func TestCorrelatorMatchesClientGo(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	theirs := kuberecord.NewEventCorrelatorWithOptions(kuberecord.CorrelatorOptions{Clock: clk})
	ours := newCorrelator(clk)
	s := &eventStream{rng: rand.New(rand.NewPCG(18, 2026)), clk: clk,
		combined: map[string]time.Time{}, distinct: map[string]map[string]bool{}, last: map[string]time.Time{}}
	var skipped, patched, combined int
	for i := range 10000 {
		ev := s.next()
		want, err := theirs.EventCorrelate(ev.DeepCopy())
		if err != nil {
			t.Fatalf("event %d: client-go: %v", i, err)
		}
		got := ours.correlate(ev)
		if got.skip != want.Skip {
			t.Fatalf("event %d (%+v): skip %v, client-go %v", i, ev, got.skip, want.Skip)
		}
		if want.Skip {
			skipped++
		} else {
			if !reflect.DeepEqual(got.event, want.Event) {
				t.Fatalf("event %d:\n got  %+v\n want %+v", i, got.event, want.Event)
			}
			if string(got.patch) != string(want.Patch) {
				t.Fatalf("event %d: patch %s, client-go %s", i, got.patch, want.Patch)
			}
			if got.patch != nil {
				patched++
			}
			if got.event.Message != ev.Message {
				combined++
			}
			if s.rng.IntN(5) > 0 { // written: the API gives it a resourceVersion
				stored := want.Event.DeepCopy()
				stored.ResourceVersion = strconv.Itoa(i)
				theirs.UpdateState(stored.DeepCopy())
				ours.written(stored.DeepCopy())
			}
		}
		switch r := s.rng.IntN(100); {
		case r < 80:
		case r < 99:
			clk.Step(time.Duration(s.rng.IntN(10)) * time.Second)
		default:
			clk.Step(time.Duration(300+s.rng.IntN(600)) * time.Second)
		}
	}
	// The stream is worth something only if it reached each behaviour.
	if skipped < 100 || patched < 1000 || combined < 10 {
		t.Errorf("stream too tame: %d skipped, %d patched, %d combined", skipped, patched, combined)
	}
	t.Logf("%d skipped by the spam filter, %d patches, %d combined", skipped, patched, combined)
}
