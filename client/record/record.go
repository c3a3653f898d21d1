// Package record records core/v1 Events through a client.Interface the way
// Kubernetes' components do (client-go's tools/record, reproduced here
// without client-go's REST machinery, so that the node agent's binary does
// not link it): recording queues an event without blocking the caller
// (up to 1,000, then drops) and one goroutine writes them; the same event
// again raises the count of the Event already written (a strategic merge
// patch of count, lastTimestamp and message); past ten events about an
// object with the same reason but different messages in ten minutes,
// further ones are folded into one "(combined from similar events)" Event;
// a source may write a burst of 25 events about an object, then one every
// five minutes. Events land in the involved object's namespace, "default"
// for cluster-scoped objects, and carry source, reportingComponent and
// reportingInstance, as in Kubernetes, so kubectl describe shows them as it
// shows kubelet's and the controllers'.
//
// The DaemonSet and node lifecycle controllers and the node agent each own
// one Broadcaster:
//
//	b := record.NewBroadcaster(api, record.Options{Logger: log, ResourceFor: resources.ForObject})
//	rec := b.NewRecorder(corev1.EventSource{Component: "daemonset-controller"})
//	b.Start()
//	defer b.Shutdown()
//	rec.Eventf(ds, corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: %s", name)
//
// A recorder may be made before Start; events recorded while the
// Broadcaster is not started are dropped.
package record

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	resources "github.com/everynode/everynode/resources/core"
)

// EventRecorder records events about an object: a typed object of
// resources (its kind and apiVersion are found from its Go type when its
// TypeMeta is empty, as in informer caches: see Options.ResourceFor), or a *corev1.ObjectReference
// to name a part of one, e.g. a container by FieldPath. eventtype is
// corev1.EventTypeNormal or corev1.EventTypeWarning. client-go's
// record.EventRecorder has the same methods, so its FakeRecorder serves
// tests. The methods never block and are safe for concurrent use.
type EventRecorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
	AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any)
}

// Kubernetes' settings for writing events.
const (
	// DefaultCallTimeout bounds each API call writing an event.
	DefaultCallTimeout = 10 * time.Second
	// DefaultRetryDelay separates the attempts to write an event after a
	// failure that is not the API's answer (the first wait is a random
	// part of it).
	DefaultRetryDelay = 10 * time.Second
	// maxTries bounds the attempts to write one event.
	maxTries = 12
	// maxQueued events wait to be written; more are dropped.
	maxQueued = 1000
)

// EventClient is the part of the API the recorder writes events with;
// client.Interface implements it.
type EventClient interface {
	Create(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error)
	Patch(ctx context.Context, r *resources.Resource, namespace, name string, pt types.PatchType, data []byte, opts client.WriteOptions, subresource string) (client.Object, error)
}

// Options configures a Broadcaster. The zero value is Kubernetes' defaults.
type Options struct {
	// Logger receives the messages about events that could not be
	// written; nil discards them.
	Logger *slog.Logger
	// Clock drives the spam filter and the aggregation window; nil is the
	// real clock. (Event timestamps and names always come from the real
	// clock, as in client-go's recorder: a fake clock that stands still
	// would give two events the same name.)
	Clock clock.PassiveClock
	// CallTimeout bounds each API call; 0 means DefaultCallTimeout.
	CallTimeout time.Duration
	// RetryDelay separates the attempts to write an event the API did not
	// answer; 0 means DefaultRetryDelay.
	RetryDelay time.Duration
	// Paused, when set and true, drops events instead of writing them
	// (logged at debug): the node agent pauses while the API server is
	// unreachable rather than queueing writes behind retries.
	Paused func() bool
	// ResourceFor names the kind and apiVersion of an object whose
	// TypeMeta is empty, by its Go type; nil knows the core/v1 kinds alone
	// (resources/core.ForObject, all the node agent records events about).
	// Controllers pass resources.ForObject.
	ResourceFor func(runtime.Object) *resources.Resource
}

// Broadcaster sends the events of its recorders to the API. Create it with
// NewBroadcaster; its goroutine runs between Start and Shutdown.
type Broadcaster struct {
	api   EventClient
	log   *slog.Logger
	clock clock.PassiveClock
	opts  Options

	mu      sync.RWMutex
	queue   chan *corev1.Event // nil unless started
	cancel  context.CancelFunc
	stopped chan struct{} // closed when the writer goroutine has returned
}

// NewBroadcaster returns a Broadcaster writing to api. Nothing runs until Start.
func NewBroadcaster(api EventClient, o Options) *Broadcaster {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = DefaultRetryDelay
	}
	if o.ResourceFor == nil {
		o.ResourceFor = resources.ForObject
	}
	return &Broadcaster{api: api, log: o.Logger, clock: o.Clock, opts: o}
}

// NewRecorder returns a recorder whose events name source (Component, and
// Host for a node's component). It may be called before Start and kept
// across Start and Shutdown.
func (b *Broadcaster) NewRecorder(source corev1.EventSource) EventRecorder {
	return &recorder{b: b, source: source}
}

// Start starts the goroutine that writes events, with fresh caches. It does
// nothing when already started. Shutdown stops it.
func (b *Broadcaster) Start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.queue != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{b: b, ctx: ctx, queue: make(chan *corev1.Event, maxQueued), corr: newCorrelator(b.clock)}
	b.queue, b.cancel, b.stopped = w.queue, cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		w.run()
	}(b.stopped)
}

// Shutdown stops writing events: those still queued are dropped and an API
// call under way is cancelled. It returns once the writer goroutine has
// ended. Safe to call more than once, and without Start.
func (b *Broadcaster) Shutdown() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.queue == nil {
		return
	}
	b.cancel()
	<-b.stopped
	b.queue, b.cancel, b.stopped = nil, nil, nil
}

// Run starts the Broadcaster, waits for ctx to end and shuts it down.
func (b *Broadcaster) Run(ctx context.Context) {
	b.Start()
	<-ctx.Done()
	b.Shutdown()
}

// enqueue hands ev to the writer without blocking.
func (b *Broadcaster) enqueue(ev *corev1.Event) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.queue == nil {
		b.log.Debug("event dropped: recorder not started", "reason", ev.Reason, "source", ev.Source.Component)
		return
	}
	select {
	case b.queue <- ev:
	default:
		b.log.Error("Unable to record event: too many queued events, dropped event", "reason", ev.Reason, "object", objectKey(ev))
	}
}

// recorder makes events for its source and queues them.
type recorder struct {
	b      *Broadcaster
	source corev1.EventSource
}

func (r *recorder) Event(obj runtime.Object, eventtype, reason, message string) {
	r.record(obj, nil, eventtype, reason, message)
}

func (r *recorder) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	r.record(obj, nil, eventtype, reason, fmt.Sprintf(format, args...))
}

func (r *recorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, format string, args ...any) {
	r.record(obj, annotations, eventtype, reason, fmt.Sprintf(format, args...))
}

func (r *recorder) record(obj runtime.Object, annotations map[string]string, eventtype, reason, message string) {
	ref, err := reference(obj, r.b.opts.ResourceFor)
	if err != nil {
		r.b.log.Error("Could not construct reference, will not report event", "err", err, "type", eventtype, "reason", reason, "message", message)
		return
	}
	if eventtype != corev1.EventTypeNormal && eventtype != corev1.EventTypeWarning {
		r.b.log.Error("Unsupported event type", "type", eventtype, "reason", reason)
		return
	}
	t := metav1.Now()
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	r.b.enqueue(&corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: eventName(ref.Name, t.Time), Namespace: ns, Annotations: annotations},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      t,
		LastTimestamp:       t,
		Count:               1,
		Type:                eventtype,
		Source:              r.source,
		ReportingController: r.source.Component,
		ReportingInstance:   r.source.Host,
	})
}

// reference names obj as an event's involvedObject, as client-go's
// reference.GetReference: a *corev1.ObjectReference as it is, else the
// object's kind, apiVersion (from its TypeMeta, else from its Go type),
// namespace, name, uid and resourceVersion.
func reference(obj runtime.Object, resourceFor func(runtime.Object) *resources.Resource) (*corev1.ObjectReference, error) {
	if obj == nil {
		return nil, errors.New("nil object")
	}
	if ref, ok := obj.(*corev1.ObjectReference); ok {
		cp := *ref
		return &cp, nil
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Kind == "" || gvk.Version == "" {
		r := resourceFor(obj)
		if r == nil {
			return nil, fmt.Errorf("%T is not a served resource", obj)
		}
		gvk = r.GVK()
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return &corev1.ObjectReference{Kind: gvk.Kind, APIVersion: gvk.GroupVersion().String(), Name: m.GetName(),
		Namespace: m.GetNamespace(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()}, nil
}

// writer is the goroutine of one Start: it correlates the queued events and
// writes them, one at a time, in order.
type writer struct {
	b     *Broadcaster
	ctx   context.Context // ends at Shutdown
	queue chan *corev1.Event
	corr  *correlator
}

func (w *writer) run() {
	for {
		select {
		case <-w.ctx.Done():
			return
		case ev := <-w.queue:
			w.write(ev)
		}
	}
}

// write writes one event, retrying failures the API did not answer up to
// maxTries times in all.
func (w *writer) write(ev *corev1.Event) {
	log := w.b.log
	res, err := w.corr.correlate(ev)
	if err != nil {
		log.Error("Event correlation failed", "err", err)
	}
	if res.Skip {
		return
	}
	for tries := 1; ; tries++ {
		if w.try(res.Event, res.Patch) {
			return
		}
		if tries >= maxTries {
			log.Error("Unable to write event (retry limit exceeded!)", "reason", ev.Reason, "object", objectKey(ev))
			return
		}
		delay := w.b.opts.RetryDelay
		if tries == 1 {
			delay = time.Duration(float64(delay) * rand.Float64())
		}
		t := time.NewTimer(delay)
		select {
		case <-w.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// try makes one attempt: a patch when ev raises the count of an Event
// already written (a create when that Event is gone), else a create. It
// reports whether to stop: written, dropped, or refused by the API.
func (w *writer) try(ev *corev1.Event, patch []byte) bool {
	if w.ctx.Err() != nil {
		return true
	}
	if p := w.b.opts.Paused; p != nil && p() {
		// Counted as written: a later similar event that finds it
		// missing is created afresh.
		w.b.log.Debug("event dropped: API unreachable", "reason", ev.Reason, "object", objectKey(ev))
		w.corr.written(ev)
		return true
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.b.opts.CallTimeout)
	defer cancel()
	var o client.Object
	var err error
	if ev.Count > 1 {
		o, err = w.b.api.Patch(ctx, resources.Events, ev.Namespace, ev.Name, types.StrategicMergePatchType, patch, client.WriteOptions{}, "")
	}
	if ev.Count <= 1 || isNotFound(err) {
		cp := *ev
		cp.ResourceVersion = ""
		o, err = w.b.api.Create(ctx, &cp, client.WriteOptions{})
	}
	if w.ctx.Err() != nil {
		return true // cancelled by Shutdown: dropped
	}
	if err == nil {
		written, ok := o.(*corev1.Event)
		if !ok {
			w.b.log.Error("Server returned no event (will not retry!)", "type", fmt.Sprintf("%T", o))
			return true
		}
		w.corr.written(written)
		return true
	}
	var status *apierrors.StatusError
	if errors.As(err, &status) {
		if apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			w.b.log.Debug("Server rejected event (will not retry!)", "reason", ev.Reason, "object", objectKey(ev), "err", err)
		} else {
			w.b.log.Error("Server rejected event (will not retry!)", "reason", ev.Reason, "object", objectKey(ev), "err", err)
		}
		return true
	}
	w.b.log.Error("Unable to write event (may retry after sleeping)", "reason", ev.Reason, "object", objectKey(ev), "err", err)
	return false
}

// isNotFound reports an API answer of 404, as client-go's recorder
// checks it before creating an Event its patch did not find.
func isNotFound(err error) bool {
	var status *apierrors.StatusError
	return errors.As(err, &status) && status.Status().Code == http.StatusNotFound
}

func objectKey(ev *corev1.Event) string {
	return ev.InvolvedObject.Namespace + "/" + ev.InvolvedObject.Name
}
