package record

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
)

// The correlator's settings: Kubernetes' defaults, which no caller changes.
const (
	lruCacheEntries   = 4096        // keys remembered by each of the three caches
	aggregateMaxKinds = 10          // distinct messages before similar events are combined
	aggregateInterval = 600         // seconds a group of similar events stays open
	spamBurst         = 25          // events about an object a source writes at once
	spamQPS           = 1.0 / 300.0 // then one per five minutes
	combinedPrefix    = "(combined from similar events): "
)

// correlator decides, for each event a recorder emits, whether it is
// written, as what, and how: it is client-go's EventCorrelator
// (k8s.io/client-go/tools/record), which the node agent cannot link without
// the REST client, the strategic-merge machinery and the OpenAPI and
// protobuf packages behind them (docs/agent.md, "Footprint"). The same
// sequence of events and clock readings gives the same results as
// client-go's, field for field and byte for byte (TestCorrelatorMatchesClientGo):
//
//   - aggregation: events about an object from one source with the same
//     type and reason but different messages are counted; from the tenth
//     distinct message within ten minutes on they become one event whose
//     message is prefixed "(combined from similar events): ";
//   - observation: an event seen before (same object, source, type, reason
//     and message) is written as a patch of the earlier one raising its
//     count;
//   - spam filter: a source writes a burst of 25 events about an object,
//     then one every five minutes (the count still counts every one).
//
// Not safe for concurrent use: the broadcaster's one writer owns it.
type correlator struct {
	clock      clock.PassiveClock
	aggregates *lru.Cache // aggregate key → aggregateRecord
	observed   *lru.Cache // event key → observation
	spam       *lru.Cache // spam key → flowcontrol.PassiveRateLimiter
}

func newCorrelator(clk clock.PassiveClock) *correlator {
	return &correlator{clock: clk, aggregates: lru.New(lruCacheEntries), observed: lru.New(lruCacheEntries), spam: lru.New(lruCacheEntries)}
}

// correlation is what to do with one event: skip it, or write event —
// created, or patched with patch when its count is above one.
type correlation struct {
	event *corev1.Event
	patch []byte
	skip  bool
}

type aggregateRecord struct {
	messages map[string]struct{}
	last     time.Time
}

type observation struct {
	count           int32
	firstTimestamp  metav1.Time
	name            string
	resourceVersion string
}

// correlate returns what to write for ev; ev is not modified.
func (c *correlator) correlate(ev *corev1.Event) correlation {
	agg, key := c.aggregate(ev)
	obs, patch := c.observe(agg, key)
	if c.spammed(obs) {
		return correlation{skip: true}
	}
	return correlation{event: obs, patch: patch}
}

// written records the event as the API stored it, so that the next similar
// event patches it.
func (c *correlator) written(ev *corev1.Event) {
	c.observed.Add(eventKey(ev), observation{count: ev.Count, firstTimestamp: ev.FirstTimestamp, name: ev.Name, resourceVersion: ev.ResourceVersion})
}

// aggregate returns ev, or once its group has seen aggregateMaxKinds
// distinct messages a new combined event, with the key it is observed by.
func (c *correlator) aggregate(ev *corev1.Event) (*corev1.Event, string) {
	now := metav1.NewTime(c.clock.Now())
	aggKey := join(ev.Source.Component, ev.Source.Host, ev.InvolvedObject.Kind, ev.InvolvedObject.Namespace,
		ev.InvolvedObject.Name, string(ev.InvolvedObject.UID), ev.InvolvedObject.APIVersion, ev.Type, ev.Reason,
		ev.ReportingController, ev.ReportingInstance)
	var rec aggregateRecord
	if v, ok := c.aggregates.Get(aggKey); ok {
		rec = v.(aggregateRecord)
	}
	if now.Sub(rec.last) > aggregateInterval*time.Second {
		rec = aggregateRecord{messages: map[string]struct{}{}}
	}
	rec.messages[ev.Message] = struct{}{}
	rec.last = now.Time
	c.aggregates.Add(aggKey, rec)
	if len(rec.messages) < aggregateMaxKinds {
		return ev, eventKey(ev)
	}
	for m := range rec.messages { // client-go pops an arbitrary one, keeping the group at the limit
		delete(rec.messages, m)
		break
	}
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%v.%x", ev.InvolvedObject.Name, now.UnixNano()), Namespace: ev.Namespace},
		Count:          1,
		FirstTimestamp: now,
		InvolvedObject: ev.InvolvedObject,
		LastTimestamp:  now,
		Message:        combinedPrefix + ev.Message,
		Type:           ev.Type,
		Reason:         ev.Reason,
		Source:         ev.Source,
	}, aggKey
}

// observe returns a copy of ev, as a further occurrence of the event last
// observed under key if there is one, with the patch that records it.
func (c *correlator) observe(ev *corev1.Event, key string) (*corev1.Event, []byte) {
	out := *ev
	var patch []byte
	if v, ok := c.observed.Get(key); ok && v.(observation).count > 0 {
		last := v.(observation)
		out.Name, out.ResourceVersion, out.FirstTimestamp, out.Count = last.name, last.resourceVersion, last.firstTimestamp, last.count+1
		patch = countPatch(&out)
	}
	c.observed.Add(key, observation{count: out.Count, firstTimestamp: out.FirstTimestamp, name: out.Name, resourceVersion: out.ResourceVersion})
	return &out, patch
}

// countPatch is the strategic merge patch client-go computes for a further
// occurrence: the difference between ev and ev with no count, an epoch
// lastTimestamp and no message, which is those three fields where they
// differ (an Event has no lists or maps among them, so the two-way merge
// patch is the plain difference, keys in order).
func countPatch(ev *corev1.Event) []byte {
	fields := map[string]any{}
	if ev.Count != 0 {
		fields["count"] = ev.Count
	}
	epoch := metav1.NewTime(time.Unix(0, 0))
	if ts, _ := ev.LastTimestamp.MarshalJSON(); string(ts) != `"`+epoch.UTC().Format(time.RFC3339)+`"` {
		fields["lastTimestamp"] = json.RawMessage(ts)
	}
	if ev.Message != "" {
		// client-go's patch goes through JSON twice: each byte that is not
		// UTF-8 becomes U+FFFD, written as itself, not escaped.
		fields["message"] = strings.Map(func(r rune) rune { return r }, ev.Message)
	}
	b, _ := json.Marshal(fields) // a map of an int, a timestamp and a string
	return b
}

// spammed takes a token from the bucket of ev's source and object and
// reports whether there was none.
func (c *correlator) spammed(ev *corev1.Event) bool {
	key := join(ev.Source.Component, ev.Source.Host, ev.InvolvedObject.Kind, ev.InvolvedObject.Namespace,
		ev.InvolvedObject.Name, string(ev.InvolvedObject.UID), ev.InvolvedObject.APIVersion, ev.Type)
	var bucket flowcontrol.PassiveRateLimiter
	if v, ok := c.spam.Get(key); ok {
		bucket = v.(flowcontrol.PassiveRateLimiter)
	} else {
		bucket = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(spamQPS, spamBurst, c.clock)
	}
	spammed := !bucket.TryAccept()
	c.spam.Add(key, bucket)
	return spammed
}

// eventKey identifies an event up to its occurrence: object (and part),
// source, type, reason and message.
func eventKey(ev *corev1.Event) string {
	return join(ev.Source.Component, ev.Source.Host, ev.InvolvedObject.Kind, ev.InvolvedObject.Namespace,
		ev.InvolvedObject.Name, ev.InvolvedObject.FieldPath, string(ev.InvolvedObject.UID), ev.InvolvedObject.APIVersion,
		ev.Type, ev.Reason, ev.Message)
}

// join concatenates the parts without a separator, as client-go's keys do.
func join(parts ...string) string { return strings.Join(parts, "") }
