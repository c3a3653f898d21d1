package daemonset

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/everynode/everynode/client/fake"
)

// TestRecorderSpamFilter: as Kubernetes' recorder, 25 events per object pass,
// then one per 5 minutes; another object has its own allowance.
func TestRecorderSpamFilter(t *testing.T) {
	clk := testingclock.NewFakeClock(testStart)
	r := newClientRecorder(fake.New(), clk, nil)
	ds, other := newDaemonSet("foo"), newDaemonSet("bar")
	other.UID = "uid-bar"
	record := func(n int, obj *appsv1.DaemonSet) {
		for range n {
			r.Eventf(context.Background(), obj, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created pod: p")
		}
	}
	record(100, ds)
	if got := len(r.queue); got != spamBurst {
		t.Fatalf("after 100 events of one DaemonSet: %d queued, want %d", got, spamBurst)
	}
	record(1, other)
	if got := len(r.queue); got != spamBurst+1 {
		t.Fatalf("another DaemonSet's event: %d queued, want %d", got, spamBurst+1)
	}
	clk.Step(spamRefill - time.Second)
	record(1, ds)
	if got := len(r.queue); got != spamBurst+1 {
		t.Fatalf("before a refill: %d queued, want %d", got, spamBurst+1)
	}
	clk.Step(time.Second)
	record(3, ds)
	if got := len(r.queue); got != spamBurst+2 {
		t.Fatalf("after one refill period: %d queued, want %d (one token back)", got, spamBurst+2)
	}
}

// TestSpamFilterForgetsFullBuckets: at spamMaxBucket objects, the buckets
// that have refilled are forgotten (that changes no decision); if none has,
// all are, so the map stays bounded either way.
func TestSpamFilterForgetsFullBuckets(t *testing.T) {
	ev := func(i int) *corev1.Event {
		return &corev1.Event{InvolvedObject: corev1.ObjectReference{Kind: "DaemonSet", Namespace: "default", Name: fmt.Sprint("ds-", i)}}
	}
	for _, tc := range []struct {
		name  string
		later time.Duration // when the last of the spamMaxBucket objects and then a new one come
		keep  int           // buckets kept of the first spamMaxBucket objects
	}{
		{"the others refilled", spamBurst * spamRefill, 1}, // the last one, drained, is kept
		{"none refilled", 0, 0},
	} {
		f := newSpamFilter()
		for i := range spamMaxBucket - 1 {
			f.allow(ev(i), testStart)
		}
		for range spamBurst { // the last object drains its bucket
			f.allow(ev(spamMaxBucket-1), testStart.Add(tc.later))
		}
		if len(f.buckets) != spamMaxBucket {
			t.Fatalf("%s: %d buckets, want %d", tc.name, len(f.buckets), spamMaxBucket)
		}
		if !f.allow(ev(spamMaxBucket), testStart.Add(tc.later)) {
			t.Fatalf("%s: a new object's first event refused", tc.name)
		}
		if len(f.buckets) != tc.keep+1 {
			t.Errorf("%s: %d buckets after the new object, want %d", tc.name, len(f.buckets), tc.keep+1)
		}
		if tc.keep == 1 && f.allow(ev(spamMaxBucket-1), testStart.Add(tc.later)) {
			t.Errorf("%s: the drained object's bucket was forgotten", tc.name)
		}
	}
}
