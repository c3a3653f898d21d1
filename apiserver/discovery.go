package apiserver

import (
	"encoding/json"
	"mime"
	"net/http"
	"slices"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/everynode/everynode/resources"
)

// resourceVerbs are the verbs every served resource supports, sorted as
// Kubernetes lists them.
func resourceVerbs() []string {
	return []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
}

func subresourceVerbs(sub string) []string {
	if sub == "status" {
		return []string{"get", "patch", "update"}
	}
	return []string{"get"}
}

// discovery holds the discovery documents, built once from the resource table.
type discovery struct {
	gvs       []schema.GroupVersion
	byGV      map[schema.GroupVersion][]*resources.Resource
	coreAgg   apidiscoveryv2.APIGroupDiscoveryList
	groupsAgg apidiscoveryv2.APIGroupDiscoveryList
}

func newDiscovery(all []*resources.Resource) *discovery {
	d := &discovery{byGV: map[schema.GroupVersion][]*resources.Resource{}}
	for _, r := range all {
		gv := r.GroupVersion()
		if _, ok := d.byGV[gv]; !ok {
			d.gvs = append(d.gvs, gv)
		}
		d.byGV[gv] = append(d.byGV[gv], r)
	}
	for _, gv := range d.gvs {
		item := apidiscoveryv2.APIGroupDiscovery{
			ObjectMeta: metav1.ObjectMeta{Name: gv.Group},
			Versions: []apidiscoveryv2.APIVersionDiscovery{{
				Version: gv.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
				Resources: aggregatedResources(d.byGV[gv]),
			}},
		}
		if gv.Group == "" {
			d.coreAgg.Items = append(d.coreAgg.Items, item)
		} else {
			d.groupsAgg.Items = append(d.groupsAgg.Items, item)
		}
	}
	return d
}

// groupVersions returns the served group versions, core first.
func (d *discovery) groupVersions() []schema.GroupVersion { return d.gvs }

func sortedSubresources(r *resources.Resource) []string {
	subs := slices.Clone(r.Subresources)
	slices.Sort(subs)
	return subs
}

func aggregatedResources(rs []*resources.Resource) []apidiscoveryv2.APIResourceDiscovery {
	var out []apidiscoveryv2.APIResourceDiscovery
	for _, r := range rs {
		kind := &metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
		scope := apidiscoveryv2.ScopeCluster
		if r.Namespaced {
			scope = apidiscoveryv2.ScopeNamespace
		}
		rd := apidiscoveryv2.APIResourceDiscovery{
			Resource: r.Name, ResponseKind: kind, Scope: scope, SingularResource: r.Singular,
			Verbs: resourceVerbs(), ShortNames: r.ShortNames, Categories: r.Categories,
		}
		for _, sub := range sortedSubresources(r) {
			rd.Subresources = append(rd.Subresources, apidiscoveryv2.APISubresourceDiscovery{
				Subresource: sub, ResponseKind: kind, Verbs: subresourceVerbs(sub),
			})
		}
		out = append(out, rd)
	}
	return out
}

// aggregatedVersion returns the apidiscovery version ("v2" or "v2beta1") the
// Accept header asks for as APIGroupDiscoveryList, or "" for legacy discovery.
// The first acceptable media range wins.
func aggregatedVersion(accept string) string {
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || mt != "application/json" {
			continue
		}
		if params["as"] == "APIGroupDiscoveryList" && params["g"] == "apidiscovery.k8s.io" {
			if v := params["v"]; v == "v2" || v == "v2beta1" {
				return v
			}
			continue
		}
		if len(params) == 0 || params["as"] == "" {
			return "" // plain JSON accepted before any aggregated form
		}
	}
	return ""
}

// writeAggregated writes an aggregated discovery list in the asked version.
func writeAggregated(w http.ResponseWriter, list apidiscoveryv2.APIGroupDiscoveryList, version string) {
	list.TypeMeta = metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/" + version}
	if list.Items == nil {
		list.Items = []apidiscoveryv2.APIGroupDiscovery{}
	}
	b, err := json.Marshal(list)
	if err != nil {
		http.Error(w, "encoding discovery: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v="+version+";as=APIGroupDiscoveryList")
	w.Header().Set("Vary", "Accept")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func (s *Server) serveAPIVersions(w http.ResponseWriter, req *http.Request) {
	setScope(req.Context(), "get", "")
	if v := aggregatedVersion(req.Header.Get("Accept")); v != "" {
		writeAggregated(w, s.disc.coreAgg, v)
		return
	}
	w.Header().Set("Vary", "Accept")
	writeJSON(w, http.StatusOK, &metav1.APIVersions{
		TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
		Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
			{ClientCIDR: "0.0.0.0/0", ServerAddress: req.Host},
		},
	})
}

func (s *Server) apiGroup(group string) metav1.APIGroup {
	g := metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: group}
	for _, gv := range s.disc.gvs {
		if gv.Group != group {
			continue
		}
		v := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
		g.Versions = append(g.Versions, v)
		if g.PreferredVersion.Version == "" {
			g.PreferredVersion = v
		}
	}
	return g
}

func (s *Server) serveAPIGroups(w http.ResponseWriter, req *http.Request) {
	setScope(req.Context(), "get", "")
	if v := aggregatedVersion(req.Header.Get("Accept")); v != "" {
		writeAggregated(w, s.disc.groupsAgg, v)
		return
	}
	list := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	for _, gv := range s.disc.gvs {
		if gv.Group == "" || slices.ContainsFunc(list.Groups, func(g metav1.APIGroup) bool { return g.Name == gv.Group }) {
			continue
		}
		g := s.apiGroup(gv.Group)
		g.TypeMeta = metav1.TypeMeta{}
		list.Groups = append(list.Groups, g)
	}
	w.Header().Set("Vary", "Accept")
	writeJSON(w, http.StatusOK, &list)
}

func (s *Server) serveAPIGroup(group string) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		setScope(req.Context(), "get", "")
		g := s.apiGroup(group)
		writeJSON(w, http.StatusOK, &g)
	}
}

// serveResourceList serves the legacy APIResourceList of one group version.
func (s *Server) serveResourceList(gv schema.GroupVersion) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		setScope(req.Context(), "get", "")
		list := metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: gv.String(),
		}
		for _, r := range s.disc.byGV[gv] {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: r.Name, SingularName: r.Singular, Namespaced: r.Namespaced, Kind: r.Kind,
				Verbs: resourceVerbs(), ShortNames: r.ShortNames, Categories: r.Categories,
			})
			for _, sub := range sortedSubresources(r) {
				list.APIResources = append(list.APIResources, metav1.APIResource{
					Name: r.Name + "/" + sub, Namespaced: r.Namespaced, Kind: r.Kind, Verbs: subresourceVerbs(sub),
				})
			}
		}
		writeJSON(w, http.StatusOK, &list)
	}
}
