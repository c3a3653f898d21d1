package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	resources "github.com/everynode/everynode/resources/core"
)

// Annotations on the Node that remember which labels and taints came from
// the agent's configuration, so a restart with fewer --labels removes what
// it used to set and nothing that others (kubectl label) added. Taints are
// set only at registration (reconcileMeta).
const (
	// AnnotationManagedLabels lists the label keys the agent set from its
	// configuration, comma-separated and sorted.
	AnnotationManagedLabels = "everynode.io/managed-labels"
	// AnnotationManagedTaints lists the taints (key:Effect) the agent set
	// from its configuration, comma-separated and sorted.
	AnnotationManagedTaints = "everynode.io/managed-taints"
)

// ReservedTaintPrefix marks the taints the node lifecycle controller owns;
// the agent never sets nor removes them.
const ReservedTaintPrefix = "node.kubernetes.io/"

// Node condition reasons the agent reports.
const (
	reasonAgentReady = "AgentReady"
)

// reasonMemberLeft is the reason the node lifecycle controller
// (controller/nodelifecycle.ReasonMemberLeft) writes on Ready=False when the
// node's gossip member left: with Ready=Unknown, the verdicts of membership
// that the agent's heartbeat does not overrule.
const reasonMemberLeft = "MemberLeft"

const (
	// DefaultNodeStatusPeriod is how often the agent checks its Node and
	// posts its status with a fresh heartbeat (kubelet's
	// nodeStatusUpdateFrequency).
	DefaultNodeStatusPeriod = 10 * time.Second
	// registerMinBackoff is the first retry delay after a failed Node
	// write; it doubles up to the status period.
	registerMinBackoff = time.Second
	// registerMaxBackoff caps that delay when the status period is longer
	// (the wan profile's minutes): a Node the server lost is re-created
	// within this long of the server's return.
	registerMaxBackoff = 30 * time.Second
	// agentFieldManager names the agent's writes.
	agentFieldManager = "everynode-agent"
)

// wellKnownLabels are the labels the agent always sets on its Node.
func (a *Agent) wellKnownLabels() map[string]string {
	return map[string]string{
		corev1.LabelHostname:   a.cfg.NodeName,
		corev1.LabelOSStable:   goruntime.GOOS,
		corev1.LabelArchStable: goruntime.GOARCH,
	}
}

// nodeLoop registers the Node, then keeps its labels and status
// current every NodeStatusPeriod, re-creating it when it was deleted. A
// failed write is retried with back-off; the loop ends with ctx.
func (a *Agent) nodeLoop(ctx context.Context) {
	backoff := registerMinBackoff
	failing := false
	for {
		wait := a.cfg.NodeStatusPeriod
		sctx, cancel := context.WithTimeout(ctx, 3*apiCallTimeout)
		err := a.syncNode(sctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			lvl := slog.LevelWarn
			if failing {
				lvl = slog.LevelDebug // reported once per outage
			}
			a.log.Log(ctx, lvl, "node registration or status update failed, will retry", "err", err, "after", backoff)
			wait = backoff
			backoff = min(backoff*2, a.cfg.NodeStatusPeriod, registerMaxBackoff)
			failing = true
		} else {
			if failing {
				a.log.Info("node status posted again")
			}
			backoff = registerMinBackoff
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-a.clock.After(wait):
		}
	}
}

// syncNode creates the Node when it is missing (with its taints),
// reconciles the labels the agent manages (once per Run, like kubelet at
// registration: a later kubectl label of the same key is not fought), and
// posts the status.
func (a *Agent) syncNode(ctx context.Context) error {
	opts := client.WriteOptions{FieldManager: agentFieldManager}
	obj, err := a.api.Get(ctx, resources.Nodes, "", a.cfg.NodeName)
	if apierrors.IsNotFound(err) {
		// Registered with its labels, taints and status in one write.
		if _, err := a.api.Create(ctx, a.newNode(), opts); err != nil {
			return fmt.Errorf("nodeagent: register node %s: %w", a.cfg.NodeName, err)
		}
		a.log.Info("node registered")
		a.nodeMetaDone = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("nodeagent: get node %s: %w", a.cfg.NodeName, err)
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return fmt.Errorf("nodeagent: register node %s: got %T", a.cfg.NodeName, obj)
	}
	a.requestPrePull(node)
	next := node.DeepCopy()
	if !a.nodeMetaDone {
		a.reconcileMeta(next, false)
	}
	if !equality.Semantic.DeepEqual(next.ObjectMeta, node.ObjectMeta) || !equality.Semantic.DeepEqual(next.Spec, node.Spec) {
		out, err := a.api.Update(ctx, next, opts)
		if err != nil {
			return fmt.Errorf("nodeagent: update node %s: %w", a.cfg.NodeName, err)
		}
		if node, ok = out.(*corev1.Node); !ok {
			return fmt.Errorf("nodeagent: update node %s: got %T", a.cfg.NodeName, out)
		}
		next = node.DeepCopy()
	}
	a.nodeMetaDone = true
	a.setNodeStatus(&next.Status, a.clock.Now())
	if _, err := a.api.UpdateStatus(ctx, next, opts); err != nil {
		return fmt.Errorf("nodeagent: update node status %s: %w", a.cfg.NodeName, err)
	}
	return nil
}

// newNode is the Node as first registered.
func (a *Agent) newNode() *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName}}
	resources.Nodes.SetTypeMeta(n)
	a.reconcileMeta(n, true)
	a.setNodeStatus(&n.Status, a.clock.Now())
	return n
}

// reconcileMeta sets the well-known and configured labels, removes the
// ones a previous configuration set that this one does not, and records
// what it manages in the annotations; labels others set are kept. The
// configured taints are set only when the Node registers (registering), as
// kubelet's --register-with-taints: afterwards a node may not change its
// own taints (NodeRestriction, docs/security.md §3), so a changed --taints
// is reported and left to an admin ("everynode taint").
func (a *Agent) reconcileMeta(n *corev1.Node, registering bool) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	for _, k := range splitList(n.Annotations[AnnotationManagedLabels]) {
		if _, keep := a.cfg.Labels[k]; !keep {
			delete(n.Labels, k)
		}
	}
	for k, v := range a.cfg.Labels {
		n.Labels[k] = v
	}
	for k, v := range a.wellKnownLabels() {
		n.Labels[k] = v
	}
	setList(n.Annotations, AnnotationManagedLabels, sortedKeys(a.cfg.Labels))

	ids := make([]string, 0, len(a.cfg.Taints))
	for _, t := range a.cfg.Taints {
		ids = append(ids, taintID(t))
	}
	slices.Sort(ids)
	if !registering {
		if !a.hasTaints(n) {
			a.log.Warn("--taints differ from the registered node's taints; a node may not change its own taints: an admin changes them with \"everynode taint node "+a.cfg.NodeName+" ...\"",
				"configured", strings.Join(ids, ","))
		}
		return
	}
	n.Spec.Taints = append([]corev1.Taint(nil), a.cfg.Taints...)
	setList(n.Annotations, AnnotationManagedTaints, ids)
}

// hasTaints reports whether n carries every configured taint with its value.
func (a *Agent) hasTaints(n *corev1.Node) bool {
	for _, want := range a.cfg.Taints {
		if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return taintID(t) == taintID(want) && t.Value == want.Value
		}) {
			return false
		}
	}
	return true
}

// setList stores a sorted list in an annotation, removing it when empty.
func setList(ann map[string]string, key string, items []string) {
	if len(items) == 0 {
		delete(ann, key)
		return
	}
	ann[key] = strings.Join(items, ",")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// setNodeStatus fills in the facts the agent reports and a Ready condition
// with a fresh heartbeat; conditions others set are kept. The agent reports
// Ready=True except over a verdict of membership (Unknown, or False because
// the member left): then it only refreshes the heartbeat and leaves the
// status to the node lifecycle controller, which sets it True once gossip
// sees the member alive again. Asserting True there would race gossip: an
// agent that returns registers before the server's gossip has learnt it is
// back, and the controller would flip the Node back to its old verdict.
func (a *Agent) setNodeStatus(s *corev1.NodeStatus, now time.Time) {
	capacity := a.facts.capacity.DeepCopy()
	if capacity == nil {
		capacity = corev1.ResourceList{}
	}
	for k, v := range a.cfg.Capacity {
		capacity[k] = v.DeepCopy()
	}
	s.Capacity = capacity
	s.Allocatable = capacity.DeepCopy()
	s.NodeInfo = corev1.NodeSystemInfo{
		MachineID:               s.NodeInfo.MachineID,
		SystemUUID:              s.NodeInfo.SystemUUID,
		BootID:                  s.NodeInfo.BootID,
		OperatingSystem:         goruntime.GOOS,
		Architecture:            goruntime.GOARCH,
		KernelVersion:           a.facts.kernelVersion,
		OSImage:                 a.facts.osImage,
		ContainerRuntimeVersion: a.runtimeVersion,
		KubeletVersion:          KubeletVersion,
	}
	s.Addresses = nil
	if a.cfg.NodeIP != "" {
		s.Addresses = append(s.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.cfg.NodeIP})
	}
	s.Addresses = append(s.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: a.cfg.NodeName})
	s.DaemonEndpoints.KubeletEndpoint.Port = a.cfg.LogPort
	s.Images = a.present.list()
	if s.Phase == "" {
		s.Phase = corev1.NodeRunning
	}
	ts := metav1.NewTime(now.Truncate(time.Second))
	for _, c := range []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "AgentHasSufficientMemory",
			Message: "agent has sufficient memory available"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "AgentHasNoDiskPressure",
			Message: "agent has no disk pressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "AgentHasSufficientPID",
			Message: "agent has sufficient PID available"},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: reasonAgentReady,
			Message: "everynode agent is posting ready status"},
	} {
		c.LastHeartbeatTime, c.LastTransitionTime = ts, ts
		if cur := nodeCondition(s, c.Type); c.Type == corev1.NodeReady && cur != nil && membershipVerdict(cur) {
			cur.LastHeartbeatTime = ts
			continue
		}
		setNodeCondition(s, c)
	}
}

// membershipVerdict reports whether Ready condition c is one the node
// lifecycle controller set from membership (see setNodeStatus).
func membershipVerdict(c *corev1.NodeCondition) bool {
	return c.Status == corev1.ConditionUnknown || (c.Status == corev1.ConditionFalse && c.Reason == reasonMemberLeft)
}

// nodeCondition returns s's condition of type t, or nil.
func nodeCondition(s *corev1.NodeStatus, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

// setNodeCondition sets one condition, keeping its lastTransitionTime while
// the status does not change.
func setNodeCondition(s *corev1.NodeStatus, c corev1.NodeCondition) {
	old := nodeCondition(s, c.Type)
	if old == nil {
		s.Conditions = append(s.Conditions, c)
		return
	}
	if old.Status == c.Status && !old.LastTransitionTime.IsZero() {
		c.LastTransitionTime = old.LastTransitionTime
	}
	*old = c
}
