package apiserver

import (
	"context"
	"errors"
	"net/http"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/apis/authentication"
	authenticationinstall "k8s.io/kubernetes/pkg/apis/authentication/install"
	authorizationapi "k8s.io/kubernetes/pkg/apis/authorization"
	authorizationinstall "k8s.io/kubernetes/pkg/apis/authorization/install"
	"k8s.io/kubernetes/pkg/registry/authentication/selfsubjectreview"
	"k8s.io/kubernetes/pkg/registry/authentication/tokenreview"
	"k8s.io/kubernetes/pkg/registry/authorization/localsubjectaccessreview"
	"k8s.io/kubernetes/pkg/registry/authorization/selfsubjectaccessreview"
	"k8s.io/kubernetes/pkg/registry/authorization/selfsubjectrulesreview"
	"k8s.io/kubernetes/pkg/registry/authorization/subjectaccessreview"

	"github.com/everynode/everynode/resources"
)

// decide is the server's authorization decision for a, as Kubernetes'
// authorizers give it: system:masters is always allowed (as kube-apiserver's
// privileged-group authorizer), a server without an Authorizer allows
// everything, otherwise the Authorizer decides (docs/rbac.md §3).
func (s *Server) decide(ctx context.Context, a Attributes) (authorizer.Decision, string, error) {
	if a.User.InGroup(mastersGroup) || s.authz == nil {
		return authorizer.DecisionAllow, "", nil
	}
	if d, ok := s.authz.(Decider); ok {
		return d.Decide(ctx, a)
	}
	if err := s.authz.Authorize(ctx, a); err != nil {
		return authorizer.DecisionNoOpinion, err.Error(), nil
	}
	return authorizer.DecisionAllow, "", nil
}

// kubeAuthorizer is decide as k8s.io/apiserver's authorizer, for the upstream
// code the server runs: impersonation, access reviews, escalate and bind
// checks.
func (s *Server) kubeAuthorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(ctx context.Context, ka authorizer.Attributes) (authorizer.Decision, string, error) {
		return s.decide(ctx, fromKubeAttributes(ka))
	})
}

// rulesFor resolves the rules of u for SelfSubjectRulesReview.
func (s *Server) rulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	if src, ok := s.authz.(RuleSource); ok {
		return src.RulesFor(ctx, u, namespace)
	}
	return nil, nil, true, errors.New("this server's authorizer does not list rules")
}

// withImpersonation serves the Impersonate-User, Impersonate-Group,
// Impersonate-Uid and Impersonate-Extra-* headers with k8s.io/apiserver's
// own filter: the caller must be allowed the verb impersonate on each
// (users, groups, serviceaccounts, uids, userextras), or the request is
// Kubernetes' 403; the request then runs as the impersonated user. UID and
// extras are checked but not carried further: no authorizer here reads them.
func (s *Server) withImpersonation(next http.Handler) http.Handler {
	inner := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if ku, ok := genericapirequest.UserFrom(req.Context()); ok {
			u := UserInfo{Name: ku.GetName(), Groups: ku.GetGroups()}
			noteUser(req.Context(), u)
			req = req.WithContext(WithUser(req.Context(), u))
		}
		next.ServeHTTP(w, req)
	})
	imp := impersonation.WithImpersonation(inner, s.kubeAuthorizer(), s.reviews.codecs.WithoutConversion())
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, ok := UserFrom(req.Context())
		if !ok || !impersonating(req.Header) {
			next.ServeHTTP(w, req)
			return
		}
		imp.ServeHTTP(w, req.WithContext(genericapirequest.WithUser(req.Context(), kubeUser(u))))
	})
}

func impersonating(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(k, "Impersonate-") {
			return true
		}
	}
	return false
}

// withNonResourceAuthorization authorizes requests for paths that are not
// resources (discovery, /openapi, /metrics) as kube-apiserver does: verb
// the HTTP method in lower case, the path as is. The default cluster role
// system:discovery lets every authenticated user read discovery and
// /openapi; /metrics needs a role that grants it. The open paths
// (/healthz, /livez, /readyz, /version) are never refused.
func (s *Server) withNonResourceAuthorization(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, ok := UserFrom(req.Context())
		if !ok || openPath(req) || isResourcePath(req.URL.Path) || s.authz == nil || u.InGroup(mastersGroup) {
			next.ServeHTTP(w, req)
			return
		}
		if err := s.authorizeVerbPath(req, strings.ToLower(req.Method)); err != nil {
			s.writeError(w, req, err)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// isResourcePath reports whether p names a resource (or a collection, or an
// access review): /api/v1/<...> or /apis/<group>/<version>/<...>. The
// resource handlers authorize those themselves.
func isResourcePath(p string) bool {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		return true
	case len(parts) >= 4 && parts[0] == "apis":
		return true
	}
	return false
}

// reviews serves authorization.k8s.io/v1's access reviews (and
// authentication.k8s.io/v1's SelfSubjectReview and TokenReview) with upstream's
// REST handlers (k8s.io/kubernetes pkg/registry/authorization), on the
// internal types they are written for.
type reviews struct {
	codecs   serializer.CodecFactory // the wire's scheme: v1 bodies in and out
	internal *runtime.Scheme         // internal and v1 authorization types, converted both ways
}

func newReviews(wireScheme *runtime.Scheme) *reviews {
	internal := runtime.NewScheme()
	authorizationinstall.Install(internal)
	authenticationinstall.Install(internal)
	return &reviews{codecs: serializer.NewCodecFactory(wireScheme), internal: internal}
}

// reviewRoutes registers the create-only access review endpoints.
func (s *Server) reviewRoutes(mux *http.ServeMux) {
	const prefix = "/apis/authorization.k8s.io/v1/"
	az, sc := s.kubeAuthorizer(), s.reviews.internal
	gv := authorizationv1.SchemeGroupVersion
	mux.Handle("POST "+prefix+"selfsubjectaccessreviews", s.serveReview(gv.WithKind("SelfSubjectAccessReview"), "selfsubjectaccessreviews",
		&authorizationv1.SelfSubjectAccessReview{}, &authorizationapi.SelfSubjectAccessReview{}, selfsubjectaccessreview.NewREST(az, sc)))
	mux.Handle("POST "+prefix+"subjectaccessreviews", s.serveReview(gv.WithKind("SubjectAccessReview"), "subjectaccessreviews",
		&authorizationv1.SubjectAccessReview{}, &authorizationapi.SubjectAccessReview{}, subjectaccessreview.NewREST(az, sc)))
	mux.Handle("POST "+prefix+"namespaces/{namespace}/localsubjectaccessreviews", s.serveReview(gv.WithKind("LocalSubjectAccessReview"),
		"localsubjectaccessreviews", &authorizationv1.LocalSubjectAccessReview{}, &authorizationapi.LocalSubjectAccessReview{},
		localsubjectaccessreview.NewREST(az, sc)))
	mux.Handle("POST "+prefix+"selfsubjectrulesreviews", s.serveReview(gv.WithKind("SelfSubjectRulesReview"), "selfsubjectrulesreviews",
		&authorizationv1.SelfSubjectRulesReview{}, &authorizationapi.SelfSubjectRulesReview{},
		selfsubjectrulesreview.NewREST(authorizer.RuleResolver(ruleResolverFunc(s.rulesFor)))))
	// kubectl auth whoami.
	mux.Handle("POST /apis/authentication.k8s.io/v1/selfsubjectreviews", s.serveReview(
		authenticationv1.SchemeGroupVersion.WithKind("SelfSubjectReview"), "selfsubjectreviews",
		&authenticationv1.SelfSubjectReview{}, &authentication.SelfSubjectReview{}, selfsubjectreview.NewREST()))
	mux.Handle("POST /apis/authentication.k8s.io/v1/tokenreviews", s.serveReview(
		authenticationv1.SchemeGroupVersion.WithKind("TokenReview"), "tokenreviews",
		&authenticationv1.TokenReview{}, &authentication.TokenReview{},
		tokenreview.NewREST(s.reviewAuthenticator(), []string{ServiceAccountIssuer})))
	if s.tokens != nil {
		mux.Handle("POST /api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
			s.adapt(resources.ServiceAccounts, "token", "create", s.serveTokenRequest))
	}
}

type ruleResolverFunc func(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error)

func (f ruleResolverFunc) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	return f(ctx, u, namespace)
}

// serveReview decodes a v1 review (JSON, YAML or protobuf), checks that the
// caller may create it (SubjectAccessReview and LocalSubjectAccessReview ask
// about others: the default roles grant them only to admins), runs
// upstream's Create on its internal form, and answers 201 with the v1
// review and its status. Nothing is stored.
func (s *Server) serveReview(gvk schema.GroupVersionKind, resource string, v1obj, internal runtime.Object, creater rest.Creater) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		setScope(req.Context(), "create", resource)
		if err := s.review(w, req, resource, gvk, v1obj, internal, creater); err != nil {
			s.writeError(w, req, err)
		}
	})
}

func (s *Server) review(w http.ResponseWriter, req *http.Request, resource string, gvk schema.GroupVersionKind,
	v1proto, internalProto runtime.Object, creater rest.Creater) error {
	u, _ := UserFrom(req.Context())
	namespace := req.PathValue("namespace")
	a := Attributes{User: u, Verb: "create", APIGroup: gvk.Group, Resource: resource, Namespace: namespace}
	if d, reason, err := s.decide(req.Context(), a); err != nil || d != authorizer.DecisionAllow {
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		return forbiddenBecause(a, reason)
	}
	out, err := s.wire.negotiateOutput(req, plainRestrictions{})
	if err != nil {
		return err
	}
	in := v1proto.DeepCopyObject()
	if err := s.decodeInto(w, req, gvk, in); err != nil {
		return err
	}
	iobj := internalProto.DeepCopyObject()
	if err := s.reviews.internal.Convert(in, iobj, nil); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	ctx := genericapirequest.WithUser(req.Context(), kubeUser(u))
	ctx = genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: "create", APIGroup: gvk.Group, APIVersion: gvk.Version,
		Namespace: namespace, Resource: resource, Path: req.URL.Path,
	})
	if namespace != "" {
		ctx = genericapirequest.WithNamespace(ctx, namespace)
	}
	res, err := creater.Create(ctx, iobj, nil, nil)
	if err != nil {
		return err
	}
	result := v1proto.DeepCopyObject()
	if err := s.reviews.internal.Convert(res, result, nil); err != nil {
		return apierrors.NewInternalError(err)
	}
	result.GetObjectKind().SetGroupVersionKind(gvk)
	s.wire.write(w, http.StatusCreated, out, "", result)
	return nil
}
