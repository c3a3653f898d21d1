package apiserver

import (
	"context"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/everynode/everynode/resources"
)

// mastersGroup is the group whose members are always authorized, as in Kubernetes.
const mastersGroup = "system:masters"

// authenticatedGroup is added to every authenticated user's groups.
const authenticatedGroup = "system:authenticated"

// Authenticator maps a bearer token to a user name and groups.
type Authenticator interface {
	AuthenticateToken(token string) (name string, groups []string, ok bool)
}

// UserInfo is the authenticated caller of a request.
type UserInfo struct {
	Name   string
	Groups []string
}

// InGroup reports whether the user is a member of group.
func (u UserInfo) InGroup(group string) bool { return slices.Contains(u.Groups, group) }

// Attributes describe a request for authorization.
type Attributes struct {
	User UserInfo
	// Verb is the API verb: get, list, watch, create, update, patch, delete, deletecollection.
	Verb string
	// APIGroup is the resource's group ("" for core).
	APIGroup string
	// Resource is the plural resource name ("pods").
	Resource string
	// Subresource is "" or "status".
	Subresource string
	// Namespace is the request's namespace ("" for cluster-scoped resources and
	// all-namespaces lists and watches).
	Namespace string
	// Name is the object's name ("" for list, watch and deletecollection).
	Name string
	// Object is the object sent with a create or update (nil for other
	// verbs); in UpdateAdmitter.AdmitUpdate, the object an update or patch
	// would store. Read-only.
	Object resources.Object
	// FieldSelector is the field selector of a list, watch or
	// deletecollection (nil when it has none), as Kubernetes 1.32+ gives
	// authorizers (AuthorizeWithSelectors).
	FieldSelector fields.Selector
	// Path is the URL path of a non-resource request (Resource is then
	// empty): /metrics, /api, /openapi/v3...
	Path string
}

// Authorizer decides whether a request may proceed. A nil error allows it; an
// error carrying a Kubernetes status (apierrors.APIStatus) is returned to the
// caller as is, any other error becomes 403 Forbidden with its message.
type Authorizer interface {
	Authorize(ctx context.Context, attrs Attributes) error
}

// UpdateAdmitter is what an Authorizer may add when its decision depends on
// the stored object an update or patch replaces, as Kubernetes' admission
// plugins get the old object (NodeRestriction checks the pod's
// spec.nodeName there, and a Node's taints and labels). After Authorize
// allowed the request, the server calls AdmitUpdate inside the write, with
// the very object the write replaces, twice: before the change is made
// (attrs.Object nil) and with the object the write would store
// (attrs.Object): no read of its own, no window between check and write. It
// runs on every attempt of the write (a conflict retries with the newer
// object) and for dry runs; both objects are read-only. Errors are treated
// as Authorize's.
type UpdateAdmitter interface {
	AdmitUpdate(ctx context.Context, attrs Attributes, old resources.Object) error
}

type userKey struct{}

// WithUser returns ctx carrying the authenticated user.
func WithUser(ctx context.Context, u UserInfo) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the user WithUser stored in ctx.
func UserFrom(ctx context.Context) (UserInfo, bool) {
	u, ok := ctx.Value(userKey{}).(UserInfo)
	return u, ok
}

// openPath reports whether a request is served without authentication:
// reads of /healthz, /livez, /readyz and /version, what kube-apiserver's
// default RBAC lets system:unauthenticated read (the system:public-info-viewer
// ClusterRole). Everything else needs a token (docs/security.md §1).
// The dashboard's shell under /ui/ is served before this check (dashboard.go):
// it holds no cluster data, and its API calls come back here with a token.
func openPath(req *http.Request) bool {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return false
	}
	switch req.URL.Path {
	case "/healthz", "/livez", "/readyz", "/version":
		return true
	}
	return false
}

// withAuthentication requires a valid bearer token on every request but the
// open ones, before anything reads the request's body. A request without
// one is answered 401 and its connection closed (refuse); a wrong token is
// answered so too, after its source's failure throttle.
func (s *Server) withAuthentication(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		token, ok := bearerToken(req.Header.Get("Authorization"))
		if !ok && openPath(req) {
			next.ServeHTTP(w, req) // anonymous
			return
		}
		// A token is checked wherever it is sent: kube-apiserver answers a
		// wrong one 401 on the open paths too.
		if !ok {
			s.refuse(w, req, apierrors.NewUnauthorized("Unauthorized"), false)
			return
		}
		name, groups, ok := s.authn.AuthenticateToken(token)
		if !ok || name == "" {
			s.refuse(w, req, apierrors.NewUnauthorized("Unauthorized"), true)
			return
		}
		u := UserInfo{Name: name, Groups: append(slices.Clip(groups), authenticatedGroup)}
		noteUser(req.Context(), u)
		next.ServeHTTP(w, req.WithContext(WithUser(req.Context(), u)))
	})
}

// bearerToken extracts the token of an "Authorization: Bearer <token>" header.
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authorize runs the authorization hook for one verb of a call.
func (s *Server) authorize(ctx context.Context, c call, verb string) error {
	if c.user.InGroup(mastersGroup) || s.authz == nil {
		return nil
	}
	return forbiddenOr(c, s.authz.Authorize(ctx, c.attrs(verb)))
}

// admitUpdate runs the authorizer's UpdateAdmitter, if it has one, against
// the object an update or patch (verb) of c replaces (old) and the one it
// would store (next).
func (s *Server) admitUpdate(ctx context.Context, c call, verb string, old, next resources.Object) error {
	admitter, ok := s.authz.(UpdateAdmitter)
	if !ok || c.user.InGroup(mastersGroup) {
		return nil
	}
	a := c.attrs(verb)
	a.Object = next
	return forbiddenOr(c, admitter.AdmitUpdate(ctx, a, old))
}

// authorizeVerbPath authorizes verb on a non-resource path.
func (s *Server) authorizeVerbPath(req *http.Request, verb string) error {
	u, _ := UserFrom(req.Context())
	if u.InGroup(mastersGroup) || s.authz == nil {
		return nil
	}
	err := s.authz.Authorize(req.Context(), Attributes{User: u, Verb: verb, Path: req.URL.Path})
	if err == nil {
		return nil
	}
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	return apierrors.NewForbidden(schema.GroupResource{}, "", err)
}

// forbiddenOr returns err as the authorizer gave it when it carries a
// status, and as 403 Forbidden otherwise; nil stays nil.
func forbiddenOr(c call, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	gr := schema.GroupResource{Group: c.r.Group, Resource: c.r.Name}
	if c.sub != "" {
		gr.Resource += "/" + c.sub
	}
	return apierrors.NewForbidden(gr, c.name, err)
}
