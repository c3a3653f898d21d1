package apiserver

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if len(groups.Items) != 1 || groups.Items[0].Name != "apps" || groups.Items[0].Versions[0].Freshness != apidiscoveryv2.DiscoveryFreshnessCurrent {
		t.Fatalf("groups %+v", groups.Items)
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
	if groups.Kind != "APIGroupList" || len(groups.Groups) != 1 || groups.Groups[0].Name != "apps" ||
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
	if !slices.Equal(names, []string{"daemonsets", "daemonsets/status", "controllerrevisions"}) {
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

func TestAggregatedVersion(t *testing.T) {
	cases := map[string]string{
		kubectlDiscoveryAccept: "v2",
		"application/json;as=APIGroupDiscoveryList;v=v2beta1;g=apidiscovery.k8s.io": "v2beta1",
		"application/json": "",
		"":                 "",
		"application/json, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList": "",
		"application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList":                   "",
	}
	for accept, want := range cases {
		if got := aggregatedVersion(accept); got != want {
			t.Errorf("aggregatedVersion(%q) = %q, want %q", accept, got, want)
		}
	}
}

// TestOpenAPIStub: the v3 root names one document per group version, each
// with a PATCH operation per kind that takes fieldValidation.
func TestOpenAPIStub(t *testing.T) {
	e := newEnv(t)
	var root struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	e.get("/openapi/v3").must(t, http.StatusOK, &root)
	ref, ok := root.Paths["apis/apps/v1"]
	if !ok || !strings.HasPrefix(ref.ServerRelativeURL, "/openapi/v3/apis/apps/v1?hash=") || len(root.Paths) != 2 {
		t.Fatalf("root %+v", root)
	}
	var doc struct {
		Paths map[string]struct {
			Patch struct {
				GVK        map[string]string `json:"x-kubernetes-group-version-kind"`
				Parameters []struct {
					Name string `json:"name"`
					In   string `json:"in"`
				} `json:"parameters"`
			} `json:"patch"`
		} `json:"paths"`
	}
	e.get(ref.ServerRelativeURL).must(t, http.StatusOK, &doc)
	p := doc.Paths["/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"].Patch
	if p.GVK["kind"] != "DaemonSet" || p.GVK["group"] != "apps" || len(p.Parameters) != 1 || p.Parameters[0].Name != "fieldValidation" {
		t.Errorf("daemonset patch op %+v", p)
	}
	e.get(root.Paths["api/v1"].ServerRelativeURL).must(t, http.StatusOK, &doc)
	if doc.Paths["/api/v1/nodes/{name}"].Patch.GVK["kind"] != "Node" {
		t.Errorf("v1 doc %+v", doc.Paths)
	}
	if r := e.get("/openapi/v3/apis/batch/v1"); r.code != http.StatusNotFound {
		t.Errorf("unknown document: %d", r.code)
	}
	if r := e.get("/openapi/v2"); r.code != http.StatusNotFound {
		t.Errorf("/openapi/v2: %d", r.code)
	}
}
