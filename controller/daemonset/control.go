package daemonset

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/record"
	"github.com/everynode/everynode/resources"
)

// Event reasons (docs/controller-rules.md §2.7, §2.9).
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

// RolloutComponent is the event source of the rollout settings' events
// (the Progressing condition's reasons, docs/rollouts.md §2). A source of
// their own gives them their own spam-filter budget: client-go's recorder
// lets one source record 25 events about an object, then one per five
// minutes, and a rollout on a few dozen nodes spends that on its
// SuccessfulCreate and SuccessfulDelete events alone.
const RolloutComponent = "everynode-rollout"

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

// eventRecorder records Events about an object without blocking; failures
// are logged, never returned. record.Broadcaster's recorders implement it
// (client-go's aggregation and spam filter, see docs/api.md).
type eventRecorder interface {
	Eventf(obj runtime.Object, eventType, reason, format string, args ...any)
}

// Interface guards.
var (
	_ podControl    = clientPodControl{}
	_ eventRecorder = record.EventRecorder(nil)
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
			p.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating: %v", err)
		}
		return err
	}
	p.recorder.Eventf(ds, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created pod: %s", o.GetName())
	return nil
}

func (p clientPodControl) DeletePod(ctx context.Context, namespace, name string, ds *appsv1.DaemonSet) error {
	if _, err := p.client.Delete(ctx, resources.Pods, namespace, name, metav1.DeleteOptions{}); err != nil {
		if !apierrors.IsNotFound(err) {
			p.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonFailedDelete, "Error deleting: %v", err)
		}
		return err
	}
	p.recorder.Eventf(ds, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted pod: %s", name)
	return nil
}

func (p clientPodControl) PatchPod(ctx context.Context, namespace, name string, patch []byte) error {
	_, err := p.client.Patch(ctx, resources.Pods, namespace, name, types.StrategicMergePatchType, patch, client.WriteOptions{}, "")
	return err
}
