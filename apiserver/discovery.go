package apiserver

import (
	"encoding/json"
	"net/http"
	"slices"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apidiscoveryv2beta1 "k8s.io/api/apidiscovery/v2beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

// createOnly is a resource served for create alone and never stored: the
// access and token reviews (docs/rbac.md).
type createOnly struct {
	gv         schema.GroupVersion
	name, kind string
	namespaced bool
}

// createOnlyResources are the reviews the server answers, as
// kube-apiserver lists them.
func createOnlyResources() []createOnly {
	authn := schema.GroupVersion{Group: "authentication.k8s.io", Version: "v1"}
	authz := schema.GroupVersion{Group: "authorization.k8s.io", Version: "v1"}
	return []createOnly{
		{authn, "selfsubjectreviews", "SelfSubjectReview", false},
		{authn, "tokenreviews", "TokenReview", false},
		{authz, "localsubjectaccessreviews", "LocalSubjectAccessReview", true},
		{authz, "selfsubjectaccessreviews", "SelfSubjectAccessReview", false},
		{authz, "selfsubjectrulesreviews", "SelfSubjectRulesReview", false},
		{authz, "subjectaccessreviews", "SubjectAccessReview", false},
	}
}

// tokenSubresource is a ServiceAccount's token subresource (TokenRequest),
// listed when the server issues tokens.
const tokenSubresource = "token"

// discovery holds the discovery documents, built once from the resource table.
type discovery struct {
	gvs        []schema.GroupVersion
	byGV       map[schema.GroupVersion][]*resources.Resource
	createOnly map[schema.GroupVersion][]createOnly
	tokens     bool // serviceaccounts/token is served
	coreAgg    apidiscoveryv2.APIGroupDiscoveryList
	groupsAgg  apidiscoveryv2.APIGroupDiscoveryList
}

// newDiscovery builds the documents of the resources all, the reviews, and
// (with tokens) serviceaccounts/token.
func newDiscovery(all []*resources.Resource, tokens bool) *discovery {
	d := &discovery{byGV: map[schema.GroupVersion][]*resources.Resource{}, createOnly: map[schema.GroupVersion][]createOnly{}, tokens: tokens}
	for _, r := range all {
		gv := r.GroupVersion()
		if _, ok := d.byGV[gv]; !ok {
			d.gvs = append(d.gvs, gv)
		}
		d.byGV[gv] = append(d.byGV[gv], r)
	}
	for _, c := range createOnlyResources() {
		if _, ok := d.byGV[c.gv]; !ok && len(d.createOnly[c.gv]) == 0 {
			d.gvs = append(d.gvs, c.gv)
		}
		d.createOnly[c.gv] = append(d.createOnly[c.gv], c)
	}
	for _, gv := range d.gvs {
		item := apidiscoveryv2.APIGroupDiscovery{
			ObjectMeta: metav1.ObjectMeta{Name: gv.Group},
			Versions: []apidiscoveryv2.APIVersionDiscovery{{
				Version: gv.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
				Resources: d.aggregatedResources(gv),
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

func (d *discovery) aggregatedResources(gv schema.GroupVersion) []apidiscoveryv2.APIResourceDiscovery {
	var out []apidiscoveryv2.APIResourceDiscovery
	for _, r := range d.byGV[gv] {
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
		if d.tokens && r == resources.ServiceAccounts {
			rd.Subresources = append(rd.Subresources, apidiscoveryv2.APISubresourceDiscovery{
				Subresource:  tokenSubresource,
				ResponseKind: &metav1.GroupVersionKind{Group: "authentication.k8s.io", Version: "v1", Kind: "TokenRequest"},
				Verbs:        []string{"create"},
			})
		}
		out = append(out, rd)
	}
	for _, c := range d.createOnly[gv] {
		scope := apidiscoveryv2.ScopeCluster
		if c.namespaced {
			scope = apidiscoveryv2.ScopeNamespace
		}
		out = append(out, apidiscoveryv2.APIResourceDiscovery{
			Resource: c.name, Scope: scope, Verbs: []string{"create"},
			ResponseKind: &metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: c.kind},
		})
	}
	return out
}

// aggregated reports whether the Accept header asks for aggregated
// discovery (an APIGroupDiscoveryList of apidiscovery.k8s.io v2 or v2beta1)
// in any media type the server writes, and which. As upstream
// (aggregated.WrappedHandler), the first clause naming the aggregated list
// decides, wherever plain clauses stand; otherwise the legacy documents are
// served.
func (s *Server) aggregated(req *http.Request) (output, bool) {
	out, ok := s.wire.negotiate(req.Header.Get("Accept"), discoveryRestrictions{})
	return out, ok && out.convert != nil
}

// writeAggregated writes an aggregated discovery list in the asked version
// and media type; the Content-Type names the list's group, version and kind.
func (s *Server) writeAggregated(w http.ResponseWriter, out output, list apidiscoveryv2.APIGroupDiscoveryList) {
	version := out.convert.Version
	list.TypeMeta = metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/" + version}
	if list.Items == nil {
		list.Items = []apidiscoveryv2.APIGroupDiscovery{}
	}
	var obj runtime.Object = &list
	if version == "v2beta1" {
		// v2beta1 has v2's fields and field numbers under another name.
		var beta apidiscoveryv2beta1.APIGroupDiscoveryList
		if err := convertJSON(&list, &beta); err != nil {
			s.log.Error("convert aggregated discovery", "err", err)
			http.Error(w, "encoding discovery: "+err.Error(), http.StatusInternalServerError)
			return
		}
		beta.TypeMeta = list.TypeMeta
		obj = &beta
	}
	w.Header().Set("Vary", "Accept")
	s.wire.write(w, http.StatusOK, out, out.info.MediaType+";g=apidiscovery.k8s.io;v="+version+";as=APIGroupDiscoveryList", obj)
}

// writeDiscovery writes a legacy discovery document in the negotiated media
// type (JSON, YAML or protobuf), or the 406 Status.
func (s *Server) writeDiscovery(w http.ResponseWriter, req *http.Request, obj runtime.Object) {
	out, err := s.wire.negotiateOutput(req, plainRestrictions{})
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	s.wire.write(w, http.StatusOK, out, "", obj)
}

func (s *Server) serveAPIVersions(w http.ResponseWriter, req *http.Request) {
	setScope(req.Context(), "get", "")
	if out, ok := s.aggregated(req); ok {
		s.writeAggregated(w, out, s.disc.coreAgg)
		return
	}
	w.Header().Set("Vary", "Accept")
	s.writeDiscovery(w, req, &metav1.APIVersions{
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
	if out, ok := s.aggregated(req); ok {
		s.writeAggregated(w, out, s.disc.groupsAgg)
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
	s.writeDiscovery(w, req, &list)
}

func (s *Server) serveAPIGroup(group string) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		setScope(req.Context(), "get", "")
		g := s.apiGroup(group)
		s.writeDiscovery(w, req, &g)
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
			if s.disc.tokens && r == resources.ServiceAccounts {
				list.APIResources = append(list.APIResources, metav1.APIResource{
					Name: r.Name + "/" + tokenSubresource, Namespaced: true, Group: "authentication.k8s.io", Version: "v1",
					Kind: "TokenRequest", Verbs: []string{"create"},
				})
			}
		}
		for _, c := range s.disc.createOnly[gv] {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: c.name, Namespaced: c.namespaced, Kind: c.kind, Verbs: []string{"create"},
			})
		}
		s.writeDiscovery(w, req, &list)
	}
}

// convertJSON copies in into out through their JSON form.
func convertJSON(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}
