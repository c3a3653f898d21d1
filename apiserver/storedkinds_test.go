package apiserver

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/everynode/everynode/resources"
)

// storedSamples is one valid object of each kind this change added.
func storedSamples() []resources.Object {
	om := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: "default"} }
	cm := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }
	port := int32(80)
	one := intstr.FromInt32(1)
	none := admissionregistrationv1.SideEffectClassNone
	labels := map[string]string{"app": "web"}
	return []resources.Object{
		&schedulingv1.PriorityClass{ObjectMeta: cm("high"), Value: 1000, Description: "high"},
		&corev1.Service{ObjectMeta: om("web"), Spec: corev1.ServiceSpec{Selector: labels, ClusterIP: "10.43.0.10",
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		&corev1.Endpoints{ObjectMeta: om("web"), Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1"}}, Ports: []corev1.EndpointPort{{Port: 80}}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: om("web-1"), AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}},
			Ports:     []discoveryv1.EndpointPort{{Port: &port}}},
		&networkingv1.NetworkPolicy{ObjectMeta: om("deny"), Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: labels}}},
		&policyv1.PodDisruptionBudget{ObjectMeta: om("web"), Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}}},
		&appsv1.Deployment{ObjectMeta: om("web"), Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}}}}},
		&storagev1.StorageClass{ObjectMeta: cm("fast"), Provisioner: "csi.example.com"},
		&storagev1.CSIDriver{ObjectMeta: cm("csi.example.com")},
		&apiextensionsv1.CustomResourceDefinition{ObjectMeta: cm("widgets.example.com"),
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object"}}}}}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: cm("check"),
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "check.example.com", SideEffects: &none,
				AdmissionReviewVersions: []string{"v1"},
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptrTo("https://example.com/check")}}}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: cm("mutate"),
			Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "mutate.example.com", SideEffects: &none,
				AdmissionReviewVersions: []string{"v1"},
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptrTo("https://example.com/mutate")}}}},
	}
}

// objectPath is the collection path of obj's resource in namespace "default".
func objectPath(r *resources.Resource) string {
	p := groupVersionPath(r.GroupVersion())
	if r.Namespaced {
		p += "/namespaces/default"
	}
	return p + "/" + r.Name
}

// TestStoredKindsProtobuf: every new kind round-trips through protobuf bodies
// and answers (create, get, list), gets Kubernetes' defaults, and every write
// of a stored-only kind answers the Warning that says everynode does not act
// on it; PriorityClass, which everynode serves fully, gets none.
func TestStoredKindsProtobuf(t *testing.T) {
	e := newEnv(t)
	const proto = runtime.ContentTypeProtobuf
	seen := map[*resources.Resource]bool{}
	for _, obj := range storedSamples() {
		r := resources.ForObject(obj)
		seen[r] = true
		path := objectPath(r)
		res := e.doWire("POST", path, proto, proto, protoBytes(t, obj))
		created := r.New()
		decodeProto(t, e, res, created)
		if res.code != http.StatusCreated || created.GetUID() == "" || created.GetName() != obj.GetName() {
			t.Fatalf("%s: create %d %s", r.Kind, res.code, res.body)
		}
		warn := res.header.Get("Warning")
		if _, stored := resources.StoredOnly(r); stored {
			want := `299 - "everynode stores ` + r.GroupResource().String() + ` but does not act on them: `
			if !strings.HasPrefix(warn, want) {
				t.Errorf("%s: Warning %q, want prefix %q", r.Kind, warn, want)
			}
		} else if warn != "" {
			t.Errorf("%s: Warning %q", r.Kind, warn)
		}
		res = e.doWire("GET", path+"/"+obj.GetName(), "", proto, nil)
		got := r.New()
		decodeProto(t, e, res, got)
		if !apiequality.Semantic.DeepEqual(got, created) {
			t.Errorf("%s: get\n%+v\nwant\n%+v", r.Kind, got, created)
		}
		res = e.doWire("GET", path, "", proto, nil)
		list := r.NewList()
		if _, _, err := e.s.wire.proto.Serializer.Decode(res.body, nil, list); err != nil || res.code != http.StatusOK {
			t.Errorf("%s: list %d %v", r.Kind, res.code, err)
		}
		// An update (protobuf) and a patch are writes too.
		res = e.doWire("PUT", path+"/"+obj.GetName(), proto, proto, protoBytes(t, created))
		if _, stored := resources.StoredOnly(r); res.code != http.StatusOK || stored != (res.header.Get("Warning") != "") {
			t.Errorf("%s: update %d, Warning %q: %s", r.Kind, res.code, res.header.Get("Warning"), res.body)
		}
		res = e.do(req{method: "PATCH", path: path + "/" + obj.GetName(), contentType: "application/merge-patch+json",
			body: `{"metadata":{"labels":{"patched":"yes"}}}`})
		if _, stored := resources.StoredOnly(r); res.code != http.StatusOK || stored != (res.header.Get("Warning") != "") {
			t.Errorf("%s: patch %d, Warning %q", r.Kind, res.code, res.header.Get("Warning"))
		}
	}
	for _, r := range resources.All() {
		if _, stored := resources.StoredOnly(r); stored && !seen[r] {
			t.Errorf("no sample of stored-only %s", r.Kind)
		}
	}

	// A YAML body and a server-side apply.
	yamlSvc := "apiVersion: v1\nkind: Service\nmetadata:\n  name: yaml\nspec:\n  ports:\n  - port: 53\n    protocol: UDP\n"
	res := e.do(req{method: "POST", path: "/api/v1/namespaces/default/services", contentType: "application/yaml", body: yamlSvc})
	if res.code != http.StatusCreated || !strings.Contains(res.header.Get("Warning"), "everynode stores services") {
		t.Errorf("YAML create: %d %q %s", res.code, res.header.Get("Warning"), res.body)
	}
	res = e.do(req{method: "PATCH", path: "/api/v1/namespaces/default/services/applied?fieldManager=test", contentType: "application/apply-patch+yaml",
		body: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"applied"},"spec":{"ports":[{"port":80}]}}`})
	if res.code != http.StatusCreated || !strings.Contains(res.header.Get("Warning"), "everynode stores services") {
		t.Errorf("server-side apply: %d %q %s", res.code, res.header.Get("Warning"), res.body)
	}

	// Kubernetes' defaults, from its own defaulters.
	var svc corev1.Service
	e.get("/api/v1/namespaces/default/services/web").must(t, http.StatusOK, &svc)
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.SessionAffinity != corev1.ServiceAffinityNone ||
		svc.Spec.Ports[0].Protocol != corev1.ProtocolTCP || svc.Spec.Ports[0].TargetPort != intstr.FromInt32(80) ||
		len(svc.Spec.ClusterIPs) != 1 || svc.Spec.ClusterIPs[0] != "10.43.0.10" {
		t.Errorf("service spec %+v", svc.Spec)
	}
	var dep appsv1.Deployment
	e.get("/apis/apps/v1/namespaces/default/deployments/web").must(t, http.StatusOK, &dep)
	if *dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType ||
		*dep.Spec.ProgressDeadlineSeconds != 600 || dep.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways ||
		dep.Generation != 1 {
		t.Errorf("deployment %+v", dep.Spec)
	}
	var pc schedulingv1.PriorityClass
	e.get("/apis/scheduling.k8s.io/v1/priorityclasses/high").must(t, http.StatusOK, &pc)
	if pc.PreemptionPolicy == nil || *pc.PreemptionPolicy != corev1.PreemptLowerPriority {
		t.Errorf("priority class %+v", pc)
	}
}

// TestStoredKindsBadInput: an invalid name, a namespace differing from the
// request's and a CustomResourceDefinition named otherwise than plural.group
// get kube-apiserver's Status, and nothing is stored.
func TestStoredKindsBadInput(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		path, body string
		code       int
		message    string
	}{
		{"/api/v1/namespaces/default/services", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web.v2"},"spec":{"ports":[{"port":80}]}}`,
			http.StatusUnprocessableEntity, `Service "web.v2" is invalid: metadata.name: Invalid value: "web.v2": a DNS-1035 label must consist of lower case alphanumeric characters or '-'`},
		{"/apis/apps/v1/namespaces/default/deployments", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"other"}}`,
			http.StatusBadRequest, "the namespace of the provided object (other) does not match the namespace sent on the request (default)"},
		{"/apis/storage.k8s.io/v1/storageclasses", `{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"Fast"},"provisioner":"x"}`,
			http.StatusUnprocessableEntity, `StorageClass.storage.k8s.io "Fast" is invalid: metadata.name: Invalid value: "Fast": a lowercase RFC 1123 subdomain`},
		{"/apis/apiextensions.k8s.io/v1/customresourcedefinitions", `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets"},"spec":{"group":"example.com","names":{"plural":"widgets","kind":"Widget"},"scope":"Namespaced"}}`,
			http.StatusUnprocessableEntity, `CustomResourceDefinition.apiextensions.k8s.io "widgets" is invalid: metadata.name: Invalid value: "widgets": must be spec.names.plural+"."+spec.group`},
		{"/apis/policy/v1/namespaces/missing/poddisruptionbudgets", `{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"pdb"}}`,
			http.StatusNotFound, `namespaces "missing" not found`},
		{"/apis/networking.k8s.io/v1/namespaces/default/networkpolicies", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"}}`,
			http.StatusBadRequest, ""},
	}
	for _, c := range cases {
		r := e.do(req{method: "POST", path: c.path, body: c.body})
		st := r.status(t)
		if r.code != c.code || !strings.Contains(st.Message, c.message) || r.header.Get("Warning") != "" {
			t.Errorf("POST %s: %d %q (Warning %q), want %d %q", c.path, r.code, st.Message, r.header.Get("Warning"), c.code, c.message)
		}
	}
	for _, r := range resources.All() {
		if _, stored := resources.StoredOnly(r); !stored {
			continue
		}
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		e.get(groupVersionPath(r.GroupVersion())+"/"+r.Name).must(t, http.StatusOK, &list)
		if len(list.Items) != 0 {
			t.Errorf("%s stored after bad input: %s", r.Name, list.Items)
		}
	}
}

// TestPriorityClassRules: the system classes exist once ensured and cannot
// be deleted; value and preemptionPolicy are immutable; the system- prefix
// is reserved; only one class may be the global default.
func TestPriorityClassRules(t *testing.T) {
	e := newEnv(t)
	if err := e.s.EnsurePriorityClasses(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := e.s.EnsurePriorityClasses(testCtx(t)); err != nil {
		t.Fatalf("second ensure: %v", err)
	}
	const pcs = "/apis/scheduling.k8s.io/v1/priorityclasses"
	for name, value := range map[string]int32{"system-node-critical": 2000001000, "system-cluster-critical": 2000000000} {
		var pc schedulingv1.PriorityClass
		e.get(pcs+"/"+name).must(t, http.StatusOK, &pc)
		if pc.Value != value || pc.GlobalDefault || pc.Description == "" {
			t.Errorf("%s: %+v", name, pc)
		}
		r := e.do(req{method: "DELETE", path: pcs + "/" + name})
		if st := r.status(t); r.code != http.StatusForbidden || st.Message != `priorityclasses.scheduling.k8s.io "`+name+`" is forbidden: this is a system priority class and cannot be deleted` {
			t.Errorf("delete %s: %d %q", name, r.code, st.Message)
		}
	}
	post := func(body string) resp { return e.do(req{method: "POST", path: pcs, body: body}) }
	post(`{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"default-prio"},"value":10,"globalDefault":true}`).must(t, http.StatusCreated, nil)
	cases := []struct {
		r       resp
		code    int
		message string
	}{
		{post(`{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"other"},"value":5,"globalDefault":true}`),
			http.StatusForbidden, `priorityclasses.scheduling.k8s.io "other" is forbidden: PriorityClass default-prio is already marked as default. Only one default can exist`},
		{post(`{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"system-mine"},"value":5}`),
			http.StatusUnprocessableEntity, `PriorityClass.scheduling.k8s.io "system-mine" is invalid: metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class`},
		{post(`{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"huge"},"value":1000000001}`),
			http.StatusUnprocessableEntity, `value: Forbidden: maximum allowed value of a user defined priority is 1000000000`},
		{e.do(req{method: "PATCH", path: pcs + "/default-prio", contentType: "application/merge-patch+json", body: `{"value":11}`}),
			http.StatusUnprocessableEntity, `PriorityClass.scheduling.k8s.io "default-prio" is invalid: value: Forbidden: may not be changed in an update.`},
		{e.do(req{method: "PATCH", path: pcs + "/default-prio", contentType: "application/merge-patch+json", body: `{"preemptionPolicy":"Never"}`}),
			http.StatusUnprocessableEntity, `preemptionPolicy: Invalid value: "Never": field is immutable`},
	}
	for i, c := range cases {
		if st := c.r.status(t); c.r.code != c.code || !strings.Contains(st.Message, c.message) {
			t.Errorf("case %d: %d %q, want %d %q", i, c.r.code, st.Message, c.code, c.message)
		}
	}
	// The default may change its description, and lose the default mark.
	e.do(req{method: "PATCH", path: pcs + "/default-prio", contentType: "application/merge-patch+json",
		body: `{"description":"d","globalDefault":false}`}).must(t, http.StatusOK, nil)
	post(`{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"other"},"value":5,"globalDefault":true}`).must(t, http.StatusCreated, nil)
}
