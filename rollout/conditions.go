package rollout

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// ConditionProgressing is the DaemonSet condition the controller sets for
// a rollout that uses these settings, named and shaped as a Deployment's so
// `kubectl describe` readers know it: Unknown while the user holds the
// rollout (paused, waiting for promote), True while it moves or once it
// completed. A DaemonSet that never used a setting carries none, as in
// Kubernetes.
const ConditionProgressing appsv1.DaemonSetConditionType = "Progressing"

// Reasons of the Progressing condition; each is also the reason of the
// event the controller records when the condition takes it.
const (
	// ReasonPaused: Paused is "true" (Deployment: DeploymentPaused).
	ReasonPaused = "DaemonSetPaused"
	// ReasonResumed: the pause was lifted (Deployment: DeploymentResumed).
	ReasonResumed = "DaemonSetResumed"
	// ReasonInvalidAnnotation: a rollout annotation could not be parsed
	// (stored before admission checked it); the rollout is held as if paused.
	ReasonInvalidAnnotation = "InvalidRolloutAnnotation"
	// ReasonCanaryUpdating: the partition or canary nodes are being updated.
	ReasonCanaryUpdating = "CanaryUpdating"
	// ReasonWaitingForPromote: every partition or canary node is updated and
	// available; the rest wait for `everynode rollout promote`.
	ReasonWaitingForPromote = "WaitingForPromote"
	// ReasonPromoted: the partition and canary limits were removed.
	ReasonPromoted = "CanaryPromoted"
	// ReasonNewRevisionAvailable: every desired node runs an available pod
	// of the current revision (Deployment: NewReplicaSetAvailable).
	ReasonNewRevisionAvailable = "NewRevisionAvailable"
	// ReasonUnreachablePending: every reachable node runs an available pod
	// of the current revision; nodes unreachable for longer than the grace
	// still wait for it (named in the message) and are updated when back.
	// Status True: the rollout is complete for the reachable nodes.
	ReasonUnreachablePending = "UnreachableNodesPending"
	// ReasonUpdating: a DaemonSet with a progress deadline or automatic
	// rollback is rolling out its current revision (Deployment:
	// ReplicaSetUpdated).
	ReasonUpdating = "NewRevisionUpdating"
	// ReasonPrePulling: annotation image.everynode.io/prepull holds the
	// rollout until every node to update has the new revision's images.
	ReasonPrePulling = "PrePullingImages"
	// ReasonProgressDeadlineExceeded: no updated pod became available for
	// progress-deadline-seconds; status False (Deployment: the same reason).
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// ReasonRolledBack: the controller rolled a failed revision back to the
	// last fully available one; status False until the template changes.
	ReasonRolledBack = "RolledBack"
	// ReasonBadRevision: the template is a revision that was rolled back as
	// failed (annotation bad-revision); no pod is replaced; status False.
	ReasonBadRevision = "BadRevision"
)

// Failed reports whether c says the rollout failed: the reasons `everynode
// rollout status` exits non-zero on.
func Failed(c *appsv1.DaemonSetCondition) bool {
	if c == nil || c.Status != corev1.ConditionFalse {
		return false
	}
	switch c.Reason {
	case ReasonProgressDeadlineExceeded, ReasonRolledBack, ReasonBadRevision:
		return true
	}
	return false
}

// CanaryMessage is the Progressing message of a partition or canary
// rollout with done of target nodes updated and available; `everynode
// rollout status` prints it as is.
func CanaryMessage(done, target int) string {
	if done >= target {
		return fmt.Sprintf("canary: %d/%d updated and ready; waiting for promote", done, target)
	}
	return fmt.Sprintf("canary: %d/%d updated and ready", done, target)
}

// Condition returns st's condition of type t, or nil.
func Condition(st appsv1.DaemonSetStatus, t appsv1.DaemonSetConditionType) *appsv1.DaemonSetCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}
