package apiserver

import (
	"context"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// verbs); read-only.
	Object resources.Object
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
// spec.nodeName there). After Authorize allowed the request, the server
// calls AdmitUpdate inside the write, with the very object the write
// replaces: no read of its own, no window between check and write. It runs
// on every attempt of the write (a conflict retries with the newer object)
// and for dry runs; old is read-only. Errors are treated as Authorize's.
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

// openPath reports whether a path is served without authentication.
func openPath(p string) bool {
	switch p {
	case "/healthz", "/livez", "/readyz", "/version":
		return true
	}
	return false
}

// withAuthentication requires a valid bearer token on every path but the open ones.
func (s *Server) withAuthentication(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if openPath(req.URL.Path) {
			next.ServeHTTP(w, req)
			return
		}
		token, ok := bearerToken(req.Header.Get("Authorization"))
		if !ok {
			s.writeError(w, req, apierrors.NewUnauthorized("Unauthorized"))
			return
		}
		name, groups, ok := s.authn.AuthenticateToken(token)
		if !ok || name == "" {
			s.writeError(w, req, apierrors.NewUnauthorized("Unauthorized"))
			return
		}
		u := UserInfo{Name: name, Groups: append(slices.Clip(groups), authenticatedGroup)}
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
// the object an update or patch (verb) of c replaces.
func (s *Server) admitUpdate(ctx context.Context, c call, verb string, old resources.Object) error {
	admitter, ok := s.authz.(UpdateAdmitter)
	if !ok || c.user.InGroup(mastersGroup) {
		return nil
	}
	return forbiddenOr(c, admitter.AdmitUpdate(ctx, c.attrs(verb), old))
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
