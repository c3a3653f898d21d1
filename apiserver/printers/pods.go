package printers

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeUnreachablePodReason is the pod status reason the node lifecycle
// controller sets on pods of an unreachable node.
const nodeUnreachablePodReason = "NodeLost"

func podColumns() []metav1.TableColumnDefinition {
	st := corev1.PodStatus{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		nameColumn(),
		{Name: "Ready", Type: "string", Description: "The aggregate readiness state of this pod for accepting traffic."},
		{Name: "Status", Type: "string", Description: "The aggregate status of the containers in this pod."},
		{Name: "Restarts", Type: "string", Description: "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."},
		ageColumn(),
		{Name: "IP", Type: "string", Priority: 1, Description: st["podIP"]},
		{Name: "Node", Type: "string", Priority: 1, Description: corev1.PodSpec{}.SwaggerDoc()["nodeName"]},
		{Name: "Nominated Node", Type: "string", Priority: 1, Description: st["nominatedNodeName"]},
		{Name: "Readiness Gates", Type: "string", Priority: 1, Description: corev1.PodSpec{}.SwaggerDoc()["readinessGates"]},
	}
}

// PodConditions are the Table row conditions of a pod: Completed for a pod
// that ended (kubectl uses them to recognise finished rows).
func PodConditions(pod *corev1.Pod) []metav1.TableRowCondition {
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		return []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue,
			Reason: string(pod.Status.Phase), Message: "The pod has completed successfully."}}
	case corev1.PodFailed:
		return []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue,
			Reason: string(pod.Status.Phase), Message: "The pod failed."}}
	}
	return nil
}

func isRestartable(c *corev1.Container) bool {
	return c != nil && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

func laterTermination(last metav1.Time, st corev1.ContainerStatus) metav1.Time {
	if t := st.LastTerminationState.Terminated; t != nil && last.Before(&t.FinishedAt) {
		return t.FinishedAt
	}
	return last
}

func podConditionTrue(pod *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podCells is upstream printPod: READY counts ready containers (and started
// sidecars) over containers plus sidecars; STATUS is the phase refined by
// init, waiting and terminated container reasons; RESTARTS is "N" or
// "N (<age> ago)" after the last termination.
func podCells(pod *corev1.Pod, now time.Time) []any {
	restarts, sidecarRestarts, ready := 0, 0, 0
	total := len(pod.Spec.Containers)
	var lastRestart, lastSidecarRestart metav1.Time
	reason := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		reason = pod.Status.Reason
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated {
			reason = corev1.PodReasonSchedulingGated
		}
	}
	inits := map[string]*corev1.Container{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		inits[c.Name] = c
		if isRestartable(c) {
			total++
		}
	}

	initializing := false
	for i, c := range pod.Status.InitContainerStatuses {
		restarts += int(c.RestartCount)
		lastRestart = laterTermination(lastRestart, c)
		sidecar := isRestartable(inits[c.Name])
		if sidecar {
			sidecarRestarts += int(c.RestartCount)
			lastSidecarRestart = laterTermination(lastSidecarRestart, c)
		}
		switch term := c.State.Terminated; {
		case term != nil && term.ExitCode == 0:
			continue
		case sidecar && c.Started != nil && *c.Started:
			if c.Ready {
				ready++
			}
			continue
		case term != nil:
			switch {
			case term.Reason != "":
				reason = "Init:" + term.Reason
			case term.Signal != 0:
				reason = fmt.Sprintf("Init:Signal:%d", term.Signal)
			default:
				reason = fmt.Sprintf("Init:ExitCode:%d", term.ExitCode)
			}
		case c.State.Waiting != nil && c.State.Waiting.Reason != "" && c.State.Waiting.Reason != "PodInitializing":
			reason = "Init:" + c.State.Waiting.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
		}
		initializing = true
		break
	}

	if !initializing || podConditionTrue(pod, corev1.PodInitialized) {
		restarts, lastRestart = sidecarRestarts, lastSidecarRestart
		hasRunning := false
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			c := pod.Status.ContainerStatuses[i]
			restarts += int(c.RestartCount)
			lastRestart = laterTermination(lastRestart, c)
			switch term := c.State.Terminated; {
			case c.State.Waiting != nil && c.State.Waiting.Reason != "":
				reason = c.State.Waiting.Reason
			case term != nil && term.Reason != "":
				reason = term.Reason
			case term != nil && term.Signal != 0:
				reason = fmt.Sprintf("Signal:%d", term.Signal)
			case term != nil:
				reason = fmt.Sprintf("ExitCode:%d", term.ExitCode)
			case c.Ready && c.State.Running != nil:
				hasRunning = true
				ready++
			}
		}
		// A pod with a container still running is not "Completed".
		if reason == "Completed" && hasRunning {
			reason = "NotReady"
			if podConditionTrue(pod, corev1.PodReady) {
				reason = "Running"
			}
		}
	}

	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	switch {
	case pod.DeletionTimestamp != nil && pod.Status.Reason == nodeUnreachablePodReason:
		reason = "Unknown"
	case pod.DeletionTimestamp != nil && !terminal:
		reason = "Terminating"
	}

	restartText := strconv.Itoa(restarts)
	if restarts != 0 && !lastRestart.IsZero() {
		restartText = fmt.Sprintf("%d (%s ago)", restarts, Age(lastRestart, now))
	}
	ip := ""
	if len(pod.Status.PodIPs) > 0 {
		ip = pod.Status.PodIPs[0].IP
	}
	gates := "<none>"
	if n := len(pod.Spec.ReadinessGates); n > 0 {
		trueGates := 0
		for _, g := range pod.Spec.ReadinessGates {
			for _, c := range pod.Status.Conditions {
				if c.Type == g.ConditionType {
					if c.Status == corev1.ConditionTrue {
						trueGates++
					}
					break
				}
			}
		}
		gates = fmt.Sprintf("%d/%d", trueGates, n)
	}
	return []any{
		pod.Name, fmt.Sprintf("%d/%d", ready, total), reason, restartText, Age(pod.CreationTimestamp, now),
		orNone(ip), orNone(pod.Spec.NodeName), orNone(pod.Status.NominatedNodeName), gates,
	}
}
