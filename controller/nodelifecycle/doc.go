// Package nodelifecycle is everynode's node lifecycle controller: membership
// (gossip) decides each Node's Ready condition; Ready=False and
// Ready=Unknown become the node.kubernetes.io/not-ready and
// node.kubernetes.io/unreachable NoExecute taints; pods on an unreachable
// node are marked not ready; pods that do not tolerate a node's NoExecute
// taints are evicted (deleted), after tolerationSeconds when they tolerate
// them for a while. DaemonSet pods tolerate not-ready and unreachable forever
// and therefore stay.
//
// Differences from Kubernetes: readiness comes from Membership, not from
// kubelet heartbeats (a node's own Ready=False is kept while it is alive); a
// tolerationSeconds countdown starts at the taint's timeAdded rather than
// when the controller first saw the pod, so it survives controller restarts;
// there is no rate-limited zone eviction.
//
// The controller is safe for concurrent use; Run may be called once.
package nodelifecycle
