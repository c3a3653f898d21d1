// Package printers computes the human-readable table columns and cells of the
// served resources, as Kubernetes' server-side printers do (upstream
// pkg/printers/internalversion/printers.go, which is not importable). The API
// server serves them as metav1.Table; the everynode CLI prints the same cells.
package printers

import (
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Columns returns the column definitions for objects of kind gk, in cell
// order. Columns with Priority 1 are the "-o wide" ones. Unknown kinds get
// kubectl's default Name and Age.
func Columns(gk schema.GroupKind) []metav1.TableColumnDefinition {
	if cols := rbacColumns(gk); cols != nil {
		return cols
	}
	switch gk {
	case schema.GroupKind{Group: "apps", Kind: "DaemonSet"}:
		return daemonSetColumns()
	case schema.GroupKind{Kind: "Pod"}:
		return podColumns()
	case schema.GroupKind{Kind: "Node"}:
		return nodeColumns()
	case schema.GroupKind{Kind: "Namespace"}:
		return []metav1.TableColumnDefinition{
			nameColumn(),
			{Name: "Status", Type: "string", Description: "The status of the namespace"},
			ageColumn(),
		}
	case schema.GroupKind{Group: "apps", Kind: "ControllerRevision"}:
		return []metav1.TableColumnDefinition{
			nameColumn(),
			{Name: "Controller", Type: "string", Description: "Controller of the object"},
			{Name: "Revision", Type: "string", Description: appsv1.ControllerRevision{}.SwaggerDoc()["revision"]},
			ageColumn(),
		}
	case schema.GroupKind{Kind: "Event"}:
		return eventColumns()
	case schema.GroupKind{Kind: "ConfigMap"}:
		return []metav1.TableColumnDefinition{
			nameColumn(),
			{Name: "Data", Type: "string", Description: corev1.ConfigMap{}.SwaggerDoc()["data"]},
			ageColumn(),
		}
	case schema.GroupKind{Kind: "Secret"}:
		return []metav1.TableColumnDefinition{
			nameColumn(),
			{Name: "Type", Type: "string", Description: corev1.Secret{}.SwaggerDoc()["type"]},
			{Name: "Data", Type: "string", Description: corev1.Secret{}.SwaggerDoc()["data"]},
			ageColumn(),
		}
	case schema.GroupKind{Kind: "ServiceAccount"}:
		return []metav1.TableColumnDefinition{
			nameColumn(),
			{Name: "Secrets", Type: "string", Description: corev1.ServiceAccount{}.SwaggerDoc()["secrets"]},
			ageColumn(),
		}
	}
	if cols, ok := storedColumns(gk); ok {
		return cols
	}
	return []metav1.TableColumnDefinition{nameColumn(), ageColumn()}
}

// Cells returns one row's cells for obj, matching Columns of its kind: always
// every cell, wide ones included. Numbers are int64, everything else a string.
// now is the reference for ages.
func Cells(obj runtime.Object, now time.Time) []any {
	if cells, ok := storedCells(obj, now); ok {
		return cells
	}
	if cells := rbacCells(obj, now); cells != nil {
		return cells
	}
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		return daemonSetCells(o, now)
	case *corev1.Pod:
		return podCells(o, now)
	case *corev1.Node:
		return nodeCells(o, now)
	case *corev1.Namespace:
		return []any{o.Name, string(o.Status.Phase), Age(o.CreationTimestamp, now)}
	case *appsv1.ControllerRevision:
		return revisionCells(o, now)
	case *corev1.Event:
		return eventCells(o, now)
	case *corev1.ConfigMap:
		return []any{o.Name, int64(len(o.Data) + len(o.BinaryData)), Age(o.CreationTimestamp, now)}
	case *corev1.Secret:
		return []any{o.Name, string(o.Type), int64(len(o.Data)), Age(o.CreationTimestamp, now)}
	case *corev1.ServiceAccount:
		return []any{o.Name, int64(len(o.Secrets)), Age(o.CreationTimestamp, now)}
	case metav1.Object:
		return []any{o.GetName(), Age(o.GetCreationTimestamp(), now)}
	}
	return nil
}

func nameColumn() metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]}
}

func ageColumn() metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]}
}

// Age is kubectl's AGE: a human duration since t, "<unknown>" for a zero time.
func Age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func microAge(t metav1.MicroTime, now time.Time) string {
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

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

func daemonSetColumns() []metav1.TableColumnDefinition {
	st := appsv1.DaemonSetStatus{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		nameColumn(),
		{Name: "Desired", Type: "integer", Description: st["desiredNumberScheduled"]},
		{Name: "Current", Type: "integer", Description: st["currentNumberScheduled"]},
		{Name: "Ready", Type: "integer", Description: st["numberReady"]},
		{Name: "Up-to-date", Type: "integer", Description: st["updatedNumberScheduled"]},
		{Name: "Available", Type: "integer", Description: st["numberAvailable"]},
		{Name: "Node Selector", Type: "string", Description: corev1.PodSpec{}.SwaggerDoc()["nodeSelector"]},
		ageColumn(),
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: appsv1.DaemonSetSpec{}.SwaggerDoc()["selector"]},
	}
}

func daemonSetCells(ds *appsv1.DaemonSet, now time.Time) []any {
	var names, images []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
		images = append(images, c.Image)
	}
	st := ds.Status
	return []any{
		ds.Name,
		int64(st.DesiredNumberScheduled), int64(st.CurrentNumberScheduled), int64(st.NumberReady),
		int64(st.UpdatedNumberScheduled), int64(st.NumberAvailable),
		labels.FormatLabels(ds.Spec.Template.Spec.NodeSelector),
		Age(ds.CreationTimestamp, now),
		strings.Join(names, ","), strings.Join(images, ","),
		metav1.FormatLabelSelector(ds.Spec.Selector),
	}
}

func revisionCells(cr *appsv1.ControllerRevision, now time.Time) []any {
	controller := "<none>"
	if ref := metav1.GetControllerOf(cr); ref != nil {
		gv, _ := schema.ParseGroupVersion(ref.APIVersion)
		controller = strings.ToLower(ref.Kind)
		if gv.Group != "" {
			controller += "." + gv.Group
		}
		controller += "/" + ref.Name
	}
	return []any{cr.Name, controller, cr.Revision, Age(cr.CreationTimestamp, now)}
}

func nodeColumns() []metav1.TableColumnDefinition {
	info := corev1.NodeSystemInfo{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		nameColumn(),
		{Name: "Status", Type: "string", Description: "The status of the node"},
		{Name: "Roles", Type: "string", Description: "The roles of the node"},
		ageColumn(),
		{Name: "Version", Type: "string", Description: info["kubeletVersion"]},
		{Name: "Internal-IP", Type: "string", Priority: 1, Description: corev1.NodeStatus{}.SwaggerDoc()["addresses"]},
		{Name: "External-IP", Type: "string", Priority: 1, Description: corev1.NodeStatus{}.SwaggerDoc()["addresses"]},
		{Name: "OS-Image", Type: "string", Priority: 1, Description: info["osImage"]},
		{Name: "Kernel-Version", Type: "string", Priority: 1, Description: info["kernelVersion"]},
		{Name: "Container-Runtime", Type: "string", Priority: 1, Description: info["containerRuntimeVersion"]},
	}
}

func nodeCells(n *corev1.Node, now time.Time) []any {
	status := "Unknown"
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		// As upstream printNode: any Ready status but True (False or
		// Unknown) prints NotReady; only a missing condition prints Unknown.
		status = "NotReady"
		if c.Status == corev1.ConditionTrue {
			status = "Ready"
		}
	}
	if n.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}
	info := n.Status.NodeInfo
	return []any{
		n.Name, status, nodeRoles(n), Age(n.CreationTimestamp, now), info.KubeletVersion,
		orNone(nodeAddress(n, corev1.NodeInternalIP)), orNone(nodeAddress(n, corev1.NodeExternalIP)),
		orUnknown(info.OSImage), orUnknown(info.KernelVersion), orUnknown(info.ContainerRuntimeVersion),
	}
}

// nodeRoles joins the roles named by node-role.kubernetes.io/<role> label
// keys and the kubernetes.io/role label value, sorted; "<none>" without any.
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

func eventColumns() []metav1.TableColumnDefinition {
	ev := corev1.Event{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		{Name: "Last Seen", Type: "string", Description: ev["lastTimestamp"]},
		{Name: "Type", Type: "string", Description: ev["type"]},
		{Name: "Reason", Type: "string", Description: ev["reason"]},
		{Name: "Object", Type: "string", Description: ev["involvedObject"]},
		{Name: "Subobject", Type: "string", Priority: 1, Description: corev1.ObjectReference{}.SwaggerDoc()["fieldPath"]},
		{Name: "Source", Type: "string", Priority: 1, Description: ev["source"]},
		{Name: "Message", Type: "string", Description: ev["message"]},
		{Name: "First Seen", Type: "string", Priority: 1, Description: ev["firstTimestamp"]},
		{Name: "Count", Type: "string", Priority: 1, Description: ev["count"]},
		{Name: "Name", Type: "string", Priority: 1, Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	}
}

func eventCells(ev *corev1.Event, now time.Time) []any {
	first := Age(ev.FirstTimestamp, now)
	if ev.FirstTimestamp.IsZero() {
		first = microAge(ev.EventTime, now)
	}
	last := Age(ev.LastTimestamp, now)
	if ev.LastTimestamp.IsZero() {
		last = first
	}
	count := ev.Count
	if ev.Series != nil {
		last = microAge(ev.Series.LastObservedTime, now)
		count = ev.Series.Count
	} else if count == 0 {
		count = 1 // singleton events of the new API have no count
	}
	target := strings.ToLower(ev.InvolvedObject.Kind)
	if ev.InvolvedObject.Name != "" {
		target += "/" + ev.InvolvedObject.Name
	}
	return []any{
		last, ev.Type, ev.Reason, target, ev.InvolvedObject.FieldPath, EventSource(ev),
		strings.TrimSpace(ev.Message), first, int64(count), ev.Name,
	}
}

// EventSource is the SOURCE column of an event: "component, host", from the
// legacy source or the reporting controller and instance.
func EventSource(ev *corev1.Event) string {
	component, host := ev.Source.Component, ev.Source.Host
	if component == "" {
		component, host = ev.ReportingController, ev.ReportingInstance
	}
	if host == "" {
		return component
	}
	return component + ", " + host
}

// Text formats one cell as kubectl prints it.
func Text(cell any) string {
	if cell == nil {
		return ""
	}
	return fmt.Sprint(cell)
}
