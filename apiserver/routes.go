package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// handlerFunc is an API handler: it writes a response or returns an error,
// which the adapter turns into a Status.
type handlerFunc func(w http.ResponseWriter, req *http.Request, c call) error

// routes registers every path the server serves.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.serveHealth)
	mux.HandleFunc("GET /livez", s.serveHealth)
	mux.HandleFunc("GET /readyz", s.serveReady)
	mux.HandleFunc("GET /version", s.serveVersion)
	mux.HandleFunc("GET /metrics", s.serveMetrics)
	mux.HandleFunc("GET /api", s.serveAPIVersions)
	mux.HandleFunc("GET /apis", s.serveAPIGroups)
	for _, gv := range s.disc.groupVersions() {
		mux.HandleFunc("GET "+groupVersionPath(gv), s.serveResourceList(gv))
		if gv.Group != "" {
			mux.HandleFunc("GET /apis/"+gv.Group, s.serveAPIGroup(gv.Group))
		}
	}
	for _, r := range resources.All() {
		s.resourceRoutes(mux, r)
	}
	mux.Handle(podLogPath, s.adapt(resources.Pods, "log", "get", s.servePodLog))
	s.reviewRoutes(mux)
	mux.HandleFunc("POST "+client.RotateJoinTokenPath, s.serveRotateJoinToken)
	mux.HandleFunc("POST "+client.RemoveServerPath, s.serveRemoveServer)
	mux.HandleFunc("POST "+client.RotateEncryptionKeyPath, s.serveRotateEncryptionKey)
	mux.HandleFunc("GET "+ConnectedNodesPath, s.serveConnectedNodes)
	if s.images != nil {
		// Authorized as non-resource paths (verb: the HTTP method).
		mux.Handle(imagesPath, s.images)
		mux.Handle(blobsPath, s.images)
	}
	if err := s.openapi.register(prefixMux{mux}); err != nil {
		panic(err) // cannot happen: registering on a ServeMux does not fail
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		s.writeError(w, req, errNotFoundPath(req))
	})
	return mux
}

// errNotFoundPath is the 404 for a path the server does not serve.
func errNotFoundPath(req *http.Request) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: fmt.Sprintf("the server could not find the requested resource (%s %s)", req.Method, req.URL.Path),
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeUnexpectedServerResponse, Message: "404 page not found"}}},
	}}
}

// groupVersionPath is "/api/v1" for the core group, "/apis/<group>/<version>" otherwise.
func groupVersionPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "/api/" + gv.Version
	}
	return "/apis/" + gv.Group + "/" + gv.Version
}

// resourceRoutes registers the collection, item, status and all-namespaces
// paths of one resource.
func (s *Server) resourceRoutes(mux *http.ServeMux, r *resources.Resource) {
	prefix := groupVersionPath(r.GroupVersion())
	collection := prefix + "/" + r.Name
	if r.Namespaced {
		collection = prefix + "/namespaces/{namespace}/" + r.Name
		all := prefix + "/" + r.Name
		mux.Handle("GET "+all, s.adapt(r, "", "list", s.serveList))
		mux.Handle(all, s.methodNotAllowed(r))
	}
	item := collection + "/{name}"

	mux.Handle("GET "+collection, s.adapt(r, "", "list", s.serveList))
	mux.Handle("POST "+collection, s.adapt(r, "", "create", s.serveCreate))
	mux.Handle("DELETE "+collection, s.adapt(r, "", "deletecollection", s.serveDeleteCollection))
	mux.Handle(collection, s.methodNotAllowed(r))

	mux.Handle("GET "+item, s.adapt(r, "", "get", s.serveGet))
	mux.Handle("PUT "+item, s.adapt(r, "", "update", s.serveUpdate))
	mux.Handle("PATCH "+item, s.adapt(r, "", "patch", s.servePatch))
	mux.Handle("DELETE "+item, s.adapt(r, "", "delete", s.serveDelete))
	mux.Handle(item, s.methodNotAllowed(r))

	for _, sub := range r.Subresources {
		if sub != "status" {
			continue // other subresources (pods/log) are served by their own handlers
		}
		path := item + "/" + sub
		mux.Handle("GET "+path, s.adapt(r, sub, "get", s.serveGet))
		mux.Handle("PUT "+path, s.adapt(r, sub, "update", s.serveUpdate))
		mux.Handle("PATCH "+path, s.adapt(r, sub, "patch", s.servePatch))
		mux.Handle(path, s.methodNotAllowed(r))
	}
}

// adapt turns a handlerFunc into an http.Handler: it fills the call from the
// path and the authenticated user, records verb and resource for metrics and
// writes a returned error as a Status.
func (s *Server) adapt(r *resources.Resource, sub, verb string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		setScope(req.Context(), verb, r.Name)
		u, _ := UserFrom(req.Context())
		c := call{user: u, r: r, sub: sub, namespace: req.PathValue("namespace"), name: req.PathValue("name"),
			manager: managerFromRequest(req)}
		if err := h(w, req, c); err != nil {
			s.writeError(w, req, err)
		}
	})
}

func (s *Server) methodNotAllowed(r *resources.Resource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		setScope(req.Context(), strings.ToLower(req.Method), r.Name)
		s.writeError(w, req, apierrors.NewMethodNotSupported(r.GroupResource(), strings.ToLower(req.Method)))
	})
}

// scope is the per-request record the metrics middleware reads after the
// handler ran: the API verb and resource, when the request reached one.
type scope struct {
	verb     string
	resource string
}

type scopeKey struct{}

func setScope(ctx context.Context, verb, resource string) {
	if sc, ok := ctx.Value(scopeKey{}).(*scope); ok {
		sc.verb, sc.resource = verb, resource
	}
}

// withRecover turns a handler panic into a 500 Status and a log line.
func (s *Server) withRecover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panic", "method", req.Method, "path", req.URL.Path, "panic", v)
				s.writeError(w, req, apierrors.NewInternalError(fmt.Errorf("panic: %v", v)))
			}
		}()
		next.ServeHTTP(w, req)
	})
}

// withMetrics counts requests and measures their latency by verb, resource and code.
func (s *Server) withMetrics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		sc := &scope{verb: strings.ToLower(req.Method)}
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, req.WithContext(context.WithValue(req.Context(), scopeKey{}, sc)))
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		s.metrics.observeRequest(sc.verb, sc.resource, code, time.Since(start))
		s.log.Debug("request", "method", req.Method, "path", req.URL.Path, "verb", sc.verb,
			"code", code, "duration", time.Since(start))
	})
}

// statusRecorder remembers the response code; Unwrap lets
// http.ResponseController reach the real writer's Flush.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// The image store's paths (package images serves them; apiserver does not
// import it, to keep the store's dependencies out of API tests).
const (
	imagesPath = "/everynode/v1/images"
	blobsPath  = "/everynode/v1/blobs/"
)
