package cli

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// column is one column of kubectl's human-readable output.
type column struct {
	name string
	wide bool // shown only with -o wide (priority 1 in a Table)
}

// tableFormat is the columns of one resource and how to compute a row.
type tableFormat struct {
	columns []column
	cells   func(obj client.Object, now time.Time) []string
}

// formats reproduces kubectl's server-side printers for the served resources
// (upstream pkg/printers/internalversion/printers.go).
func formatFor(r *resources.Resource) tableFormat {
	switch r {
	case resources.DaemonSets:
		return tableFormat{cols("NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE SELECTOR", "AGE", "*CONTAINERS", "*IMAGES", "*SELECTOR"), daemonSetCells}
	case resources.Pods:
		return tableFormat{cols("NAME", "READY", "STATUS", "RESTARTS", "AGE", "*IP", "*NODE", "*NOMINATED NODE", "*READINESS GATES"), podCells}
	case resources.Nodes:
		return tableFormat{cols("NAME", "STATUS", "ROLES", "AGE", "VERSION", "*INTERNAL-IP", "*EXTERNAL-IP", "*OS-IMAGE", "*KERNEL-VERSION", "*CONTAINER-RUNTIME"), nodeCells}
	case resources.Namespaces:
		return tableFormat{cols("NAME", "STATUS", "AGE"), namespaceCells}
	case resources.ControllerRevisions:
		return tableFormat{cols("NAME", "CONTROLLER", "REVISION", "AGE"), revisionCells}
	case resources.Events:
		return tableFormat{cols("LAST SEEN", "TYPE", "REASON", "OBJECT", "*SUBOBJECT", "*SOURCE", "MESSAGE", "*FIRST SEEN", "*COUNT", "*NAME"), eventCells}
	}
	return tableFormat{cols("NAME", "AGE"), func(o client.Object, now time.Time) []string {
		return []string{o.GetName(), age(o.GetCreationTimestamp(), now)}
	}}
}

func cols(names ...string) []column {
	out := make([]column, len(names))
	for i, n := range names {
		wide := strings.HasPrefix(n, "*")
		out[i] = column{name: strings.TrimPrefix(n, "*"), wide: wide}
	}
	return out
}

// tablePrinter writes rows aligned like kubectl (three spaces between columns).
type tablePrinter struct {
	tw            *tabwriter.Writer
	format        tableFormat
	wide          bool
	withNamespace bool
	headerDone    bool
}

func newTablePrinter(w io.Writer, r *resources.Resource, wide, withNamespace bool) *tablePrinter {
	return &tablePrinter{
		tw:            tabwriter.NewWriter(w, 6, 4, 3, ' ', 0),
		format:        formatFor(r),
		wide:          wide,
		withNamespace: withNamespace,
	}
}

func (p *tablePrinter) row(cells []string, namespace string) {
	var out []string
	if p.withNamespace {
		out = append(out, namespace)
	}
	for i, c := range p.format.columns {
		if c.wide && !p.wide {
			continue
		}
		v := ""
		if i < len(cells) {
			v = cells[i]
		}
		out = append(out, v)
	}
	fmt.Fprintln(p.tw, strings.Join(out, "\t"))
}

// print writes objects (with a header first, once) and flushes.
func (p *tablePrinter) print(objs []client.Object, now time.Time) error {
	if !p.headerDone {
		var hdr []string
		for _, c := range p.format.columns {
			hdr = append(hdr, c.name)
		}
		p.row(hdr, "NAMESPACE")
		p.headerDone = true
	}
	for _, o := range objs {
		p.row(p.format.cells(o, now), o.GetNamespace())
	}
	return p.tw.Flush()
}

func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func daemonSetCells(o client.Object, now time.Time) []string {
	ds := o.(*appsv1.DaemonSet)
	var names, images []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
		images = append(images, c.Image)
	}
	st := ds.Status
	return []string{
		ds.Name,
		itoa(st.DesiredNumberScheduled), itoa(st.CurrentNumberScheduled), itoa(st.NumberReady),
		itoa(st.UpdatedNumberScheduled), itoa(st.NumberAvailable),
		labels.FormatLabels(ds.Spec.Template.Spec.NodeSelector),
		age(ds.CreationTimestamp, now),
		strings.Join(names, ","), strings.Join(images, ","),
		metav1.FormatLabelSelector(ds.Spec.Selector),
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func namespaceCells(o client.Object, now time.Time) []string {
	ns := o.(*corev1.Namespace)
	return []string{ns.Name, string(ns.Status.Phase), age(ns.CreationTimestamp, now)}
}

func revisionCells(o client.Object, now time.Time) []string {
	cr := o.(*appsv1.ControllerRevision)
	controller := "<none>"
	if ref := metav1.GetControllerOf(cr); ref != nil {
		gv, _ := schema.ParseGroupVersion(ref.APIVersion)
		controller = strings.ToLower(ref.Kind)
		if gv.Group != "" {
			controller += "." + gv.Group
		}
		controller += "/" + ref.Name
	}
	return []string{cr.Name, controller, strconv.FormatInt(cr.Revision, 10), age(cr.CreationTimestamp, now)}
}

func nodeCells(o client.Object, now time.Time) []string {
	n := o.(*corev1.Node)
	status := "Unknown"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			switch c.Status {
			case corev1.ConditionTrue:
				status = "Ready"
			case corev1.ConditionFalse:
				status = "NotReady"
			}
		}
	}
	if n.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}
	info := n.Status.NodeInfo
	return []string{
		n.Name, status, nodeRoles(n), age(n.CreationTimestamp, now), info.KubeletVersion,
		orNone(nodeAddress(n, corev1.NodeInternalIP)), orNone(nodeAddress(n, corev1.NodeExternalIP)),
		orUnknown(info.OSImage), orUnknown(info.KernelVersion), orUnknown(info.ContainerRuntimeVersion),
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

func nodeRoles(n *corev1.Node) string {
	roles := map[string]bool{}
	for k, v := range n.Labels {
		switch {
		case strings.HasPrefix(k, "node-role.kubernetes.io/"):
			if r := strings.TrimPrefix(k, "node-role.kubernetes.io/"); r != "" {
				roles[r] = true
			}
		case k == "kubernetes.io/role" && v != "":
			roles[v] = true
		}
	}
	if len(roles) == 0 {
		return "<none>"
	}
	out := make([]string, 0, len(roles))
	for r := range roles {
		out = append(out, r)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func nodeAddress(n *corev1.Node, t corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return ""
}

func podCells(o client.Object, now time.Time) []string {
	pod := o.(*corev1.Pod)
	restarts, ready := 0, 0
	var lastRestart time.Time
	reason := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		reason = pod.Status.Reason
	}
	initializing := false
	for i, c := range pod.Status.InitContainerStatuses {
		restarts += int(c.RestartCount)
		if t := c.LastTerminationState.Terminated; t != nil && t.FinishedAt.After(lastRestart) {
			lastRestart = t.FinishedAt.Time
		}
		switch {
		case c.State.Terminated != nil && c.State.Terminated.ExitCode == 0:
			continue
		case c.State.Terminated != nil:
			reason = "Init:" + orDefault(c.State.Terminated.Reason, fmt.Sprintf("ExitCode:%d", c.State.Terminated.ExitCode))
		case c.State.Waiting != nil && c.State.Waiting.Reason != "" && c.State.Waiting.Reason != "PodInitializing":
			reason = "Init:" + c.State.Waiting.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
		}
		initializing = true
		break
	}
	if !initializing {
		hasRunning := false
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			c := pod.Status.ContainerStatuses[i]
			restarts += int(c.RestartCount)
			if t := c.LastTerminationState.Terminated; t != nil && t.FinishedAt.After(lastRestart) {
				lastRestart = t.FinishedAt.Time
			}
			switch {
			case c.State.Waiting != nil && c.State.Waiting.Reason != "":
				reason = c.State.Waiting.Reason
			case c.State.Terminated != nil && c.State.Terminated.Reason != "":
				reason = c.State.Terminated.Reason
			case c.State.Terminated != nil && c.State.Terminated.Signal != 0:
				reason = fmt.Sprintf("Signal:%d", c.State.Terminated.Signal)
			case c.State.Terminated != nil:
				reason = fmt.Sprintf("ExitCode:%d", c.State.Terminated.ExitCode)
			case c.Ready && c.State.Running != nil:
				hasRunning = true
				ready++
			}
		}
		if reason == "Completed" && hasRunning {
			reason = "Running"
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
					reason = "NotReady"
				}
			}
		}
	}
	if pod.DeletionTimestamp != nil {
		reason = "Terminating"
		if pod.Status.Reason == "NodeLost" {
			reason = "Unknown"
		}
	}
	restartStr := strconv.Itoa(restarts)
	if restarts > 0 && !lastRestart.IsZero() {
		restartStr = fmt.Sprintf("%d (%s ago)", restarts, duration.HumanDuration(now.Sub(lastRestart)))
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
				if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
					trueGates++
				}
			}
		}
		gates = fmt.Sprintf("%d/%d", trueGates, n)
	}
	return []string{
		pod.Name, fmt.Sprintf("%d/%d", ready, len(pod.Spec.Containers)), reason, restartStr,
		age(pod.CreationTimestamp, now),
		orNone(ip), orNone(pod.Spec.NodeName), orNone(pod.Status.NominatedNodeName), gates,
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func eventCells(o client.Object, now time.Time) []string {
	ev := o.(*corev1.Event)
	first := age(ev.FirstTimestamp, now)
	if ev.FirstTimestamp.IsZero() {
		first = microAge(ev.EventTime, now)
	}
	last := age(ev.LastTimestamp, now)
	if ev.LastTimestamp.IsZero() {
		last = first
	}
	count := ev.Count
	if ev.Series != nil {
		last = microAge(ev.Series.LastObservedTime, now)
		count = ev.Series.Count
	} else if count == 0 {
		count = 1
	}
	target := strings.ToLower(ev.InvolvedObject.Kind)
	if ev.InvolvedObject.Name != "" {
		target += "/" + ev.InvolvedObject.Name
	}
	return []string{
		last, ev.Type, ev.Reason, target, ev.InvolvedObject.FieldPath, eventSource(ev),
		strings.TrimSpace(ev.Message), first, itoa(count), ev.Name,
	}
}

func microAge(t metav1.MicroTime, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func eventSource(ev *corev1.Event) string {
	component, host := ev.Source.Component, ev.Source.Host
	if component == "" {
		component, host = ev.ReportingController, ev.ReportingInstance
	}
	if host == "" {
		return component
	}
	return component + ", " + host
}
