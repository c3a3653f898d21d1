package nodeagent

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/apiequal"
	"github.com/everynode/everynode/nodeagent/runtime"
	resources "github.com/everynode/everynode/resources/core"
)

// mt converts a time to the API's second precision, so a status computed
// twice from the same facts compares equal to the stored one.
func mt(t time.Time) metav1.Time {
	return metav1.NewTime(t.Truncate(time.Second).UTC())
}

// podIP is the pod's address: the first container address the runtime
// reports, the node's with host networking, else the one already reported.
func (a *Agent) podIP(pod *corev1.Pod, held *corev1.PodStatus, obs observed) string {
	if pod.Spec.HostNetwork {
		return a.cfg.NodeIP
	}
	for _, c := range pod.Spec.Containers {
		for _, s := range obs[c.Name] {
			if s.State == runtime.StateRunning && s.IP != "" {
				return s.IP
			}
		}
	}
	return held.PodIP
}

// terminated renders an exited container.
func (a *Agent) terminated(s runtime.ContainerStatus) *corev1.ContainerStateTerminated {
	t := &corev1.ContainerStateTerminated{
		ExitCode:    int32(s.ExitCode),
		Reason:      s.Reason,
		Message:     s.Message,
		StartedAt:   mt(s.Started),
		FinishedAt:  mt(s.Finished),
		ContainerID: a.containerID(s.ID),
	}
	if s.Started.IsZero() {
		t.StartedAt = metav1.Time{}
	}
	return t
}

func (a *Agent) containerID(id string) string { return a.scheme + "://" + id }

// containerStatus renders one container from its newest containers (list)
// and the waiting state this sync decided. notYet is the waiting reason
// shown before the container was ever created.
func (a *Agent) containerStatus(c *corev1.Container, cs *containerState, list []runtime.ContainerStatus, notYet string, init bool) corev1.ContainerStatus {
	s := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: new(bool)}
	var shown, last *runtime.ContainerStatus
	if len(list) > 0 {
		cur := list[0]
		s.RestartCount = int32(attemptOf(cur.Labels))
		s.ImageID = cur.ImageID
		s.ContainerID = a.containerID(cur.ID)
		if cs.waiting == nil || cur.State == runtime.StateRunning {
			shown = &list[0]
			if len(list) > 1 {
				last = &list[1]
			}
		} else {
			last = &list[0]
		}
	}
	switch {
	case shown != nil && shown.State == runtime.StateRunning:
		s.State.Running = &corev1.ContainerStateRunning{StartedAt: mt(shown.Started)}
		*s.Started = containerStarted(c, cs, *shown)
		s.Ready = !init && containerReady(c, cs, *shown)
	case shown != nil && shown.State == runtime.StateExited:
		s.State.Terminated = a.terminated(*shown)
		s.Ready = init && shown.ExitCode == 0
	case cs.waiting != nil:
		s.State.Waiting = cs.waiting.DeepCopy()
	default:
		s.State.Waiting = &corev1.ContainerStateWaiting{Reason: notYet}
	}
	if last != nil && last.State == runtime.StateExited {
		s.LastTerminationState.Terminated = a.terminated(*last)
	}
	return s
}

// buildStatus derives the pod status from what was observed and decided.
func (a *Agent) buildStatus(pod *corev1.Pod, st *podState, obs observed, now time.Time) corev1.PodStatus {
	status := *st.held(pod).DeepCopy()
	initDone := initialized(pod, obs)

	var inits []corev1.ContainerStatus
	var incomplete []string
	initFailed := false
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		s := a.containerStatus(c, st.container(c.Name), obs[c.Name], reasonPodInitializing, true)
		if !s.Ready {
			incomplete = append(incomplete, c.Name)
		}
		if t := s.State.Terminated; t != nil && t.ExitCode != 0 && pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			initFailed = true
		}
		inits = append(inits, s)
	}
	status.InitContainerStatuses = inits

	var statuses []corev1.ContainerStatus
	var unready []string
	notYet := reasonContainerCreating
	if !initDone {
		notYet = reasonPodInitializing
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		s := a.containerStatus(c, st.container(c.Name), obs[c.Name], notYet, false)
		if !s.Ready {
			unready = append(unready, c.Name)
		}
		statuses = append(statuses, s)
	}
	status.ContainerStatuses = statuses

	if status.Phase != corev1.PodSucceeded && status.Phase != corev1.PodFailed {
		switch {
		case initFailed:
			status.Phase = corev1.PodFailed
		case !initDone:
			status.Phase = corev1.PodPending
		default:
			status.Phase = podPhase(pod.Spec.RestartPolicy, statuses)
		}
	}
	if status.StartTime == nil {
		t := mt(now)
		status.StartTime = &t
	}
	if a.cfg.NodeIP != "" {
		status.HostIP = a.cfg.NodeIP
		status.HostIPs = []corev1.HostIP{{IP: a.cfg.NodeIP}}
	}
	if ip := a.podIP(pod, st.held(pod), obs); ip != "" {
		status.PodIP = ip
		status.PodIPs = []corev1.PodIP{{IP: ip}}
	}

	initCond := condition{status: corev1.ConditionTrue}
	if !initDone {
		initCond = condition{status: corev1.ConditionFalse, reason: reasonNotInitialized,
			message: fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(incomplete, " "))}
	}
	ready := condition{status: corev1.ConditionTrue}
	switch {
	case status.Phase == corev1.PodSucceeded || status.Phase == corev1.PodFailed:
		ready = condition{status: corev1.ConditionFalse, reason: reasonPodCompleted}
	case len(unready) > 0:
		ready = condition{status: corev1.ConditionFalse, reason: reasonContainersNotReady,
			message: fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))}
	}
	setCondition(&status, corev1.PodScheduled, condition{status: corev1.ConditionTrue}, now)
	setCondition(&status, corev1.PodInitialized, initCond, now)
	setCondition(&status, corev1.ContainersReady, ready, now)
	setCondition(&status, corev1.PodReady, ready, now)
	return status
}

type condition struct {
	status          corev1.ConditionStatus
	reason, message string
}

// setCondition sets one condition, keeping lastTransitionTime unless the
// status flips.
func setCondition(status *corev1.PodStatus, typ corev1.PodConditionType, c condition, now time.Time) {
	nc := corev1.PodCondition{Type: typ, Status: c.status, Reason: c.reason, Message: c.message, LastTransitionTime: mt(now)}
	for i := range status.Conditions {
		old := &status.Conditions[i]
		if old.Type != typ {
			continue
		}
		if old.Status == c.status {
			nc.LastTransitionTime = old.LastTransitionTime
		}
		nc.LastProbeTime = old.LastProbeTime
		*old = nc
		return
	}
	status.Conditions = append(status.Conditions, nc)
}

// podPhase is kubelet's getPhase for initialized pods.
func podPhase(policy corev1.RestartPolicy, statuses []corev1.ContainerStatus) corev1.PodPhase {
	var running, waiting, stopped, succeeded int
	for _, s := range statuses {
		switch {
		case s.State.Running != nil:
			running++
		case s.State.Terminated != nil:
			stopped++
			if s.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case s.State.Waiting != nil:
			if s.LastTerminationState.Terminated != nil {
				stopped++
			} else {
				waiting++
			}
		}
	}
	switch {
	case waiting > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case stopped > 0:
		switch {
		case policy == corev1.RestartPolicyAlways || policy == "":
			return corev1.PodRunning
		case stopped == succeeded:
			return corev1.PodSucceeded
		case policy == corev1.RestartPolicyNever:
			return corev1.PodFailed
		default:
			return corev1.PodRunning
		}
	}
	return corev1.PodPending
}

// writeStatus writes status through the /status subresource when it differs
// from what the API holds.
func (a *Agent) writeStatus(ctx context.Context, pod *corev1.Pod, st *podState, status corev1.PodStatus) error {
	// held may be the pod cache's object, which other goroutines read. A
	// status holds quantities by pointer only in the dynamic resource
	// allocation fields, which this agent does not set; comparing may store
	// their strings in them (apiequal), so a copy is compared then.
	held := st.held(pod)
	if len(held.NodeAllocatableResourceClaimStatuses) > 0 {
		held = held.DeepCopy()
	}
	if apiequal.Equal(held, &status) {
		return nil
	}
	if a.static != nil && a.pods.isStatic(pod.UID) {
		// A static pod's status goes to its mirror pod, when the API is
		// reachable; the mirror loop publishes it.
		st.written, st.base = &status, pod.ResourceVersion
		a.static.setStatus(pod.UID, status)
		return nil
	}
	if a.health.paused() {
		return fmt.Errorf("nodeagent: update status of pod %s: %w", podRef(pod), errAPIPaused)
	}
	ctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	next := pod.DeepCopy()
	next.Status = status
	for attempt := 0; ; attempt++ {
		out, err := a.api.UpdateStatus(ctx, next, client.WriteOptions{FieldManager: agentFieldManager})
		a.health.observe(err)
		switch {
		case err == nil:
			st.written = &status
			st.base = pod.ResourceVersion
			if p, ok := out.(*corev1.Pod); ok {
				st.written = p.Status.DeepCopy()
			}
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err) && attempt == 0:
			fresh, gerr := a.api.Get(ctx, resources.Pods, pod.Namespace, pod.Name)
			a.health.observe(gerr)
			if gerr != nil {
				return fmt.Errorf("nodeagent: get pod %s: %w", podRef(pod), gerr)
			}
			if fresh.GetUID() != pod.UID {
				return nil
			}
			next = fresh.(*corev1.Pod).DeepCopy()
			next.Status = status
		default:
			return fmt.Errorf("nodeagent: update status of pod %s: %w", podRef(pod), err)
		}
	}
}
