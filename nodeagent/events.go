package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
)

// Event reasons, as kubelet's.
const (
	eventUnsupportedFields = "UnsupportedFields"
	eventFailed            = "Failed"
	eventBackOff           = "BackOff"
	eventPulling           = "Pulling"
	eventPulled            = "Pulled"
	eventCreated           = "Created"
	eventStarted           = "Started"
	eventKilling           = "Killing"
	eventUnhealthy         = "Unhealthy"
)

// eventSource is the component named in the agent's events.
const eventSource = "everynode-agent"

// eventQueueSize bounds the events waiting to be written; when full, new
// events are dropped (logged at debug).
const eventQueueSize = 256

// eventRecorder writes pod events best-effort: record never blocks, a
// single writer (run) sends them to the API one at a time, each bounded by
// apiCallTimeout, and a failed write is logged at debug and forgotten.
type eventRecorder struct {
	api    client.Interface
	clock  clock.PassiveClock
	log    *slog.Logger
	node   string
	paused func() bool
	queue  chan *corev1.Event

	mu   sync.Mutex
	last int64 // the last name's nanoseconds, so names stay unique
}

func newEventRecorder(api client.Interface, clk clock.PassiveClock, log *slog.Logger, node string, paused func() bool) *eventRecorder {
	return &eventRecorder{
		api: api, clock: clk, log: log, node: node, paused: paused,
		queue: make(chan *corev1.Event, eventQueueSize),
	}
}

// record queues an event on pod; fieldPath names the container
// ("spec.containers{app}") or is empty for the pod itself.
func (r *eventRecorder) record(pod *corev1.Pod, fieldPath, typ, reason, message string) {
	now := r.clock.Now()
	r.mu.Lock()
	nanos := now.UnixNano()
	if nanos <= r.last {
		nanos = r.last + 1
	}
	r.last = nanos
	r.mu.Unlock()
	ts := metav1.NewTime(now)
	ev := &corev1.Event{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", pod.Name, nanos),
			Namespace: pod.Namespace,
		},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID,
			FieldPath: fieldPath,
		},
		Reason:              reason,
		Message:             message,
		Type:                typ,
		Source:              corev1.EventSource{Component: eventSource, Host: r.node},
		FirstTimestamp:      ts,
		LastTimestamp:       ts,
		Count:               1,
		ReportingController: eventSource,
		ReportingInstance:   r.node,
	}
	select {
	case r.queue <- ev:
	default:
		r.log.Debug("event dropped, queue full", "pod", podRef(pod), "reason", reason)
	}
}

// run writes queued events until ctx ends.
func (r *eventRecorder) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-r.queue:
			r.write(ctx, ev)
		}
	}
}

// flush writes the events queued now, then returns.
func (r *eventRecorder) flush(ctx context.Context) {
	for {
		select {
		case ev := <-r.queue:
			r.write(ctx, ev)
		default:
			return
		}
	}
}

func (r *eventRecorder) write(ctx context.Context, ev *corev1.Event) {
	if r.paused != nil && r.paused() {
		r.log.Debug("event dropped, API unreachable", "event", ev.Name, "reason", ev.Reason)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	if _, err := r.api.Create(ctx, ev, client.WriteOptions{}); err != nil {
		r.log.Debug("event not written", "event", ev.Name, "reason", ev.Reason, "err", err)
	}
}

// containerField is an event's fieldPath for container c of pod.
func containerField(pod *corev1.Pod, name string) string {
	if isInitContainer(pod, name) {
		return "spec.initContainers{" + name + "}"
	}
	return "spec.containers{" + name + "}"
}

// event records an event on pod (on its container when container is set).
func (a *Agent) event(pod *corev1.Pod, container, typ, reason, format string, args ...any) {
	field := ""
	if container != "" {
		field = containerField(pod, container)
	}
	a.events.record(pod, field, typ, reason, fmt.Sprintf(format, args...))
}

// reportUnsupported records, once per pod UID, the UnsupportedFields
// warning naming the fields of pod the agent does not honour.
func (a *Agent) reportUnsupported(pod *corev1.Pod, st *podState) {
	if st.unsupportedReported {
		return
	}
	st.unsupportedReported = true
	if fields := unhonoured(pod); len(fields) > 0 {
		a.event(pod, "", corev1.EventTypeWarning, eventUnsupportedFields,
			"everynode does not honour: %s", strings.Join(fields, ", "))
	}
}
