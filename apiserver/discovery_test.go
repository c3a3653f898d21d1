package apiserver

import (
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/resources"
)

const kubectlDiscoveryAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList," +
	"application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"

func (e *env) getAccept(path, accept string) resp {
	e.t.Helper()
	hr, err := http.NewRequest("GET", e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+adminToken)
	hr.Header.Set("Accept", accept)
	res, err := e.srv.Client().Do(hr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{code: res.StatusCode, header: res.Header, body: b}
}

// TestAggregatedDiscovery: /api and /apis answer aggregated v2 (and v2beta1)
// with the Content-Type kubectl checks, shortNames, categories, verbs and
// subresources.
func TestAggregatedDiscovery(t *testing.T) {
	e := newEnv(t)
	var core, groups apidiscoveryv2.APIGroupDiscoveryList
	r := e.getAccept("/api", kubectlDiscoveryAccept).must(t, http.StatusOK, &core)
	if ct := r.header.Get("Content-Type"); ct != "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList" {
		t.Errorf("Content-Type %q", ct)
	}
	if core.Kind != "APIGroupDiscoveryList" || core.APIVersion != "apidiscovery.k8s.io/v2" || len(core.Items) != 1 || core.Items[0].Name != "" {
		t.Fatalf("core list %+v", core.TypeMeta)
	}
	res := map[string]apidiscoveryv2.APIResourceDiscovery{}
	for _, rd := range core.Items[0].Versions[0].Resources {
		res[rd.Resource] = rd
	}
	pods := res["pods"]
	if !slices.Equal(pods.ShortNames, []string{"po"}) || !slices.Equal(pods.Categories, []string{"all"}) ||
		pods.Scope != apidiscoveryv2.ScopeNamespace || pods.ResponseKind == nil || pods.ResponseKind.Kind != "Pod" ||
		!slices.Equal(pods.Verbs, []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}) {
		t.Errorf("pods: %+v", pods)
	}
	if len(pods.Subresources) != 2 || pods.Subresources[0].Subresource != "log" || pods.Subresources[1].Subresource != "status" ||
		!slices.Equal(pods.Subresources[1].Verbs, []string{"get", "patch", "update"}) {
		t.Errorf("pod subresources %+v", pods.Subresources)
	}
	for name, short := range map[string]string{"nodes": "no", "namespaces": "ns", "events": "ev"} {
		if !slices.Contains(res[name].ShortNames, short) {
			t.Errorf("%s shortNames %v, want %s", name, res[name].ShortNames, short)
		}
	}
	if res["nodes"].Scope != apidiscoveryv2.ScopeCluster {
		t.Errorf("nodes scope %q", res["nodes"].Scope)
	}

	e.getAccept("/apis", kubectlDiscoveryAccept).must(t, http.StatusOK, &groups)
	var names []string
	for _, g := range groups.Items {
		names = append(names, g.Name)
		if len(g.Versions) != 1 || g.Versions[0].Freshness != apidiscoveryv2.DiscoveryFreshnessCurrent {
			t.Errorf("group %s versions %+v", g.Name, g.Versions)
		}
	}
	if !slices.Equal(names, servedGroups()) {
		t.Fatalf("groups %v, want %v", names, servedGroups())
	}
	apps := groups.Items[0].Versions[0].Resources
	if apps[0].Resource != "daemonsets" || !slices.Equal(apps[0].ShortNames, []string{"ds"}) || !slices.Equal(apps[0].Categories, []string{"all"}) ||
		apps[0].ResponseKind.Kind != "DaemonSet" || apps[1].Resource != "controllerrevisions" {
		t.Errorf("apps resources %+v", apps)
	}

	r = e.getAccept("/apis", "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")
	if ct := r.header.Get("Content-Type"); ct != "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList" {
		t.Errorf("v2beta1 Content-Type %q", ct)
	}
}

// TestLegacyDiscovery: without the aggregated Accept, the legacy documents.
func TestLegacyDiscovery(t *testing.T) {
	e := newEnv(t)
	var versions metav1.APIVersions
	r := e.getAccept("/api", "application/json, */*").must(t, http.StatusOK, &versions)
	if r.header.Get("Content-Type") != "application/json" || versions.Kind != "APIVersions" || !slices.Equal(versions.Versions, []string{"v1"}) {
		t.Errorf("/api: %s %+v", r.header.Get("Content-Type"), versions)
	}
	var groups metav1.APIGroupList
	e.get("/apis").must(t, http.StatusOK, &groups)
	if groups.Kind != "APIGroupList" || len(groups.Groups) != len(servedGroups()) || groups.Groups[0].Name != "apps" ||
		groups.Groups[0].PreferredVersion.GroupVersion != "apps/v1" {
		t.Errorf("/apis: %+v", groups)
	}
	var group metav1.APIGroup
	e.get("/apis/apps").must(t, http.StatusOK, &group)
	if group.Kind != "APIGroup" || group.Name != "apps" || len(group.Versions) != 1 {
		t.Errorf("/apis/apps: %+v", group)
	}
	var list metav1.APIResourceList
	e.get("/apis/apps/v1").must(t, http.StatusOK, &list)
	if list.Kind != "APIResourceList" || list.GroupVersion != "apps/v1" {
		t.Fatalf("/apis/apps/v1: %+v", list.TypeMeta)
	}
	names := []string{}
	for _, r := range list.APIResources {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"daemonsets", "daemonsets/status", "controllerrevisions", "deployments", "deployments/status"}) {
		t.Errorf("apps/v1 resources %v", names)
	}
	if ds := list.APIResources[0]; !slices.Equal(ds.ShortNames, []string{"ds"}) || !ds.Namespaced || ds.Kind != "DaemonSet" {
		t.Errorf("daemonsets %+v", ds)
	}
	e.get("/api/v1").must(t, http.StatusOK, &list)
	names = names[:0]
	for _, r := range list.APIResources {
		names = append(names, r.Name)
	}
	if !slices.Contains(names, "pods/log") || !slices.Contains(names, "nodes/status") || !slices.Contains(names, "events") {
		t.Errorf("v1 resources %v", names)
	}
}

// TestAggregatedNegotiation: aggregated discovery is served when any
// acceptable clause names it in a media type the server writes, as
// kube-apiserver's aggregated.WrappedHandler decides.
func TestAggregatedNegotiation(t *testing.T) {
	wr, err := newWire()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{wire: wr}
	cases := map[string]string{
		kubectlDiscoveryAccept: "application/json v2",
		"application/json;as=APIGroupDiscoveryList;v=v2beta1;g=apidiscovery.k8s.io":                                "application/json v2beta1",
		"application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json": "application/vnd.kubernetes.protobuf v2",
		"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer":                      "application/json v2",
		"application/json": "",
		"":                 "",
		"application/json, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList": "application/json v2",
		"application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList":                   "",
		"text/html;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList":                          "",
	}
	for accept, want := range cases {
		req := httptest.NewRequest("GET", "/apis", nil)
		req.Header.Set("Accept", accept)
		got := ""
		if out, ok := s.aggregated(req); ok {
			got = out.info.MediaType + " " + out.convert.Version
		}
		if got != want {
			t.Errorf("aggregated(%q) = %q, want %q", accept, got, want)
		}
	}
}

// TestOpenAPIDocuments: the v3 root names one document per group version,
// each with a PATCH operation per kind that carries its group-version-kind
// and takes fieldValidation (what kubectl's validation looks for); the v2
// document is served in JSON and in protobuf and defines every served kind.
func TestOpenAPIDocuments(t *testing.T) {
	e := newEnv(t)
	var root struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	e.get("/openapi/v3").must(t, http.StatusOK, &root)
	ref, ok := root.Paths["apis/apps/v1"]
	if !ok || !strings.HasPrefix(ref.ServerRelativeURL, "/openapi/v3/apis/apps/v1?hash=") || len(root.Paths) != len(servedGroups())+1 {
		t.Fatalf("root %+v", root)
	}
	type operation struct {
		GVK        map[string]string `json:"x-kubernetes-group-version-kind"`
		Action     string            `json:"x-kubernetes-action"`
		Parameters []struct {
			Name string `json:"name"`
			In   string `json:"in"`
		} `json:"parameters"`
	}
	var doc struct {
		Paths map[string]struct {
			Patch operation `json:"patch"`
		} `json:"paths"`
	}
	e.get(ref.ServerRelativeURL).must(t, http.StatusOK, &doc)
	p := doc.Paths["/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"].Patch
	if p.GVK["kind"] != "DaemonSet" || p.GVK["group"] != "apps" || p.Action != "patch" ||
		!slices.ContainsFunc(p.Parameters, func(q struct {
			Name string `json:"name"`
			In   string `json:"in"`
		}) bool {
			return q.Name == "fieldValidation" && q.In == "query"
		}) {
		t.Errorf("daemonset patch op %+v", p)
	}
	for _, r := range resources.All() {
		key := strings.TrimPrefix(groupVersionPath(r.GroupVersion()), "/")
		e.get(root.Paths[key].ServerRelativeURL).must(t, http.StatusOK, &doc)
		item := groupVersionPath(r.GroupVersion()) + "/" + r.Name + "/{name}"
		if r.Namespaced {
			item = groupVersionPath(r.GroupVersion()) + "/namespaces/{namespace}/" + r.Name + "/{name}"
		}
		if got := doc.Paths[item].Patch.GVK["kind"]; got != r.Kind {
			t.Errorf("%s: PATCH %s has kind %q", key, item, got)
		}
	}

	var v2 struct {
		Swagger     string                    `json:"swagger"`
		Definitions map[string]map[string]any `json:"definitions"`
	}
	e.get("/openapi/v2").must(t, http.StatusOK, &v2)
	for _, r := range resources.All() {
		name := strings.NewReplacer("k8s.io/", "io.k8s.", "/", ".").Replace(reflect.TypeOf(r.New()).Elem().PkgPath()) + "." + r.Kind
		if v2.Definitions[name]["x-kubernetes-group-version-kind"] == nil {
			t.Errorf("v2 has no definition %s with its kind", name)
		}
	}
	pb := e.doWire("GET", "/openapi/v2", "", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf", nil)
	if pb.code != http.StatusOK || pb.header.Get("Content-Type") != "application/com.github.proto-openapi.spec.v2.v1.0+protobuf" || len(pb.body) < 1000 {
		t.Errorf("v2 protobuf: %d %q, %d bytes", pb.code, pb.header.Get("Content-Type"), len(pb.body))
	}
	pb = e.doWire("GET", ref.ServerRelativeURL, "", "application/com.github.proto-openapi.spec.v3@v1.0+protobuf", nil)
	if pb.code != http.StatusOK || pb.header.Get("Content-Type") != "application/com.github.proto-openapi.spec.v3.v1.0+protobuf" {
		t.Errorf("v3 protobuf: %d %q", pb.code, pb.header.Get("Content-Type"))
	}
}

// servedGroups are the API groups of the served resources, in discovery
// order (the core group left out).
func servedGroups() []string {
	var out []string
	for _, r := range resources.All() {
		if r.Group != "" && !slices.Contains(out, r.Group) {
			out = append(out, r.Group)
		}
	}
	// The access and token reviews, served for create only.
	return append(out, "authentication.k8s.io", "authorization.k8s.io")
}

// TestDiscoveryReviews: the reviews and a ServiceAccount's token
// subresource are listed with the single verb create, in the legacy and
// the aggregated documents, as kube-apiserver lists them.
func TestDiscoveryReviews(t *testing.T) {
	e := newEnv(t)
	var list metav1.APIResourceList
	e.get("/apis/authorization.k8s.io/v1").must(t, http.StatusOK, &list)
	var names []string
	for _, r := range list.APIResources {
		names = append(names, r.Name)
		if !slices.Equal(r.Verbs, []string{"create"}) || (r.Namespaced != (r.Name == "localsubjectaccessreviews")) {
			t.Errorf("%s: verbs %v namespaced %v", r.Name, r.Verbs, r.Namespaced)
		}
	}
	if !slices.Equal(names, []string{"localsubjectaccessreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews", "subjectaccessreviews"}) {
		t.Errorf("authorization.k8s.io/v1 lists %v", names)
	}
	e.get("/apis/authentication.k8s.io/v1").must(t, http.StatusOK, &list)
	if len(list.APIResources) != 2 || list.APIResources[0].Kind != "SelfSubjectReview" || list.APIResources[1].Kind != "TokenReview" {
		t.Errorf("authentication.k8s.io/v1 lists %+v", list.APIResources)
	}
	var groups apidiscoveryv2.APIGroupDiscoveryList
	e.getAccept("/apis", kubectlDiscoveryAccept).must(t, http.StatusOK, &groups)
	found := false
	for _, g := range groups.Items {
		for _, r := range g.Versions[0].Resources {
			if r.Resource == "subjectaccessreviews" {
				found = slices.Equal(r.Verbs, []string{"create"}) && r.ResponseKind.Kind == "SubjectAccessReview"
			}
		}
	}
	if !found {
		t.Error("aggregated discovery lacks subjectaccessreviews with verb create")
	}
}
