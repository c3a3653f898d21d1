// Package record records core/v1 Events through a client.Interface with
// client-go's event machinery (k8s.io/client-go/tools/record): the
// EventBroadcaster queues events without blocking the caller and one
// goroutine writes them; its EventCorrelator folds similar events into one
// with a rising count and, past ten similar events about an object in ten
// minutes, into one "(combined from similar events)" event; its spam filter
// lets a source record a burst of 25 events about an object, then one every
// five minutes. Events land in the involved object's namespace, "default"
// for cluster-scoped objects, as in Kubernetes.
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kuberecord "k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	resources "github.com/everynode/everynode/resources/core"
)

// EventRecorder is client-go's: Event, Eventf and AnnotatedEventf about an
// object (a typed object Options.ResourceFor knows, or a
// *corev1.ObjectReference to name a part of one, e.g. a container by
// FieldPath).
type EventRecorder = kuberecord.EventRecorder

// DefaultCallTimeout bounds each API call writing an event.
const DefaultCallTimeout = 10 * time.Second

// EventClient is the part of the API the recorder writes events with;
// client.Interface implements it.
type EventClient interface {
	Create(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error)
	Update(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error)
	Patch(ctx context.Context, r *resources.Resource, namespace, name string, pt types.PatchType, data []byte, opts client.WriteOptions, subresource string) (client.Object, error)
}

// Options configures a Broadcaster. The zero value is Kubernetes' defaults.
type Options struct {
	// Logger receives client-go's messages about events it could not
	// write; nil discards them.
	Logger *slog.Logger
	// Clock drives the spam filter and the aggregation window; nil is the
	// real clock. (Event timestamps always come from the real clock, as
	// client-go's recorder takes no clock.)
	Clock clock.PassiveClock
	// CallTimeout bounds each API call; 0 means DefaultCallTimeout.
	CallTimeout time.Duration
	// Paused, when set and true, drops events instead of writing them
	// (logged at debug): the node agent pauses while the API server is
	// unreachable rather than queueing writes behind client-go's retries.
	Paused func() bool
	// Correlator overrides client-go's correlator settings (burst, refill
	// rate, aggregation threshold and window); its Clock is set from Clock.
	Correlator kuberecord.CorrelatorOptions
	// ResourceFor names the kind and apiVersion of an object whose
	// TypeMeta is empty (as in informer caches), by its Go type; nil knows
	// the core/v1 kinds alone (resources/core.ForObject). Controllers pass
	// resources.ForObject.
	ResourceFor func(runtime.Object) *resources.Resource
}

// Broadcaster sends the events of its recorders to the API. Create it with
// NewBroadcaster; its goroutines run between Start and Shutdown.
type Broadcaster struct {
	sink        *sink
	scheme      *runtime.Scheme // empty: recorders are given references
	resourceFor func(runtime.Object) *resources.Resource
	log         *slog.Logger
	opts        kuberecord.CorrelatorOptions

	mu        sync.RWMutex
	running   kuberecord.EventBroadcaster // nil unless started
	recorders map[corev1.EventSource]kuberecord.EventRecorderLogger
	logger    klog.Logger  // client-go's, for this run
	closed    *atomic.Bool // closes logger's gate at Shutdown
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
	copts := o.Correlator
	copts.Clock = o.Clock
	resourceFor := o.ResourceFor
	if resourceFor == nil {
		resourceFor = resources.ForObject
	}
	return &Broadcaster{
		sink:        &sink{api: api, timeout: timeout, paused: o.Paused, log: log},
		scheme:      runtime.NewScheme(),
		resourceFor: resourceFor,
		log:         log,
		opts:        copts,
	}
}

// reference names obj as an event's involved object. client-go's recorder
// looks an object's kind up in a scheme when its TypeMeta is empty; it is
// given the reference instead, built as client-go builds it, with the kind
// from ResourceFor, so that no scheme of every served kind is needed. obj
// is returned as it is when it is a reference already, has its TypeMeta,
// or is of no known kind (client-go then reports why it is not recorded).
func (b *Broadcaster) reference(obj runtime.Object) runtime.Object {
	if _, ok := obj.(*corev1.ObjectReference); ok || obj == nil || !obj.GetObjectKind().GroupVersionKind().Empty() {
		return obj
	}
	r := b.resourceFor(obj)
	acc, err := meta.Accessor(obj)
	if r == nil || err != nil {
		return obj
	}
	gvk := r.GVK()
	return &corev1.ObjectReference{
		Kind:            gvk.Kind,
		APIVersion:      gvk.GroupVersion().String(),
		Name:            acc.GetName(),
		Namespace:       acc.GetNamespace(),
		UID:             acc.GetUID(),
		ResourceVersion: acc.GetResourceVersion(),
	}
}

// NewRecorder returns a recorder whose events name source (Component, and
// Host for a node's component). It may be called before Start and kept
// across Start and Shutdown.
func (b *Broadcaster) NewRecorder(source corev1.EventSource) EventRecorder {
	return &recorder{b: b, source: source}
}

// Start starts the goroutines that write events: client-go's broadcaster
// and its sink. It does nothing when already started. Shutdown stops them.
func (b *Broadcaster) Start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running != nil {
		return
	}
	b.sink.start()
	b.closed = new(atomic.Bool)
	b.logger = logr.FromSlogHandler(gatedHandler{Handler: b.log.Handler(), closed: b.closed})
	// The context only carries the logger: it has no Done channel, so
	// client-go starts no goroutine to wait on it; Shutdown stops it all.
	b.running = kuberecord.NewBroadcaster(
		kuberecord.WithContext(klog.NewContext(context.Background(), b.logger)),
		kuberecord.WithCorrelatorOptions(b.opts))
	b.running.StartRecordingToSink(b.sink)
	b.recorders = map[corev1.EventSource]kuberecord.EventRecorderLogger{}
}

// Shutdown stops writing events: those still queued are dropped and an API
// call under way is cancelled. It returns once the broadcaster's goroutines
// have ended or are on their way out: client-go's sink goroutine, which
// Shutdown cannot join, has no blocking work left, and what it would still
// log is discarded. Safe to call more than once, and without Start.
func (b *Broadcaster) Shutdown() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running == nil {
		return
	}
	b.sink.stop()
	b.running.Shutdown()
	b.sink.wait()
	b.closed.Store(true)
	b.running, b.recorders, b.closed = nil, nil, nil
}

// Run starts the Broadcaster, waits for ctx to end and shuts it down.
func (b *Broadcaster) Run(ctx context.Context) {
	b.Start()
	<-ctx.Done()
	b.Shutdown()
}

// recorder hands events to the running broadcaster's client-go recorder
// for its source, or drops them when the broadcaster is not running.
type recorder struct {
	b      *Broadcaster
	source corev1.EventSource
}

// get returns the client-go recorder for r's source, nil when not running.
// The caller holds b.mu for reading (so Shutdown waits for the event to be
// queued, and no event is sent to a stopped broadcaster).
func (r *recorder) get() kuberecord.EventRecorderLogger {
	b := r.b
	if b.running == nil {
		return nil
	}
	b.sink.recMu.Lock()
	defer b.sink.recMu.Unlock()
	rec, ok := b.recorders[r.source]
	if !ok {
		rec = b.running.NewRecorder(b.scheme, r.source).WithLogger(b.logger)
		b.recorders[r.source] = rec
	}
	return rec
}

func (r *recorder) Event(obj runtime.Object, eventtype, reason, message string) {
	r.b.mu.RLock()
	defer r.b.mu.RUnlock()
	if rec := r.get(); rec != nil {
		rec.Event(r.b.reference(obj), eventtype, reason, message)
		return
	}
	r.b.log.Debug("event dropped: recorder not started", "reason", reason, "source", r.source.Component)
}

func (r *recorder) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	r.Event(obj, eventtype, reason, fmt.Sprintf(format, args...))
}

func (r *recorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, format string, args ...any) {
	r.b.mu.RLock()
	defer r.b.mu.RUnlock()
	if rec := r.get(); rec != nil {
		rec.AnnotatedEventf(r.b.reference(obj), annotations, eventtype, reason, format, args...)
		return
	}
	r.b.log.Debug("event dropped: recorder not started", "reason", reason, "source", r.source.Component)
}

// sink is client-go's record.EventSink over an EventClient. Errors that
// carry an API Status are returned unwrapped, so that client-go tells the
// ones to give up on (a Status) from the ones to retry (transport errors).
type sink struct {
	api     EventClient
	timeout time.Duration
	paused  func() bool
	log     *slog.Logger

	recMu sync.Mutex // guards Broadcaster.recorders under Broadcaster.mu's read lock

	mu       sync.Mutex
	ctx      context.Context // the API calls' context, cancelled by stop
	cancel   context.CancelFunc
	inflight sync.WaitGroup // API calls under way; joined only after stop
}

var _ kuberecord.EventSink = (*sink)(nil)

func (s *sink) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctx, s.cancel = context.WithCancel(context.Background())
}

// stop cancels the API calls under way and refuses new ones.
func (s *sink) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancel()
}

// stopped reports whether stop was called.
func (s *sink) stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctx.Err() != nil
}

// wait returns when no API call is under way; call it after stop.
func (s *sink) wait() { s.inflight.Wait() }

// call runs one API call bounded by the sink's timeout and stop.
func (s *sink) call(ev *corev1.Event, what string, fn func(context.Context) (client.Object, error)) (*corev1.Event, error) {
	s.mu.Lock()
	ctx := s.ctx
	if ctx.Err() != nil {
		// Shut down: reported written, so client-go neither retries nor logs.
		s.mu.Unlock()
		return ev, nil
	}
	s.inflight.Add(1) // under mu and before stop: never concurrent with wait
	s.mu.Unlock()
	defer s.inflight.Done()
	if s.paused != nil && s.paused() {
		// Reported written, so client-go neither retries nor logs an error;
		// a later similar event that finds it missing is created afresh.
		s.log.Debug("event dropped: API unreachable", "reason", ev.Reason, "object", objectKey(ev))
		return ev, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	o, err := fn(ctx)
	if err != nil && s.stopped() {
		return ev, nil // cancelled by Shutdown: dropped, as above
	}
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

func (s *sink) Create(ev *corev1.Event) (*corev1.Event, error) {
	return s.call(ev, "create", func(ctx context.Context) (client.Object, error) {
		return s.api.Create(ctx, ev, client.WriteOptions{})
	})
}

func (s *sink) Update(ev *corev1.Event) (*corev1.Event, error) {
	return s.call(ev, "update", func(ctx context.Context) (client.Object, error) {
		return s.api.Update(ctx, ev, client.WriteOptions{})
	})
}

func (s *sink) Patch(ev *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.call(ev, "patch", func(ctx context.Context) (client.Object, error) {
		return s.api.Patch(ctx, resources.Events, ev.Namespace, ev.Name, types.StrategicMergePatchType, data, client.WriteOptions{}, "")
	})
}

// gatedHandler passes records on until closed: what client-go's goroutine
// logs after Shutdown has returned is discarded. Its WithAttrs and
// WithGroup children share the gate.
type gatedHandler struct {
	slog.Handler
	closed *atomic.Bool
}

func (h gatedHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return !h.closed.Load() && h.Handler.Enabled(ctx, l)
}

func (h gatedHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.closed.Load() {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h gatedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return gatedHandler{Handler: h.Handler.WithAttrs(attrs), closed: h.closed}
}

func (h gatedHandler) WithGroup(name string) slog.Handler {
	return gatedHandler{Handler: h.Handler.WithGroup(name), closed: h.closed}
}

func objectKey(ev *corev1.Event) string {
	return ev.InvolvedObject.Namespace + "/" + ev.InvolvedObject.Name
}
