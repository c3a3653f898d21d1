package printers

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The columns and cells of PriorityClass and the stored-only kinds, as
// upstream's printers (and, for CustomResourceDefinitions, the default table
// convertor of its registry) compute them. Fields that nothing fills in on
// everynode print as upstream prints them empty: a Service's Cluster-IP is
// <none>, a Deployment is 0/N ready, a PodDisruptionBudget allows 0
// disruptions.

const listMax = 3 // upstream prints at most three addresses or ports

func storedColumns(gk schema.GroupKind) ([]metav1.TableColumnDefinition, bool) {
	col := func(name, typ, desc string) metav1.TableColumnDefinition {
		return metav1.TableColumnDefinition{Name: name, Type: typ, Description: desc}
	}
	wide := func(c metav1.TableColumnDefinition) metav1.TableColumnDefinition { c.Priority = 1; return c }
	switch gk {
	case schema.GroupKind{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:
		d := schedulingv1.PriorityClass{}.SwaggerDoc()
		return []metav1.TableColumnDefinition{nameColumn(), col("Value", "integer", d["value"]),
			col("Global-Default", "boolean", d["globalDefault"]), ageColumn(),
			col("PreemptionPolicy", "string", d["preemptionPolicy"])}, true
	case schema.GroupKind{Kind: "Service"}:
		d := corev1.ServiceSpec{}.SwaggerDoc()
		return []metav1.TableColumnDefinition{nameColumn(), col("Type", "string", d["type"]),
			col("Cluster-IP", "string", d["clusterIP"]), col("External-IP", "string", d["externalIPs"]),
			col("Port(s)", "string", d["ports"]), ageColumn(), wide(col("Selector", "string", d["selector"]))}, true
	case schema.GroupKind{Kind: "Endpoints"}:
		return []metav1.TableColumnDefinition{nameColumn(),
			col("Endpoints", "string", corev1.Endpoints{}.SwaggerDoc()["subsets"]), ageColumn()}, true
	case schema.GroupKind{Group: "discovery.k8s.io", Kind: "EndpointSlice"}:
		d := discoveryv1.EndpointSlice{}.SwaggerDoc()
		return []metav1.TableColumnDefinition{nameColumn(), col("AddressType", "string", d["addressType"]),
			col("Ports", "string", d["ports"]), col("Endpoints", "string", d["endpoints"]), ageColumn()}, true
	case schema.GroupKind{Group: "networking.k8s.io", Kind: "NetworkPolicy"}:
		return []metav1.TableColumnDefinition{nameColumn(),
			col("Pod-Selector", "string", networkingv1.NetworkPolicySpec{}.SwaggerDoc()["podSelector"]), ageColumn()}, true
	case schema.GroupKind{Group: "policy", Kind: "PodDisruptionBudget"}:
		return []metav1.TableColumnDefinition{nameColumn(),
			col("Min Available", "string", "The minimum number of pods that must be available."),
			col("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
			col("Allowed Disruptions", "integer", "Calculated number of pods that may be disrupted at this time."),
			ageColumn()}, true
	case schema.GroupKind{Group: "apps", Kind: "Deployment"}:
		st := appsv1.DeploymentStatus{}.SwaggerDoc()
		return []metav1.TableColumnDefinition{nameColumn(), col("Ready", "string", "Number of the pod with ready state"),
			col("Up-to-date", "string", st["updatedReplicas"]), col("Available", "string", st["availableReplicas"]),
			ageColumn(),
			wide(col("Containers", "string", "Names of each container in the template.")),
			wide(col("Images", "string", "Images referenced by each container in the template.")),
			wide(col("Selector", "string", appsv1.DeploymentSpec{}.SwaggerDoc()["selector"]))}, true
	case schema.GroupKind{Group: "storage.k8s.io", Kind: "StorageClass"}:
		d := storagev1.StorageClass{}.SwaggerDoc()
		return []metav1.TableColumnDefinition{nameColumn(), col("Provisioner", "string", d["provisioner"]),
			col("ReclaimPolicy", "string", d["reclaimPolicy"]), col("VolumeBindingMode", "string", d["volumeBindingMode"]),
			col("AllowVolumeExpansion", "string", d["allowVolumeExpansion"]), ageColumn()}, true
	case schema.GroupKind{Group: "storage.k8s.io", Kind: "CSIDriver"}:
		d := storagev1.CSIDriverSpec{}.SwaggerDoc()
		return []metav1.TableColumnDefinition{nameColumn(), col("AttachRequired", "boolean", d["attachRequired"]),
			col("PodInfoOnMount", "boolean", d["podInfoOnMount"]), col("StorageCapacity", "boolean", d["storageCapacity"]),
			col("TokenRequests", "string", d["tokenRequests"]), col("RequiresRepublish", "boolean", d["requiresRepublish"]),
			col("Modes", "string", d["volumeLifecycleModes"]), ageColumn()}, true
	case schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:
		return []metav1.TableColumnDefinition{nameColumn(),
			col("Created At", "date", metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"])}, true
	case schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"},
		schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:
		return []metav1.TableColumnDefinition{nameColumn(),
			col("Webhooks", "integer", "Webhooks indicates the number of webhooks registered in this configuration"),
			ageColumn()}, true
	}
	return nil, false
}

func storedCells(obj runtime.Object, now time.Time) ([]any, bool) {
	switch o := obj.(type) {
	case *schedulingv1.PriorityClass:
		policy := ""
		if o.PreemptionPolicy != nil {
			policy = string(*o.PreemptionPolicy)
		}
		return []any{o.Name, int64(o.Value), o.GlobalDefault, Age(o.CreationTimestamp, now), policy}, true
	case *corev1.Service:
		clusterIP := "<none>"
		if len(o.Spec.ClusterIPs) > 0 {
			clusterIP = o.Spec.ClusterIPs[0]
		}
		ports := servicePorts(o.Spec.Ports)
		if ports == "" {
			ports = "<none>"
		}
		return []any{o.Name, string(o.Spec.Type), clusterIP, serviceExternalIP(o), ports,
			Age(o.CreationTimestamp, now), labels.FormatLabels(o.Spec.Selector)}, true
	case *corev1.Endpoints:
		return []any{o.Name, endpointsString(o), Age(o.CreationTimestamp, now)}, true
	case *discoveryv1.EndpointSlice:
		var ports, addrs []string
		for _, p := range o.Ports {
			switch {
			case p.Port != nil:
				ports = append(ports, strconv.Itoa(int(*p.Port)))
			case p.Name != nil:
				ports = append(ports, *p.Name)
			default:
				ports = append(ports, "*")
			}
		}
		for _, e := range o.Endpoints {
			addrs = append(addrs, e.Addresses...)
		}
		return []any{o.Name, string(o.AddressType), listWithMore(ports), listWithMore(addrs), Age(o.CreationTimestamp, now)}, true
	case *networkingv1.NetworkPolicy:
		return []any{o.Name, metav1.FormatLabelSelector(&o.Spec.PodSelector), Age(o.CreationTimestamp, now)}, true
	case *policyv1.PodDisruptionBudget:
		minAvail, maxUnavail := "N/A", "N/A"
		if o.Spec.MinAvailable != nil {
			minAvail = o.Spec.MinAvailable.String()
		}
		if o.Spec.MaxUnavailable != nil {
			maxUnavail = o.Spec.MaxUnavailable.String()
		}
		return []any{o.Name, minAvail, maxUnavail, int64(o.Status.DisruptionsAllowed), Age(o.CreationTimestamp, now)}, true
	case *appsv1.Deployment:
		var desired int32
		if o.Spec.Replicas != nil {
			desired = *o.Spec.Replicas
		}
		selector := "<invalid>"
		if sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector); err == nil {
			selector = sel.String()
		}
		names, images := containerCells(o.Spec.Template.Spec.Containers)
		return []any{o.Name, fmt.Sprintf("%d/%d", o.Status.ReadyReplicas, desired), int64(o.Status.UpdatedReplicas),
			int64(o.Status.AvailableReplicas), Age(o.CreationTimestamp, now), names, images, selector}, true
	case *storagev1.StorageClass:
		name := o.Name
		if o.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" ||
			o.Annotations["storageclass.beta.kubernetes.io/is-default-class"] == "true" {
			name += " (default)"
		}
		reclaim, binding, expand := string(corev1.PersistentVolumeReclaimDelete), string(storagev1.VolumeBindingImmediate), false
		if o.ReclaimPolicy != nil {
			reclaim = string(*o.ReclaimPolicy)
		}
		if o.VolumeBindingMode != nil {
			binding = string(*o.VolumeBindingMode)
		}
		if o.AllowVolumeExpansion != nil {
			expand = *o.AllowVolumeExpansion
		}
		return []any{name, o.Provisioner, reclaim, binding, expand, Age(o.CreationTimestamp, now)}, true
	case *storagev1.CSIDriver:
		return csiDriverCells(o, now), true
	case *apiextensionsv1.CustomResourceDefinition:
		return []any{o.Name, o.CreationTimestamp.UTC().Format(time.RFC3339)}, true
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		return []any{o.Name, int64(len(o.Webhooks)), Age(o.CreationTimestamp, now)}, true
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		return []any{o.Name, int64(len(o.Webhooks)), Age(o.CreationTimestamp, now)}, true
	}
	return nil, false
}

func csiDriverCells(o *storagev1.CSIDriver, now time.Time) []any {
	b := func(p *bool, def bool) bool {
		if p == nil {
			return def
		}
		return *p
	}
	var modes []string
	for _, m := range o.Spec.VolumeLifecycleModes {
		modes = append(modes, string(m))
	}
	modeStr := strings.Join(modes, ",")
	if modeStr == "" {
		modeStr = "<none>"
	}
	tokens := "<unset>"
	if o.Spec.TokenRequests != nil {
		var auds []string
		for _, t := range o.Spec.TokenRequests {
			auds = append(auds, t.Audience)
		}
		tokens = strings.Join(auds, ",")
	}
	return []any{o.Name, b(o.Spec.AttachRequired, true), b(o.Spec.PodInfoOnMount, false), b(o.Spec.StorageCapacity, false),
		tokens, b(o.Spec.RequiresRepublish, false), modeStr, Age(o.CreationTimestamp, now)}
}

// containerCells are the Containers and Images cells of a pod template.
func containerCells(cs []corev1.Container) (names, images string) {
	var n, i []string
	for _, c := range cs {
		n = append(n, c.Name)
		i = append(i, c.Image)
	}
	return strings.Join(n, ","), strings.Join(i, ",")
}

// servicePorts is upstream's makePortString: "80/TCP", "80:30080/TCP".
func servicePorts(ports []corev1.ServicePort) string {
	pieces := make([]string, len(ports))
	for i, p := range ports {
		pieces[i] = fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if p.NodePort > 0 {
			pieces[i] = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
		}
	}
	return strings.Join(pieces, ",")
}

// serviceExternalIP is upstream's getServiceExternalIP (wide form).
func serviceExternalIP(svc *corev1.Service) string {
	switch svc.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		if len(svc.Spec.ExternalIPs) > 0 {
			return strings.Join(svc.Spec.ExternalIPs, ",")
		}
		return "<none>"
	case corev1.ServiceTypeLoadBalancer:
		seen := map[string]bool{}
		var lb []string
		for _, in := range svc.Status.LoadBalancer.Ingress {
			v := in.IP
			if v == "" {
				v = in.Hostname
			}
			if v != "" && !seen[v] {
				seen[v] = true
				lb = append(lb, v)
			}
		}
		sort.Strings(lb)
		all := append(lb, svc.Spec.ExternalIPs...)
		if len(all) == 0 {
			return "<pending>"
		}
		return strings.Join(all, ",")
	case corev1.ServiceTypeExternalName:
		return svc.Spec.ExternalName
	}
	return "<unknown>"
}

// endpointsString is upstream's formatEndpoints: at most three host:port
// pairs (addresses alone for subsets without ports) and how many more.
func endpointsString(ep *corev1.Endpoints) string {
	if len(ep.Subsets) == 0 {
		return "<none>"
	}
	var list []string
	count := 0
	add := func(s string) {
		count++
		if len(list) < listMax {
			list = append(list, s)
		}
	}
	for _, ss := range ep.Subsets {
		if len(ss.Ports) == 0 {
			for _, a := range ss.Addresses {
				add(a.IP)
			}
			continue
		}
		for _, p := range ss.Ports {
			for _, a := range ss.Addresses {
				add(net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
			}
		}
	}
	ret := strings.Join(list, ",")
	if count > listMax {
		return fmt.Sprintf("%s + %d more...", ret, count-listMax)
	}
	return ret
}

// listWithMore is upstream's listWithMoreString: the first three, how many
// more, "<unset>" for none.
func listWithMore(items []string) string {
	if len(items) == 0 {
		return "<unset>"
	}
	if len(items) > listMax {
		return fmt.Sprintf("%s + %d more...", strings.Join(items[:listMax], ","), len(items)-listMax)
	}
	return strings.Join(items, ",")
}
