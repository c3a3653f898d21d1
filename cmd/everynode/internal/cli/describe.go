package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/daemonset"
	"github.com/everynode/everynode/resources"
)

// DescribeCommand is "everynode describe KIND NAME...".
type DescribeCommand struct {
	main *Main

	clientFlags
	r     *resources.Resource
	names []string
}

func (c *DescribeCommand) flags(*pflag.FlagSet) {}

func (c *DescribeCommand) complete(pos []string) error {
	var err error
	if c.r, c.names, err = splitKindNames(pos); err != nil {
		return err
	}
	if c.r == nil {
		return usageError("you must specify the type of resource to describe", "use one of: "+kindList())
	}
	if len(c.names) == 0 {
		return usageError("describe needs a NAME", "run \"everynode get "+c.r.Name+"\" to see the names")
	}
	return nil
}

// Run implements the command.
func (c *DescribeCommand) Run(ctx context.Context, std IO) error {
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	for i, name := range c.names {
		obj, err := h.Get(ctx, c.r, c.ns(), name)
		if err != nil {
			return explainTransport(err, h.Server())
		}
		var pods []client.Object
		var nodes *planSnapshot
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			if sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector); err == nil {
				pods, _, _ = h.List(ctx, resources.Pods, ds.Namespace, client.ListOptions{LabelSelector: sel.String()})
			}
			// The per-node table is best effort, as the pods are.
			if in, err := planInput(ctx, h, ds); err == nil {
				nodes = &in
			}
		}
		events, err := objectEvents(ctx, h, obj)
		if err != nil {
			return explainTransport(err, h.Server())
		}
		if i > 0 {
			fmt.Fprintln(std.Out)
		}
		if err := describeWithNodes(std.Out, obj, pods, nodes, events, c.main.now()); err != nil {
			return err
		}
	}
	return nil
}

// objectEvents lists the events about obj, oldest first. A server without
// events (404) yields none, as kubectl tolerates.
func objectEvents(ctx context.Context, h client.Interface, obj client.Object) ([]*corev1.Event, error) {
	sel := fmt.Sprintf("involvedObject.name=%s,involvedObject.namespace=%s,involvedObject.uid=%s", obj.GetName(), obj.GetNamespace(), obj.GetUID())
	ns := obj.GetNamespace()
	items, _, err := h.List(ctx, resources.Events, ns, client.ListOptions{FieldSelector: sel})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Event, 0, len(items))
	for _, it := range items {
		if ev, ok := it.(*corev1.Event); ok {
			out = append(out, ev)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return eventTime(out[i]).Before(eventTime(out[j])) })
	return out, nil
}

func eventTime(ev *corev1.Event) time.Time {
	if !ev.LastTimestamp.IsZero() {
		return ev.LastTimestamp.Time
	}
	if !ev.EventTime.IsZero() {
		return ev.EventTime.Time
	}
	return ev.FirstTimestamp.Time
}

// describe writes a kubectl-like description of obj.
func describe(out io.Writer, obj client.Object, pods []client.Object, events []*corev1.Event, now time.Time) error {
	return describeWithNodes(out, obj, pods, nil, events, now)
}

// describeWithNodes is describe with, for a DaemonSet, the per-node table
// of "rollout status --nodes" computed from nodes (nil: none).
func describeWithNodes(out io.Writer, obj client.Object, pods []client.Object, nodes *planSnapshot, events []*corev1.Event, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	line := func(indent int, format string, args ...any) {
		fmt.Fprintf(w, strings.Repeat("  ", indent)+format+"\n", args...)
	}
	line(0, "Name:\t%s", obj.GetName())
	if obj.GetNamespace() != "" {
		line(0, "Namespace:\t%s", obj.GetNamespace())
	}
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		describeDaemonSet(line, o, pods)
		if nodes != nil {
			if err := w.Flush(); err != nil {
				return err
			}
			describeNodeProgress(out, o, *nodes, now)
		}
	case *corev1.Pod:
		describeMeta(line, o)
		describePod(line, o)
	case *corev1.Node:
		describeMeta(line, o)
		describeNode(line, o)
	case *corev1.Namespace:
		describeMeta(line, o)
		line(0, "Status:\t%s", o.Status.Phase)
	case *appsv1.ControllerRevision:
		describeMeta(line, o)
		line(0, "Controller:\t%s", revisionCells(o, now)[1])
		line(0, "Revision:\t%d", o.Revision)
	case *corev1.Event:
		describeMeta(line, o)
		line(0, "Type:\t%s", o.Type)
		line(0, "Reason:\t%s", o.Reason)
		line(0, "Object:\t%s", eventCells(o, now)[3])
		line(0, "Message:\t%s", o.Message)
	default:
		describeMeta(line, obj)
	}
	describeEvents(line, events, now)
	return w.Flush()
}

type lineFunc func(indent int, format string, args ...any)

func describeMeta(line lineFunc, o metav1.Object) {
	line(0, "Labels:\t%s", labelLines(o.GetLabels()))
	line(0, "Annotations:\t%s", annotationLines(o.GetAnnotations()))
	line(0, "CreationTimestamp:\t%s", o.GetCreationTimestamp().Time.Format(time.RFC1123Z))
}

// labelLines formats a map one "k=v" per line, aligned under the first.
func labelLines(m map[string]string) string {
	if len(m) == 0 {
		return "<none>"
	}
	keys := sortedKeys(m)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, "\n\t")
}

func annotationLines(m map[string]string) string {
	keys := sortedKeys(m)
	var parts []string
	for _, k := range keys {
		if k == LastAppliedAnnotation {
			continue
		}
		parts = append(parts, k+": "+m[k])
	}
	if len(parts) == 0 {
		return "<none>"
	}
	return strings.Join(parts, "\n\t")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func describeDaemonSet(line lineFunc, ds *appsv1.DaemonSet, pods []client.Object) {
	line(0, "Selector:\t%s", metav1.FormatLabelSelector(ds.Spec.Selector))
	line(0, "Node-Selector:\t%s", labels.FormatLabels(ds.Spec.Template.Spec.NodeSelector))
	line(0, "Labels:\t%s", labelLines(ds.Labels))
	line(0, "Annotations:\t%s", annotationLines(ds.Annotations))
	st := ds.Status
	line(0, "Desired Number of Nodes Scheduled: %d", st.DesiredNumberScheduled)
	line(0, "Current Number of Nodes Scheduled: %d", st.CurrentNumberScheduled)
	line(0, "Number of Nodes Scheduled with Up-to-date Pods: %d", st.UpdatedNumberScheduled)
	line(0, "Number of Nodes Scheduled with Available Pods: %d", st.NumberAvailable)
	line(0, "Number of Nodes Misscheduled: %d", st.NumberMisscheduled)
	line(0, "Pods Status:\t%s", podsStatus(ds, pods))
	strategy := string(ds.Spec.UpdateStrategy.Type)
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		strategy += fmt.Sprintf(" (maxUnavailable %s, maxSurge %s)", intOrStringOrNone(ru.MaxUnavailable), intOrStringOrNone(ru.MaxSurge))
	}
	line(0, "Update Strategy:\t%s", orNone(strategy))
	line(0, "Pod Template:")
	describeTemplate(line, &ds.Spec.Template)
}

func podsStatus(ds *appsv1.DaemonSet, pods []client.Object) string {
	var running, waiting, succeeded, failed int
	for _, o := range pods {
		p, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != ds.UID {
			continue
		}
		switch p.Status.Phase {
		case corev1.PodRunning:
			running++
		case corev1.PodPending:
			waiting++
		case corev1.PodSucceeded:
			succeeded++
		case corev1.PodFailed:
			failed++
		}
	}
	return fmt.Sprintf("%d Running / %d Waiting / %d Succeeded / %d Failed", running, waiting, succeeded, failed)
}

func describeTemplate(line lineFunc, t *corev1.PodTemplateSpec) {
	line(1, "Labels:\t%s", labelLines(t.Labels))
	if len(t.Spec.Tolerations) > 0 {
		var tols []string
		for _, tol := range t.Spec.Tolerations {
			tols = append(tols, kubectlToleration(tol))
		}
		line(1, "Tolerations:\t%s", strings.Join(tols, "\n\t"))
	}
	line(1, "Containers:")
	describeContainers(line, t.Spec.Containers)
	if len(t.Spec.Volumes) > 0 {
		line(1, "Volumes:")
		for _, v := range t.Spec.Volumes {
			kind := "<other>"
			switch {
			case v.HostPath != nil:
				kind = "HostPath (" + v.HostPath.Path + ")"
			case v.EmptyDir != nil:
				kind = "EmptyDir"
			case v.ConfigMap != nil:
				kind = "ConfigMap (" + v.ConfigMap.Name + ")"
			case v.Secret != nil:
				kind = "Secret (" + v.Secret.SecretName + ")"
			}
			line(2, "%s:\t%s", v.Name, kind)
		}
	}
}

func describeContainers(line lineFunc, cs []corev1.Container) {
	for _, c := range cs {
		line(1, " %s:", c.Name)
		line(2, "Image:\t%s", c.Image)
		var ports []string
		for _, p := range c.Ports {
			ports = append(ports, fmt.Sprintf("%d/%s", p.ContainerPort, orDefault(string(p.Protocol), "TCP")))
		}
		line(2, "Port:\t%s", orNone(strings.Join(ports, ", ")))
		if len(c.Command) > 0 {
			line(2, "Command:\t%s", strings.Join(c.Command, " "))
		}
		if len(c.Args) > 0 {
			line(2, "Args:\t%s", strings.Join(c.Args, " "))
		}
		if len(c.Resources.Limits) > 0 {
			line(2, "Limits:\t%s", resourceList(c.Resources.Limits))
		}
		if len(c.Resources.Requests) > 0 {
			line(2, "Requests:\t%s", resourceList(c.Resources.Requests))
		}
		var mounts []string
		for _, m := range c.VolumeMounts {
			mode := "rw"
			if m.ReadOnly {
				mode = "ro"
			}
			mounts = append(mounts, fmt.Sprintf("%s from %s (%s)", m.MountPath, m.Name, mode))
		}
		line(2, "Mounts:\t%s", orNone(strings.Join(mounts, "\n\t")))
	}
}

func resourceList(rl corev1.ResourceList) string {
	var parts []string
	for name, q := range rl {
		parts = append(parts, fmt.Sprintf("%s: %s", name, q.String()))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func intOrStringOrNone(v *intstr.IntOrString) string {
	if v == nil {
		return "<none>"
	}
	return v.String()
}

func describePod(line lineFunc, p *corev1.Pod) {
	line(0, "Node:\t%s", orNone(p.Spec.NodeName))
	line(0, "Status:\t%s", p.Status.Phase)
	ip := ""
	if len(p.Status.PodIPs) > 0 {
		ip = p.Status.PodIPs[0].IP
	}
	line(0, "IP:\t%s", ip)
	if ref := metav1.GetControllerOf(p); ref != nil {
		line(0, "Controlled By:\t%s/%s", ref.Kind, ref.Name)
	}
	line(0, "Containers:")
	describeContainers(line, p.Spec.Containers)
	for _, cs := range p.Status.ContainerStatuses {
		state := "Unknown"
		switch {
		case cs.State.Running != nil:
			state = "Running"
		case cs.State.Waiting != nil:
			state = "Waiting (" + cs.State.Waiting.Reason + ")"
		case cs.State.Terminated != nil:
			state = fmt.Sprintf("Terminated (%s, exit code %d)", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		}
		line(1, " %s:\tState: %s, Ready: %t, Restart Count: %d", cs.Name, state, cs.Ready, cs.RestartCount)
	}
	if len(p.Status.Conditions) > 0 {
		line(0, "Conditions:")
		line(1, "Type\tStatus")
		for _, c := range p.Status.Conditions {
			line(1, "%s\t%s", c.Type, c.Status)
		}
	}
}

func describeNode(line lineFunc, n *corev1.Node) {
	var taints []string
	for _, t := range n.Spec.Taints {
		taints = append(taints, t.ToString())
	}
	line(0, "Taints:\t%s", orNone(strings.Join(taints, "\n\t")))
	line(0, "Unschedulable:\t%t", n.Spec.Unschedulable)
	line(0, "Conditions:")
	line(1, "Type\tStatus\tLastHeartbeatTime\tReason\tMessage")
	line(1, "----\t------\t-----------------\t------\t-------")
	for _, c := range n.Status.Conditions {
		line(1, "%s\t%s\t%s\t%s\t%s", c.Type, c.Status, c.LastHeartbeatTime.Time.Format(time.RFC1123Z), c.Reason, c.Message)
	}
	line(0, "Addresses:")
	for _, a := range n.Status.Addresses {
		line(1, "%s:\t%s", a.Type, a.Address)
	}
	info := n.Status.NodeInfo
	line(0, "System Info:")
	line(1, "OS Image:\t%s", info.OSImage)
	line(1, "Kernel Version:\t%s", info.KernelVersion)
	line(1, "Architecture:\t%s", info.Architecture)
	line(1, "Container Runtime Version:\t%s", info.ContainerRuntimeVersion)
	line(1, "Kubelet Version:\t%s", info.KubeletVersion)
}

func describeEvents(line lineFunc, events []*corev1.Event, now time.Time) {
	if len(events) == 0 {
		line(0, "Events:\t<none>")
		return
	}
	line(0, "Events:")
	line(1, "Type\tReason\tAge\tFrom\tMessage")
	line(1, "----\t------\t----\t----\t-------")
	for _, ev := range events {
		cells := eventCells(ev, now)
		ageStr := cells[0]
		if ev.Count > 1 {
			ageStr = fmt.Sprintf("%s (x%d over %s)", cells[0], ev.Count, cells[7])
		}
		line(1, "%s\t%s\t%s\t%s\t%s", ev.Type, ev.Reason, ageStr, eventSource(ev), strings.TrimSpace(ev.Message))
	}
}

// describeNodeProgress is describe's Nodes section: the table of
// "rollout status --nodes", indented.
func describeNodeProgress(out io.Writer, ds *appsv1.DaemonSet, in planSnapshot, now time.Time) {
	rows, hash := daemonset.Progress(ds, in.nodes, in.pods, in.revs, metav1.NewTime(now))
	var b strings.Builder
	writeNodeTable(&b, rows, hash, now)
	fmt.Fprintf(out, "Nodes (update revision %s):\n", hash)
	for _, l := range strings.SplitAfter(b.String(), "\n") {
		if l != "" {
			io.WriteString(out, "  "+l)
		}
	}
}
