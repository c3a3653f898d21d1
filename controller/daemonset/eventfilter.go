package daemonset

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Kubernetes' event recorder limits each (source, involved object) pair to a
// burst of 25 events, refilled at one every 5 minutes
// (client-go/tools/record: EventSourceObjectSpamFilter). A DaemonSet
// creating a pod on each of 1,000 nodes therefore records 25
// "SuccessfulCreate" events, not 1,000; this recorder does the same.
const (
	spamBurst     = 25
	spamRefill    = 5 * time.Minute
	spamMaxBucket = 4096 // objects tracked before the fullest buckets are forgotten
)

// spamFilter is a token bucket per event source and involved object. Not
// safe for concurrent use: the recorder holds its lock around allow.
type spamFilter struct {
	buckets map[string]*spamBucket
}

type spamBucket struct {
	tokens float64
	last   time.Time
}

func newSpamFilter() *spamFilter { return &spamFilter{buckets: map[string]*spamBucket{}} }

// spamKey identifies the event's source and involved object, as client-go's
// getSpamKey does.
func spamKey(ev *corev1.Event) string {
	o := ev.InvolvedObject
	return ev.Source.Component + "/" + ev.Source.Host + "/" + o.APIVersion + "/" + o.Kind + "/" +
		o.Namespace + "/" + o.Name + "/" + string(o.UID)
}

// allow takes a token from the event's bucket at now; false means drop it.
func (f *spamFilter) allow(ev *corev1.Event, now time.Time) bool {
	key := spamKey(ev)
	b, ok := f.buckets[key]
	if !ok {
		if len(f.buckets) >= spamMaxBucket {
			f.forgetFull(now)
		}
		b = &spamBucket{tokens: spamBurst, last: now}
		f.buckets[key] = b
	}
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (b *spamBucket) refill(now time.Time) {
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(spamBurst, b.tokens+float64(elapsed)/float64(spamRefill))
		b.last = now
	}
}

// forgetFull drops the buckets that have refilled completely (forgetting
// them changes nothing); if every bucket is still draining, it drops them
// all, as client-go's LRU would drop the oldest.
func (f *spamFilter) forgetFull(now time.Time) {
	for k, b := range f.buckets {
		if b.refill(now); b.tokens >= spamBurst {
			delete(f.buckets, k)
		}
	}
	if len(f.buckets) >= spamMaxBucket {
		clear(f.buckets)
	}
}
