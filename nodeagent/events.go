package nodeagent

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
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
	eventFailedMount       = "FailedMount"
)

// eventSource is the component named in the agent's events.
const eventSource = "everynode-agent"

// containerField is an event's fieldPath for container c of pod.
func containerField(pod *corev1.Pod, name string) string {
	if isInitContainer(pod, name) {
		return "spec.initContainers{" + name + "}"
	}
	return "spec.containers{" + name + "}"
}

// event records an event on pod (on its container when container is set)
// through the agent's recorder: best-effort, never blocking, aggregated and
// spam-filtered as Kubernetes' (see client/record).
func (a *Agent) event(pod *corev1.Pod, container, typ, reason, format string, args ...any) {
	ref := &corev1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID,
	}
	if container != "" {
		ref.FieldPath = containerField(pod, container)
	}
	a.recorder.Eventf(ref, typ, reason, format, args...)
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
