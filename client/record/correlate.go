package record

import (
	"container/list"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// Kubernetes' settings for folding and limiting events (client-go's
// tools/record, whose behaviour this file reproduces).
const (
	// cacheEntries bounds each of the correlator's three caches.
	cacheEntries = 4096
	// aggregateMaxEvents distinct messages about an object with the same
	// reason, within aggregateInterval, turn further ones into one
	// "(combined from similar events)" Event.
	aggregateMaxEvents = 10
	aggregateInterval  = 600 * time.Second
	// spamBurst events about an object per source, then one per
	// spamRefill.
	spamBurst  = 25
	spamRefill = 5 * time.Minute

	combinedPrefix = "(combined from similar events): "
)

// eventKey identifies an event up to its count and timestamps: the same
// key again raises the count of the Event already written.
func eventKey(ev *corev1.Event) string {
	o := ev.InvolvedObject
	return strings.Join([]string{ev.Source.Component, ev.Source.Host, o.Kind, o.Namespace, o.Name, o.FieldPath,
		string(o.UID), o.APIVersion, ev.Type, ev.Reason, ev.Message}, "")
}

// spamKey is what the spam filter counts per: a source and an object.
func spamKey(ev *corev1.Event) string {
	o := ev.InvolvedObject
	return strings.Join([]string{ev.Source.Component, ev.Source.Host, o.Kind, o.Namespace, o.Name,
		string(o.UID), o.APIVersion, ev.Type}, "")
}

// aggregateKey groups events that differ only by message.
func aggregateKey(ev *corev1.Event) string {
	o := ev.InvolvedObject
	return strings.Join([]string{ev.Source.Component, ev.Source.Host, o.Kind, o.Namespace, o.Name,
		string(o.UID), o.APIVersion, ev.Type, ev.Reason, ev.ReportingController, ev.ReportingInstance}, "")
}

// correlated is what to write for an event: Event itself, with Patch (a
// strategic merge patch of count, lastTimestamp and message) when it
// raises the count of an Event already written; Skip when the spam filter
// drops it.
type correlated struct {
	Event *corev1.Event
	Patch []byte
	Skip  bool
}

// correlator folds similar events and limits their rate, as client-go's
// EventCorrelator: aggregate, then observe (count), then filter. Only the
// broadcaster's writer goroutine calls it.
type correlator struct {
	clock      clock.PassiveClock
	aggregates *lru[aggregateRecord]
	observed   *lru[observation]
	buckets    *lru[*tokenBucket]
}

type aggregateRecord struct {
	messages map[string]struct{}
	last     time.Time
}

// observation is the Event last written for a key.
type observation struct {
	count           int32
	firstTimestamp  metav1.Time
	name            string
	resourceVersion string
}

func newCorrelator(clk clock.PassiveClock) *correlator {
	return &correlator{clock: clk, aggregates: newLRU[aggregateRecord](cacheEntries),
		observed: newLRU[observation](cacheEntries), buckets: newLRU[*tokenBucket](cacheEntries)}
}

func (c *correlator) correlate(ev *corev1.Event) (correlated, error) {
	agg, key := c.aggregate(ev)
	obs, patch, err := c.observe(agg, key)
	if !c.allow(obs) {
		return correlated{Skip: true}, nil
	}
	return correlated{Event: obs, Patch: patch}, err
}

// aggregate returns ev, or past aggregateMaxEvents distinct messages a new
// "(combined from similar events)" Event, and the key to count it under.
func (c *correlator) aggregate(ev *corev1.Event) (*corev1.Event, string) {
	now := metav1.NewTime(c.clock.Now())
	akey := aggregateKey(ev)
	rec, _ := c.aggregates.get(akey)
	if rec.messages == nil || now.Sub(rec.last) > aggregateInterval {
		rec = aggregateRecord{messages: map[string]struct{}{}}
	}
	rec.messages[ev.Message] = struct{}{}
	rec.last = now.Time
	c.aggregates.add(akey, rec)
	if len(rec.messages) < aggregateMaxEvents {
		return ev, eventKey(ev)
	}
	for m := range rec.messages { // forget one, as client-go's PopAny
		delete(rec.messages, m)
		break
	}
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: eventName(ev.InvolvedObject.Name, now.Time), Namespace: ev.Namespace},
		Count:          1,
		FirstTimestamp: now,
		InvolvedObject: ev.InvolvedObject,
		LastTimestamp:  now,
		Message:        combinedPrefix + ev.Message,
		Type:           ev.Type,
		Reason:         ev.Reason,
		Source:         ev.Source,
	}, akey
}

// countPatch is the strategic merge patch that raises an Event's count.
type countPatch struct {
	Count         int32       `json:"count"`
	LastTimestamp metav1.Time `json:"lastTimestamp"`
	Message       string      `json:"message"`
}

// observe returns a copy of ev that, when key was written before, names
// that Event with its count raised, plus the patch that does so.
func (c *correlator) observe(ev *corev1.Event, key string) (*corev1.Event, []byte, error) {
	out := *ev
	var patch []byte
	var err error
	if last, ok := c.observed.get(key); ok && last.count > 0 {
		out.Name = last.name
		out.ResourceVersion = last.resourceVersion
		out.FirstTimestamp = last.firstTimestamp
		out.Count = last.count + 1
		patch, err = json.Marshal(countPatch{Count: out.Count, LastTimestamp: out.LastTimestamp, Message: out.Message})
		if err != nil {
			err = fmt.Errorf("event patch: %w", err)
		}
	}
	c.remember(key, &out)
	return &out, patch, err
}

// written records the Event the API returned.
func (c *correlator) written(ev *corev1.Event) { c.remember(eventKey(ev), ev) }

func (c *correlator) remember(key string, ev *corev1.Event) {
	c.observed.add(key, observation{count: ev.Count, firstTimestamp: ev.FirstTimestamp, name: ev.Name, resourceVersion: ev.ResourceVersion})
}

// allow takes a token from the event's source and object's bucket.
func (c *correlator) allow(ev *corev1.Event) bool {
	key := spamKey(ev)
	b, ok := c.buckets.get(key)
	if !ok {
		b = &tokenBucket{tokens: spamBurst}
	}
	c.buckets.add(key, b)
	return b.take(c.clock.Now())
}

// tokenBucket holds up to spamBurst tokens and gains one per spamRefill.
type tokenBucket struct {
	tokens float64
	last   time.Time
}

func (b *tokenBucket) take(now time.Time) bool {
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(spamBurst, b.tokens+float64(now.Sub(b.last))/float64(spamRefill))
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// eventName is Kubernetes' name for a new Event about the object named name.
func eventName(name string, t time.Time) string { return fmt.Sprintf("%v.%x", name, t.UnixNano()) }

// lru is a cache of at most size entries that forgets the least recently
// used first. It is not safe for concurrent use.
type lru[V any] struct {
	size  int
	order *list.List // of *lruEntry[V], most recent first
	items map[string]*list.Element
}

type lruEntry[V any] struct {
	key   string
	value V
}

func newLRU[V any](size int) *lru[V] {
	return &lru[V]{size: size, order: list.New(), items: map[string]*list.Element{}}
}

func (c *lru[V]) get(key string) (V, bool) {
	if e, ok := c.items[key]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*lruEntry[V]).value, true
	}
	var zero V
	return zero, false
}

func (c *lru[V]) add(key string, v V) {
	if e, ok := c.items[key]; ok {
		c.order.MoveToFront(e)
		e.Value.(*lruEntry[V]).value = v
		return
	}
	c.items[key] = c.order.PushFront(&lruEntry[V]{key: key, value: v})
	if c.order.Len() > c.size {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*lruEntry[V]).key)
	}
}
