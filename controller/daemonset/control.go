package daemonset

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// Event reasons (REFERENCE §2.7, §2.9).
const (
	ReasonSuccessfulCreate   = "SuccessfulCreate"
	ReasonFailedCreate       = "FailedCreate"
	ReasonSuccessfulDelete   = "SuccessfulDelete"
	ReasonFailedDelete       = "FailedDelete"
	ReasonFailedDaemonPod    = "FailedDaemonPod"
	ReasonSucceededDaemonPod = "SucceededDaemonPod"
	ReasonSelectingAll       = "SelectingAll"
)

// Component is the event source of this controller.
const Component = "daemonset-controller"

// podControl is how the controller changes pods. Implementations are safe
// for concurrent use; errors are *apierrors.StatusError where the API gave one.
type podControl interface {
	// CreatePod creates pod for ds.
	CreatePod(ctx context.Context, pod *corev1.Pod, ds *appsv1.DaemonSet) error
	// DeletePod deletes the named pod of ds.
	DeletePod(ctx context.Context, namespace, name string, ds *appsv1.DaemonSet) error
	// PatchPod applies a strategic merge patch to the named pod.
	PatchPod(ctx context.Context, namespace, name string, patch []byte) error
}

// eventRecorder records Events about an object. It must not block for long;
// failures are logged, never returned.
type eventRecorder interface {
	Eventf(ctx context.Context, obj resources.Object, eventType, reason, format string, args ...any)
}

// Interface guards.
var (
	_ podControl    = clientPodControl{}
	_ eventRecorder = (*clientRecorder)(nil)
	_ statusWriter  = client.Interface(nil)
)

// clientPodControl is the production podControl: the API client plus the
// SuccessfulCreate/FailedCreate/SuccessfulDelete/FailedDelete events.
type clientPodControl struct {
	client   client.Interface
	recorder eventRecorder
}

func (p clientPodControl) CreatePod(ctx context.Context, pod *corev1.Pod, ds *appsv1.DaemonSet) error {
	if len(pod.Labels) == 0 {
		return fmt.Errorf("unable to create pods, no labels")
	}
	o, err := p.client.Create(ctx, pod, client.WriteOptions{})
	if err != nil {
		if !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			p.recorder.Eventf(ctx, ds, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating: %v", err)
		}
		return err
	}
	p.recorder.Eventf(ctx, ds, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created pod: %s", o.GetName())
	return nil
}

func (p clientPodControl) DeletePod(ctx context.Context, namespace, name string, ds *appsv1.DaemonSet) error {
	if _, err := p.client.Delete(ctx, resources.Pods, namespace, name, metav1.DeleteOptions{}); err != nil {
		if !apierrors.IsNotFound(err) {
			p.recorder.Eventf(ctx, ds, corev1.EventTypeWarning, ReasonFailedDelete, "Error deleting: %v", err)
		}
		return err
	}
	p.recorder.Eventf(ctx, ds, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted pod: %s", name)
	return nil
}

func (p clientPodControl) PatchPod(ctx context.Context, namespace, name string, patch []byte) error {
	_, err := p.client.Patch(ctx, resources.Pods, namespace, name, types.StrategicMergePatchType, patch, client.WriteOptions{}, "")
	return err
}

// eventCreator is the part of the API the recorder needs.
type eventCreator interface {
	Create(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error)
}

// clientRecorder writes core/v1 Events through the API from one goroutine
// (run), so a slow API never stalls a sync. Eventf drops what Kubernetes'
// recorder drops (spamFilter: 25 events per object, then one per 5 minutes)
// and queues the rest; when the bounded queue is full it drops the event and
// says so in a log line at most every dropLogEvery.
type clientRecorder struct {
	client eventCreator
	clock  clock.PassiveClock
	logger *slog.Logger
	queue  chan *corev1.Event

	mu       sync.Mutex
	seq      int64
	spam     *spamFilter
	dropped  int       // events dropped on a full queue since the last log line
	droppedT time.Time // when that line was written
}

// dropLogEvery spaces the "queue full" log lines.
const dropLogEvery = 10 * time.Second

func newClientRecorder(c eventCreator, clk clock.PassiveClock, logger *slog.Logger) *clientRecorder {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &clientRecorder{client: c, clock: clk, logger: logger, queue: make(chan *corev1.Event, 1000), spam: newSpamFilter()}
}

func (r *clientRecorder) Eventf(ctx context.Context, obj resources.Object, eventType, reason, format string, args ...any) {
	now := metav1.NewTime(r.clock.Now())
	ref := corev1.ObjectReference{
		Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID(),
		ResourceVersion: obj.GetResourceVersion(),
	}
	if res := resources.ForObject(obj); res != nil {
		ref.APIVersion, ref.Kind = res.APIVersion(), res.Kind
	}
	ns := obj.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: ns},
		InvolvedObject:      ref,
		Reason:              reason,
		Message:             fmt.Sprintf(format, args...),
		Type:                eventType,
		Source:              corev1.EventSource{Component: Component},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "everynode.io/" + Component,
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.spam.allow(ev, now.Time) {
		r.logger.Debug("event dropped: more than Kubernetes' recorder allows for one object", "reason", reason, "object", ns+"/"+obj.GetName())
		return
	}
	r.seq++
	ev.Name = fmt.Sprintf("%s.%x%02x", obj.GetName(), now.UnixNano(), r.seq%256)
	select {
	case r.queue <- ev:
	default:
		r.dropped++
		if t := now.Time; t.Sub(r.droppedT) >= dropLogEvery {
			r.logger.Warn("event queue full: events dropped (the API is slower than events are recorded)", "dropped", r.dropped, "lastReason", reason, "lastObject", ns+"/"+obj.GetName())
			r.dropped, r.droppedT = 0, t
		}
	}
}

// run writes queued events until ctx ends.
func (r *clientRecorder) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-r.queue:
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if _, err := r.client.Create(wctx, ev, client.WriteOptions{}); err != nil && ctx.Err() == nil {
				r.logger.Warn("cannot write event", "reason", ev.Reason, "object", ev.InvolvedObject.Namespace+"/"+ev.InvolvedObject.Name, "err", err)
			}
			cancel()
		}
	}
}
