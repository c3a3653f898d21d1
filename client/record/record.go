// Package record records core/v1 Events through a client.Interface as
// Kubernetes' event recorder (k8s.io/client-go/tools/record) does: a
// recorder queues events without blocking its caller (up to 1,000; more are
// dropped and logged) and one goroutine writes them; the correlator folds
// similar events into one with a rising count and, past ten similar events
// about an object in ten minutes, into one "(combined from similar
// events)" event; its spam filter lets a source record a burst of 25
// events about an object, then one every five minutes. A write that fails
// for want of the API is retried up to 12 times, ten seconds apart; one
// the API refuses is dropped. Events land in the involved object's
// namespace, "default" for cluster-scoped objects, as in Kubernetes.
//
// The correlation is client-go's, re-expressed (correlate.go) and proven
// equal to it by a test that runs both: client-go's package links its REST
// client, the strategic-merge machinery and the OpenAPI and protobuf
// packages behind them, 4.5 MB of the lean agent binary and 2.3 MiB of
// an idle agent's memory for two calls (docs/agent.md, "Footprint").
//
// The DaemonSet and node lifecycle controllers and the node agent each own
// one Broadcaster:
//
//	b := record.NewBroadcaster(api, record.Options{Logger: log})
//	rec := b.NewRecorder(corev1.EventSource{Component: "daemonset-controller"})
//	b.Start()
//	defer b.Shutdown()
//	rec.Eventf(ds, corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: %s", name)
//
// A recorder may be made before Start; events recorded while the
// Broadcaster is not started are dropped.
//
// The package knows the core/v1 kinds alone (resources/core), all the node
// agent records events about, so that the lean agent binary does not link
// the other API groups; a controller that records events about other kinds
// passes resources.ForObject as Options.ResourceFor.
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

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/reference"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/ctxtime"
	resources "github.com/everynode/everynode/resources/core"
)

// EventRecorder records events about objects: a typed object
// Options.ResourceFor knows, or a *corev1.ObjectReference to name a part of
// one, e.g. a container by FieldPath. Its methods are client-go's
// record.EventRecorder's, so either satisfies the other's callers.
type EventRecorder interface {
	// Event records an event of eventtype (corev1.EventTypeNormal or
	// EventTypeWarning) about object.
	Event(object runtime.Object, eventtype, reason, message string)
	// Eventf is Event with a message formatted by fmt.Sprintf.
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
	// AnnotatedEventf is Eventf with annotations on the Event.
	AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any)
}

// DefaultCallTimeout bounds each API call writing an event.
const DefaultCallTimeout = 10 * time.Second

// EventClient is the part of the API the recorder writes events with;
// client.Interface implements it.
type EventClient interface {
	Create(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error)
	Patch(ctx context.Context, r *resources.Resource, namespace, name string, pt types.PatchType, data []byte, opts client.WriteOptions, subresource string) (client.Object, error)
}

// Options configures a Broadcaster. The zero value is Kubernetes' defaults.
type Options struct {
	// Logger receives the messages about events that could not be
	// recorded or written; nil discards them.
	Logger *slog.Logger
	// Clock drives the spam filter and the aggregation window; nil is the
	// real clock. (Event timestamps always come from the real clock, as in
	// client-go's recorder.)
	Clock clock.PassiveClock
	// CallTimeout bounds each API call; 0 means DefaultCallTimeout.
	CallTimeout time.Duration
	// Paused, when set and true, drops events instead of writing them
	// (logged at debug): the node agent pauses while the API server is
	// unreachable rather than queueing writes behind the retries.
	Paused func() bool
	// ResourceFor names the kind and apiVersion of an object whose
	// TypeMeta is empty (as in informer caches), by its Go type; nil knows
	// the core/v1 kinds alone (resources/core.ForObject). Controllers pass
	// resources.ForObject.
	ResourceFor func(runtime.Object) *resources.Resource
}

// Kubernetes' recorder's limits.
const (
	maxQueuedEvents  = 1000
	maxTriesPerEvent = 12
	retrySleep       = 10 * time.Second
)

// Broadcaster sends the events of its recorders to the API. Create it with
// NewBroadcaster; its goroutine runs between Start and Shutdown.
type Broadcaster struct {
	sink        *sink
	clock       clock.PassiveClock
	resourceFor func(runtime.Object) *resources.Resource
	log         *slog.Logger
	retrySleep  time.Duration // between tries of a failed write; the first is jittered

	mu     sync.RWMutex
	queue  chan *corev1.Event // nil unless started
	cancel context.CancelFunc
	done   chan struct{} // closed when the writer has returned
}

// NewBroadcaster returns a Broadcaster writing to api. Nothing runs until Start.
func NewBroadcaster(api EventClient, o Options) *Broadcaster {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := o.CallTimeout
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	clk := o.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	resourceFor := o.ResourceFor
	if resourceFor == nil {
		resourceFor = resources.ForObject
	}
	return &Broadcaster{
		sink:        &sink{api: api, timeout: timeout, paused: o.Paused, log: log},
		clock:       clk,
		resourceFor: resourceFor,
		log:         log,
		retrySleep:  retrySleep,
	}
}

// reference names obj as an event's involved object, as client-go's
// GetReference does, the kind of an object without TypeMeta from
// ResourceFor rather than from a scheme of every served kind.
func (b *Broadcaster) reference(obj runtime.Object) (*corev1.ObjectReference, error) {
	if _, ok := obj.(*corev1.ObjectReference); ok || obj == nil || !obj.GetObjectKind().GroupVersionKind().Empty() {
		return reference.GetReference(nil, obj)
	}
	r := b.resourceFor(obj)
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("no kind is known for the object's type %T", obj)
	}
	gvk := r.GVK()
	return &corev1.ObjectReference{
		Kind:            gvk.Kind,
		APIVersion:      gvk.GroupVersion().String(),
		Name:            acc.GetName(),
		Namespace:       acc.GetNamespace(),
		UID:             acc.GetUID(),
		ResourceVersion: acc.GetResourceVersion(),
	}, nil
}

// NewRecorder returns a recorder whose events name source (Component, and
// Host for a node's component). It may be called before Start and kept
// across Start and Shutdown.
func (b *Broadcaster) NewRecorder(source corev1.EventSource) EventRecorder {
	return &recorder{b: b, source: source}
}

// Start starts the goroutine that writes events, with a fresh correlator.
// It does nothing when already started. Shutdown stops it.
func (b *Broadcaster) Start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.queue != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.queue, b.cancel, b.done = make(chan *corev1.Event, maxQueuedEvents), cancel, make(chan struct{})
	w := &writer{sink: b.sink, corr: newCorrelator(b.clock), log: b.log, sleep: b.retrySleep}
	go func(queue <-chan *corev1.Event, done chan<- struct{}) {
		defer close(done)
		w.run(ctx, queue)
	}(b.queue, b.done)
}

// Shutdown stops writing events: those still queued are dropped and an API
// call under way is cancelled. It returns once the writer has returned, so
// nothing is logged after it. Safe to call more than once, and without
// Start.
func (b *Broadcaster) Shutdown() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.queue == nil {
		return
	}
	b.cancel()
	<-b.done
	b.queue, b.cancel, b.done = nil, nil, nil
}

// Run starts the Broadcaster, waits for ctx to end and shuts it down.
func (b *Broadcaster) Run(ctx context.Context) {
	b.Start()
	<-ctx.Done()
	b.Shutdown()
}

// recorder builds events as client-go's recorder does and queues them on
// the running broadcaster, or drops them when it is not running.
type recorder struct {
	b      *Broadcaster
	source corev1.EventSource
}

func (r *recorder) Event(obj runtime.Object, eventtype, reason, message string) {
	r.generate(obj, nil, eventtype, reason, message)
}

func (r *recorder) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	r.generate(obj, nil, eventtype, reason, fmt.Sprintf(format, args...))
}

func (r *recorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, format string, args ...any) {
	r.generate(obj, annotations, eventtype, reason, fmt.Sprintf(format, args...))
}

func (r *recorder) generate(obj runtime.Object, annotations map[string]string, eventtype, reason, message string) {
	b := r.b
	b.mu.RLock() // held while queueing: Shutdown waits for it, and no event reaches a stopped writer
	defer b.mu.RUnlock()
	if b.queue == nil {
		b.log.Debug("event dropped: recorder not started", "reason", reason, "source", r.source.Component)
		return
	}
	ref, err := b.reference(obj)
	if err != nil {
		b.log.Error("Could not construct reference, will not report event", "object", fmt.Sprintf("%T", obj),
			"eventType", eventtype, "reason", reason, "message", message, "err", err)
		return
	}
	if eventtype != corev1.EventTypeNormal && eventtype != corev1.EventTypeWarning {
		b.log.Error("Unsupported event type", "eventType", eventtype)
		return
	}
	now := metav1.Now()
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: eventName(ref.Name, now.UnixNano()), Namespace: ns, Annotations: annotations},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Type:                eventtype,
		Source:              r.source,
		ReportingController: r.source.Component,
		ReportingInstance:   r.source.Host,
	}
	select {
	case b.queue <- ev:
	default:
		// Full while the API is unreachable and each queued event waits out
		// its retries: logged at debug, or every further event would log an
		// error (client-go drops these silently).
		b.log.Debug("event dropped: too many queued events", "reason", reason, "object", objectKey(ev))
	}
}

// eventName is the object's name and the time in hexadecimal nanoseconds,
// or a random UUID when that is no valid name.
func eventName(object string, unixNano int64) string {
	name := fmt.Sprintf("%s.%x", object, unixNano)
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return uuid.New().String()
	}
	return name
}

// writer is the broadcaster's goroutine: it correlates each queued event
// and writes it, retrying failed writes as client-go's recorder does.
type writer struct {
	sink  *sink
	corr  *correlator
	log   *slog.Logger
	sleep time.Duration
}

func (w *writer) run(ctx context.Context, queue <-chan *corev1.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-queue:
			w.record(ctx, ev)
		}
	}
}

// record writes one event, retrying up to maxTriesPerEvent times while
// the failure is not the API's answer.
func (w *writer) record(ctx context.Context, ev *corev1.Event) {
	if ctx.Err() != nil {
		return // shut down: what is still queued is dropped
	}
	c := w.corr.correlate(ev)
	if c.skip {
		return
	}
	for tries := 1; !w.write(ctx, c.event, c.patch); tries++ {
		if tries >= maxTriesPerEvent {
			w.log.Error("Unable to write event (retry limit exceeded!)", "reason", ev.Reason, "object", objectKey(ev))
			return
		}
		delay := w.sleep
		if tries == 1 {
			delay = time.Duration(float64(delay) * rand.Float64())
		}
		if !ctxtime.Sleep(ctx, delay) {
			return
		}
	}
}

// write patches ev when it is a further occurrence (falling back to a
// create when the earlier event is gone) or creates it, and reports whether
// it is done with: written, refused by the API, or shut down.
func (w *writer) write(ctx context.Context, ev *corev1.Event, patch []byte) bool {
	var out *corev1.Event
	var err error
	update := ev.Count > 1
	if update {
		out, err = w.sink.patch(ctx, ev, patch)
	}
	if !update || isNotFound(err) {
		ev.ResourceVersion = ""
		out, err = w.sink.create(ctx, ev)
	}
	switch {
	case err == nil:
		w.corr.written(out)
		return true
	case ctx.Err() != nil:
		return true // shut down: dropped
	}
	var status *apierrors.StatusError
	if errors.As(err, &status) {
		if apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			w.log.Debug("Server rejected event (will not retry!)", "reason", ev.Reason, "object", objectKey(ev), "err", err)
		} else {
			w.log.Error("Server rejected event (will not retry!)", "reason", ev.Reason, "object", objectKey(ev), "err", err)
		}
		return true
	}
	w.log.Error("Unable to write event (may retry after sleeping)", "reason", ev.Reason, "object", objectKey(ev), "err", err)
	return false
}

func isNotFound(err error) bool {
	var status *apierrors.StatusError
	return errors.As(err, &status) && status.Status().Code == http.StatusNotFound
}

// sink writes events through an EventClient. Errors that carry an API
// Status are returned unwrapped (the writer gives up on those and retries
// the others).
type sink struct {
	api     EventClient
	timeout time.Duration
	paused  func() bool
	log     *slog.Logger
}

// call runs one API call bounded by the sink's timeout and ctx.
func (s *sink) call(ctx context.Context, ev *corev1.Event, what string, fn func(context.Context) (client.Object, error)) (*corev1.Event, error) {
	if s.paused != nil && s.paused() {
		// Reported written, so it is neither retried nor logged as an
		// error; a later similar event that finds it missing is created
		// afresh.
		s.log.Debug("event dropped: API unreachable", "reason", ev.Reason, "object", objectKey(ev))
		return ev, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	o, err := fn(ctx)
	if err != nil {
		var status *apierrors.StatusError
		if errors.As(err, &status) {
			return nil, status
		}
		return nil, fmt.Errorf("%s event %s/%s: %w", what, ev.Namespace, ev.Name, err)
	}
	out, ok := o.(*corev1.Event)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("%s event: the API returned a %T", what, o))
	}
	return out, nil
}

func (s *sink) create(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	return s.call(ctx, ev, "create", func(ctx context.Context) (client.Object, error) {
		return s.api.Create(ctx, ev, client.WriteOptions{})
	})
}

func (s *sink) patch(ctx context.Context, ev *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.call(ctx, ev, "patch", func(ctx context.Context) (client.Object, error) {
		return s.api.Patch(ctx, resources.Events, ev.Namespace, ev.Name, types.StrategicMergePatchType, data, client.WriteOptions{}, "")
	})
}

func objectKey(ev *corev1.Event) string {
	return ev.InvolvedObject.Namespace + "/" + ev.InvolvedObject.Name
}
