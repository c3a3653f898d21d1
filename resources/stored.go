package resources

import (
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
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/everynode/everynode/resources/core"
)

// PriorityClasses are scheduling.k8s.io/v1 PriorityClasses: validated and
// served with Kubernetes' rules; the two system classes exist from the start.
var PriorityClasses = &Resource{
	Name: "priorityclasses", Singular: "priorityclass", Group: "scheduling.k8s.io", Version: "v1",
	Kind: "PriorityClass", ShortNames: []string{"pc"},
	New:     func() Object { return &schedulingv1.PriorityClass{} },
	NewList: func() runtime.Object { return &schedulingv1.PriorityClassList{} },
	Proto:   core.ProtoCodecOf[schedulingv1.PriorityClass, schedulingv1.PriorityClassList](),
}

// The kinds that published manifests bundle and that everynode stores and
// serves without acting on them (see StoredOnly). Short names, categories and
// subresources are kube-apiserver's.
var (
	Services = &Resource{
		Name: "services", Singular: "service", Version: "v1", Kind: "Service", Namespaced: true,
		ShortNames: []string{"svc"}, Categories: []string{"all"}, Subresources: []string{"status"},
		New:     func() Object { return &corev1.Service{} },
		NewList: func() runtime.Object { return &corev1.ServiceList{} },
		Proto:   core.ProtoCodecOf[corev1.Service, corev1.ServiceList](),
	}
	Endpoints = &Resource{
		Name: "endpoints", Singular: "endpoints", Version: "v1", Kind: "Endpoints", Namespaced: true,
		ShortNames: []string{"ep"},
		New:        func() Object { return &corev1.Endpoints{} },
		NewList:    func() runtime.Object { return &corev1.EndpointsList{} },
		Proto:      core.ProtoCodecOf[corev1.Endpoints, corev1.EndpointsList](),
	}
	EndpointSlices = &Resource{
		Name: "endpointslices", Singular: "endpointslice", Group: "discovery.k8s.io", Version: "v1",
		Kind: "EndpointSlice", Namespaced: true,
		New:     func() Object { return &discoveryv1.EndpointSlice{} },
		NewList: func() runtime.Object { return &discoveryv1.EndpointSliceList{} },
		Proto:   core.ProtoCodecOf[discoveryv1.EndpointSlice, discoveryv1.EndpointSliceList](),
	}
	NetworkPolicies = &Resource{
		Name: "networkpolicies", Singular: "networkpolicy", Group: "networking.k8s.io", Version: "v1",
		Kind: "NetworkPolicy", Namespaced: true, ShortNames: []string{"netpol"},
		New:     func() Object { return &networkingv1.NetworkPolicy{} },
		NewList: func() runtime.Object { return &networkingv1.NetworkPolicyList{} },
		Proto:   core.ProtoCodecOf[networkingv1.NetworkPolicy, networkingv1.NetworkPolicyList](),
	}
	PodDisruptionBudgets = &Resource{
		Name: "poddisruptionbudgets", Singular: "poddisruptionbudget", Group: "policy", Version: "v1",
		Kind: "PodDisruptionBudget", Namespaced: true, ShortNames: []string{"pdb"}, Subresources: []string{"status"},
		New:     func() Object { return &policyv1.PodDisruptionBudget{} },
		NewList: func() runtime.Object { return &policyv1.PodDisruptionBudgetList{} },
		Proto:   core.ProtoCodecOf[policyv1.PodDisruptionBudget, policyv1.PodDisruptionBudgetList](),
	}
	Deployments = &Resource{
		Name: "deployments", Singular: "deployment", Group: "apps", Version: "v1", Kind: "Deployment", Namespaced: true,
		ShortNames: []string{"deploy"}, Categories: []string{"all"}, Subresources: []string{"status"},
		New:     func() Object { return &appsv1.Deployment{} },
		NewList: func() runtime.Object { return &appsv1.DeploymentList{} },
		Proto:   core.ProtoCodecOf[appsv1.Deployment, appsv1.DeploymentList](),
	}
	StorageClasses = &Resource{
		Name: "storageclasses", Singular: "storageclass", Group: "storage.k8s.io", Version: "v1",
		Kind: "StorageClass", ShortNames: []string{"sc"},
		New:     func() Object { return &storagev1.StorageClass{} },
		NewList: func() runtime.Object { return &storagev1.StorageClassList{} },
		Proto:   core.ProtoCodecOf[storagev1.StorageClass, storagev1.StorageClassList](),
	}
	CSIDrivers = &Resource{
		Name: "csidrivers", Singular: "csidriver", Group: "storage.k8s.io", Version: "v1", Kind: "CSIDriver",
		New:     func() Object { return &storagev1.CSIDriver{} },
		NewList: func() runtime.Object { return &storagev1.CSIDriverList{} },
		Proto:   core.ProtoCodecOf[storagev1.CSIDriver, storagev1.CSIDriverList](),
	}
	CustomResourceDefinitions = &Resource{
		Name: "customresourcedefinitions", Singular: "customresourcedefinition", Group: "apiextensions.k8s.io",
		Version: "v1", Kind: "CustomResourceDefinition", ShortNames: []string{"crd", "crds"},
		Categories: []string{"api-extensions"}, Subresources: []string{"status"},
		New:     func() Object { return &apiextensionsv1.CustomResourceDefinition{} },
		NewList: func() runtime.Object { return &apiextensionsv1.CustomResourceDefinitionList{} },
		Proto:   core.ProtoCodecOf[apiextensionsv1.CustomResourceDefinition, apiextensionsv1.CustomResourceDefinitionList](),
	}
	ValidatingWebhookConfigurations = &Resource{
		Name: "validatingwebhookconfigurations", Singular: "validatingwebhookconfiguration",
		Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration",
		Categories: []string{"api-extensions"},
		New:        func() Object { return &admissionregistrationv1.ValidatingWebhookConfiguration{} },
		NewList:    func() runtime.Object { return &admissionregistrationv1.ValidatingWebhookConfigurationList{} },
		Proto:      core.ProtoCodecOf[admissionregistrationv1.ValidatingWebhookConfiguration, admissionregistrationv1.ValidatingWebhookConfigurationList](),
	}
	MutatingWebhookConfigurations = &Resource{
		Name: "mutatingwebhookconfigurations", Singular: "mutatingwebhookconfiguration",
		Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration",
		Categories: []string{"api-extensions"},
		New:        func() Object { return &admissionregistrationv1.MutatingWebhookConfiguration{} },
		NewList:    func() runtime.Object { return &admissionregistrationv1.MutatingWebhookConfigurationList{} },
		Proto:      core.ProtoCodecOf[admissionregistrationv1.MutatingWebhookConfiguration, admissionregistrationv1.MutatingWebhookConfigurationList](),
	}
)

// storedKinds are PriorityClass and the stored-only kinds, in All's order.
func storedKinds() []*Resource {
	return []*Resource{
		PriorityClasses, Services, Endpoints, EndpointSlices, NetworkPolicies, PodDisruptionBudgets, Deployments,
		StorageClasses, CSIDrivers, CustomResourceDefinitions, ValidatingWebhookConfigurations,
		MutatingWebhookConfigurations,
	}
}

// storedOnly maps each stored-only resource to what a user would expect
// Kubernetes to do with it and everynode does not.
var storedOnly = map[*Resource]string{
	Services:                        "a cluster IP is allocated but no traffic is routed to it",
	Endpoints:                       "no traffic is routed to its addresses",
	EndpointSlices:                  "no traffic is routed to its endpoints",
	NetworkPolicies:                 "no traffic is filtered by it",
	PodDisruptionBudgets:            "evictions do not consult it and its status is not computed",
	Deployments:                     "no ReplicaSets or pods are created for it",
	StorageClasses:                  "no volumes are provisioned with it",
	CSIDrivers:                      "no CSI driver is called",
	CustomResourceDefinitions:       "its custom resources are not served",
	ValidatingWebhookConfigurations: "no webhook is called",
	MutatingWebhookConfigurations:   "no webhook is called",
}

// StoredOnly reports whether everynode stores and serves r's objects without
// acting on them, and if so says what does not happen (for the Warning a write
// of such an object gets).
func StoredOnly(r *Resource) (notDone string, ok bool) {
	notDone, ok = storedOnly[r]
	return notDone, ok
}

// forStoredObject is ForObject for the kinds of storedKinds.
func forStoredObject(obj runtime.Object) *Resource {
	switch obj.(type) {
	case *schedulingv1.PriorityClass:
		return PriorityClasses
	case *corev1.Service:
		return Services
	case *corev1.Endpoints:
		return Endpoints
	case *discoveryv1.EndpointSlice:
		return EndpointSlices
	case *networkingv1.NetworkPolicy:
		return NetworkPolicies
	case *policyv1.PodDisruptionBudget:
		return PodDisruptionBudgets
	case *appsv1.Deployment:
		return Deployments
	case *storagev1.StorageClass:
		return StorageClasses
	case *storagev1.CSIDriver:
		return CSIDrivers
	case *apiextensionsv1.CustomResourceDefinition:
		return CustomResourceDefinitions
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		return ValidatingWebhookConfigurations
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		return MutatingWebhookConfigurations
	}
	return nil
}

// AddToScheme registers the Go types of every served resource, their lists,
// and metav1's option and Status types under each served group version, so a
// codec built on the scheme reads and writes all of them (protobuf included).
func AddToScheme(s *runtime.Scheme) {
	seen := map[string]bool{}
	for _, r := range All() {
		gv := r.GroupVersion()
		s.AddKnownTypes(gv, r.New(), r.NewList())
		if !seen[gv.String()] {
			seen[gv.String()] = true
			metav1.AddToGroupVersion(s, gv)
		}
	}
}
