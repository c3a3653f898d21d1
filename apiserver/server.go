// Package apiserver serves everynode's Kubernetes-shaped REST API over net/http:
// routing for every resource in the resources table, bearer-token
// authentication and an authorization hook, get/list/watch/create/update/
// patch/delete/deletecollection with Kubernetes semantics, discovery, health
// endpoints and Prometheus metrics. Objects live in package store; decoding,
// defaults, validation and patching are package strategy's.
//
// The same request logic runs in process through NewLocalClient, so the
// server's own controllers see exactly the defaults, validation, errors and
// authorization that HTTP clients see.
package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/version"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// DefaultMaxBodyBytes is the largest request body accepted (3 MiB, etcd's
// default request size limit is a little above it, as in Kubernetes).
const DefaultMaxBodyBytes = 3 << 20

// shutdownTimeout bounds how long Run waits for in-flight requests after its
// context ends; watch streams are ended first, so this only covers ordinary
// requests.
const shutdownTimeout = 10 * time.Second

// Config configures a Server. Store and Authenticator are required.
type Config struct {
	// Store holds the objects.
	Store *store.Store
	// Authenticator maps bearer tokens to users.
	Authenticator Authenticator
	// Authorizer decides whether an authenticated request may proceed. Nil
	// allows everything. Members of the group "system:masters" are always allowed.
	Authorizer Authorizer
	// Logger receives request errors and lifecycle messages; nil discards.
	Logger *slog.Logger
	// MaxBodyBytes is the largest accepted request body in bytes; 0 means
	// DefaultMaxBodyBytes (3 MiB).
	MaxBodyBytes int64
	// Now is the clock for creationTimestamp and deletionTimestamp; nil means time.Now.
	Now func() time.Time
	// NewUID makes object UIDs; nil means random UUIDs.
	NewUID func() types.UID
	// Version is served at /version. Empty fields get everynode's defaults
	// (major "1", minor "32", so kubectl 1.32 talks to it).
	Version version.Info
}

// Server is the API server. Create it with New, serve it with Run (or mount
// Handler yourself). A Server serves one lifetime: once Run returns, its watch
// streams are closed for good.
type Server struct {
	store   *instrumentedStore
	log     *slog.Logger
	authn   Authenticator
	authz   Authorizer
	maxBody int64
	now     func() time.Time
	newUID  func() types.UID
	version version.Info
	metrics *metrics
	disc    *discovery
	openapi *openAPIStub
	fields  *fieldManagers
	handler http.Handler

	// ctx is the server-wide context: it ends every open watch stream.
	ctx    context.Context
	cancel context.CancelFunc
}

// New validates cfg and builds a Server. It starts nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("apiserver: Config.Store is required")
	}
	if cfg.Authenticator == nil {
		return nil, errors.New("apiserver: Config.Authenticator is required")
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("apiserver: Config.MaxBodyBytes %d is negative", cfg.MaxBodyBytes)
	}
	s := &Server{
		log:     cfg.Logger,
		authn:   cfg.Authenticator,
		authz:   cfg.Authorizer,
		maxBody: cfg.MaxBodyBytes,
		now:     cfg.Now,
		newUID:  cfg.NewUID,
		version: defaultVersion(cfg.Version),
		metrics: newMetrics(),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.maxBody == 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.newUID == nil {
		s.newUID = uuid.NewUUID
	}
	s.store = &instrumentedStore{st: cfg.Store, m: s.metrics}
	s.disc = newDiscovery(resources.All())
	oa, err := newOpenAPIStub(s.disc.gvs, s.disc.byGV)
	if err != nil {
		return nil, fmt.Errorf("apiserver: build OpenAPI document: %w", err)
	}
	s.openapi = oa
	if s.fields, err = newFieldManagers(oa.schemas); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.handler = s.withRecover(s.withMetrics(s.withAuthentication(s.routes())))
	return s, nil
}

func defaultVersion(v version.Info) version.Info {
	if v.Major == "" {
		v.Major = "1"
	}
	if v.Minor == "" {
		v.Minor = "32"
	}
	if v.GitVersion == "" {
		v.GitVersion = "v1.32.0-everynode"
	}
	if v.GoVersion == "" {
		v.GoVersion = runtime.Version()
	}
	if v.Compiler == "" {
		v.Compiler = runtime.Compiler
	}
	if v.Platform == "" {
		v.Platform = runtime.GOOS + "/" + runtime.GOARCH
	}
	return v
}

// Handler returns the server's HTTP handler (authentication included).
func (s *Server) Handler() http.Handler { return s.handler }

// Run serves on ln until ctx ends, over TLS when tlsCfg is not nil. When ctx
// ends it closes every watch stream, then shuts the HTTP server down, waiting
// at most a few seconds for in-flight requests. It returns nil after a clean
// shutdown.
func (s *Server) Run(ctx context.Context, ln net.Listener, tlsCfg *tls.Config) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	srv.RegisterOnShutdown(s.cancel)
	errc := make(chan error, 1)
	go func() {
		if tlsCfg != nil {
			srv.TLSConfig = tlsCfg.Clone()
			errc <- srv.ServeTLS(ln, "", "")
			return
		}
		errc <- srv.Serve(ln)
	}()
	s.log.Info("API server listening", "addr", ln.Addr().String(), "tls", tlsCfg != nil)
	select {
	case err := <-errc:
		s.cancel()
		return fmt.Errorf("apiserver: serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.cancel() // end watch streams before waiting for connections to go idle
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		// Some connection would not go idle in time (a client that stopped
		// reading a watch): cut every connection.
		_ = srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("apiserver: shutdown: %w", err)
	}
	s.log.Info("API server stopped")
	return nil
}

// Stop ends every open watch stream (HTTP and local) without stopping the
// listener. Run calls it on shutdown; it is for servers mounted through Handler.
func (s *Server) Stop() { s.cancel() }

// systemUser is the identity of the server's own bookkeeping writes.
func systemUser() UserInfo { return UserInfo{Name: "system:apiserver", Groups: []string{mastersGroup}} }

// EnsureNamespaces creates the named namespaces that do not exist yet.
func (s *Server) EnsureNamespaces(ctx context.Context, names ...string) error {
	for _, name := range names {
		ns := resources.Namespaces.New()
		ns.SetName(name)
		resources.Namespaces.SetTypeMeta(ns)
		c := call{user: systemUser(), r: resources.Namespaces, name: name}
		if _, err := s.createObject(ctx, c, ns, false); err != nil && !apierrors.IsAlreadyExists(s.statusError(err)) {
			return fmt.Errorf("apiserver: ensure namespace %q: %w", name, err)
		}
	}
	return nil
}

// call is one API operation on one resource, independent of transport.
type call struct {
	user      UserInfo
	r         *resources.Resource
	sub       string // "" or "status"
	namespace string // "" for cluster-scoped resources and all-namespaces lists
	name      string // "" for collection verbs
	manager   string // field manager of a write ("" = the user's name)
	applying  bool   // a server-side apply: managedFields come from the apply
}

func (c call) attrs(verb string) Attributes {
	return Attributes{
		User: c.user, Verb: verb, APIGroup: c.r.Group, Resource: c.r.Name,
		Subresource: c.sub, Namespace: c.namespace, Name: c.name,
	}
}

// withTypeMeta returns obj with apiVersion and kind set, copying it first if
// they are missing (objects from the store may be shared and read-only).
func withTypeMeta(r *resources.Resource, obj resources.Object) resources.Object {
	if obj.GetObjectKind().GroupVersionKind() == r.GVK() {
		return obj
	}
	c := obj.DeepCopyObject().(resources.Object)
	r.SetTypeMeta(c)
	return c
}
