// Package apiserver serves everynode's Kubernetes-shaped REST API over net/http:
// routing for every resource in the resources table, bearer-token
// authentication and an authorization hook, get/list/watch/create/update/
// patch/delete/deletecollection with Kubernetes semantics, discovery, health
// endpoints and Prometheus metrics. Objects live in package store; decoding,
// defaults, validation and patching are package strategy's.
//
// For kubectl (docs/kubectl-wire.md) it also serves:
//   - server-side printing: get, list and watch answer a metav1.Table when the
//     Accept header asks for as=Table;g=meta.k8s.io;v=v1|v1beta1, with the
//     columns of package printers and PartialObjectMetadata (or, with
//     includeObject=Object, the full object) in each row;
//   - OpenAPI v2 and v3 (per group version), built by kube-openapi from
//     Kubernetes' generated definitions as kube-apiserver builds them (see
//     openapi.go): every PATCH operation advertises fieldValidation, so
//     kubectl leaves validation to the server, and `kubectl explain` reads
//     upstream's schemas and descriptions;
//   - server-side apply (application/apply-patch+yaml) with managedFields,
//     ownership, conflicts and force through apimachinery's managedfields,
//     typed from the same generated definitions, so list semantics are
//     upstream's (container ports keyed by port and protocol, taints
//     atomic, ...). Non-apply writes record their fieldManager (the
//     User-Agent's product, or the local client's user, when none is given);
//     status writes leave managedFields unchanged, and unknown fields in an
//     apply body are always a 400, whatever fieldValidation says.
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
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/version"

	"github.com/everynode/everynode/apiserver/strategy"
	"github.com/everynode/everynode/internal/httpserve"
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
	// Join, when set, serves POST JoinPath (see join.go) without a token.
	Join *JoinConfig
	// ServiceAccountTokens, when set, serves TokenRequest
	// (serviceaccounts/token) and authenticates the tokens it issues, after
	// Authenticator (docs/rbac.md §6).
	ServiceAccountTokens *ServiceAccountTokens
	// NodeCredential returns the bearer token presented to a node's agent
	// when proxying pods/log (see podlog.go); nil: logs answer 503.
	NodeCredential func(node string) string
	// AuditLog, when set, receives the audit log: one JSON line, an
	// audit.k8s.io/v1 Event, per write and per denied request (audit.go).
	// It must be safe for concurrent use; the server never closes it.
	AuditLog io.Writer
	// Connected, when set, is kept up to date with the nodes that hold a
	// long-running request to this server (connected.go); the node
	// lifecycle controller reads it to corroborate gossip.
	Connected *ConnectedNodes
	// StreamPing paces the HTTP/2 pings that find cut links (connected.go).
	StreamPing StreamPing
	// Images, when set, serves the image store (package images) under
	// /everynode/v1/images and /everynode/v1/blobs/, behind this server's
	// authentication and authorization: admins write, nodes read.
	Images http.Handler
	// ServerBlobs, when set, serves images.ServerBlobsPath to the other
	// servers of a cluster: it authenticates them itself (by their peer
	// certificate), so no token is asked for.
	ServerBlobs http.Handler
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
	// watchEnc shares live watch events' JSON between streams.
	watchEnc *watchEncodings
	disc     *discovery
	wire     *wire
	openapi  *openAPI
	reviews  *reviews
	tokens   *ServiceAccountTokens
	writer   *strategy.Writer
	handler  http.Handler
	podLogs  *podLogs
	join     *JoinConfig
	audit    io.Writer // nil: no audit log
	// connected: nodes holding a stream to this server; nil: not tracked.
	connected   *ConnectedNodes
	ping        StreamPing
	images      http.Handler
	serverBlobs http.Handler // images.ServerBlobsPath, for the other servers

	// Connection hardening (serving.go); tests shorten them.
	limits         httpserve.Limits
	requestTimeout time.Duration
	joinTimeout    time.Duration
	throttle       *failureThrottle

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
		watchEnc: newWatchEncodings(watchEncodingsSize),
		log:      cfg.Logger,
		authn:    cfg.Authenticator,
		tokens:   cfg.ServiceAccountTokens,
		authz:    cfg.Authorizer,
		maxBody:  cfg.MaxBodyBytes,
		now:      cfg.Now,
		newUID:   cfg.NewUID,
		audit:    cfg.AuditLog,
		version:  defaultVersion(cfg.Version),
		metrics:  newMetrics(),

		limits:         httpserve.DefaultLimits(),
		requestTimeout: DefaultRequestTimeout,
		joinTimeout:    joinBodyTimeout,
		throttle:       newFailureThrottle(),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.tokens != nil {
		s.authn = authenticators{cfg.Authenticator, s.tokens}
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
	wr, err := newWire()
	if err != nil {
		return nil, err
	}
	s.wire = wr
	s.reviews = newReviews(wr.scheme)
	s.disc = newDiscovery(resources.All(), s.tokens != nil)
	oa, err := newOpenAPI(wr.scheme, s.disc)
	if err != nil {
		return nil, fmt.Errorf("apiserver: build OpenAPI documents: %w", err)
	}
	s.openapi = oa
	fields, err := strategy.NewFieldManagers(nil)
	if err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	s.writer = &strategy.Writer{Now: s.now, NewUID: s.newUID, Fields: fields}
	s.podLogs = newPodLogs(cfg.NodeCredential)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.join = cfg.Join
	s.images = cfg.Images
	s.serverBlobs = cfg.ServerBlobs
	s.connected, s.ping = cfg.Connected, cfg.StreamPing.orDefaults()
	api := s.withAuthentication(s.withNodeStreams(s.withImpersonation(s.withNonResourceAuthorization(s.withRequestDeadline(s.routes())))))
	dash, err := s.dashboard(api)
	if err != nil {
		return nil, err
	}
	s.handler = s.withRecover(s.withMetrics(s.withAudit(s.withServerBlobs(s.withJoin(cfg.Join, dash)))))
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

// Run serves on ln until ctx ends, over TLS when tlsCfg is not nil, with
// httpserve's connection deadlines (headers within 10 s, idle connections
// closed after 90 s; docs/security.md §1). When ctx ends it closes
// every watch stream, then shuts the HTTP server down, waiting at most a few
// seconds for in-flight requests. It returns nil after a clean shutdown.
func (s *Server) Run(ctx context.Context, ln net.Listener, tlsCfg *tls.Config) error {
	srv := s.httpServer()
	srv.RegisterOnShutdown(s.cancel)
	s.log.Info("API server listening", "addr", ln.Addr().String(), "tls", tlsCfg != nil)
	// s.cancel ends the watch streams before waiting for connections to go idle.
	if err := httpserve.Serve(ctx, srv, ln, tlsCfg, shutdownTimeout, s.cancel); err != nil {
		return fmt.Errorf("apiserver: %w", err)
	}
	s.log.Info("API server stopped")
	return nil
}

// httpServer is the http.Server Run serves.
// Its HTTP/2 connections are pinged after Config.StreamPing's interval of
// silence and closed when the answer does not come within its timeout: an agent
// whose link was cut loses its streams within seconds (connected.go).
func (s *Server) httpServer() *http.Server {
	srv := httpserve.NewServer(s.handler, s.limits, slog.NewLogLogger(s.log.Handler(), slog.LevelDebug))
	srv.HTTP2 = &http.HTTP2Config{SendPingTimeout: s.ping.Interval, PingTimeout: s.ping.Timeout}
	return srv
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
	sub       string           // "" or "status"
	namespace string           // "" for cluster-scoped resources and all-namespaces lists
	name      string           // "" for collection verbs
	manager   string           // field manager of a write ("" = the user's name)
	applying  bool             // a server-side apply: managedFields come from the apply
	object    resources.Object // the request's object for create and update (authorization)
	fields    fields.Selector  // the field selector of a list, watch or deletecollection (authorization)
}

// op is the call as the shared write rules see it; the manager defaults to
// the user's name.
func (c call) op() strategy.Op {
	manager := c.manager
	if manager == "" {
		manager = c.user.Name
	}
	return strategy.Op{Resource: c.r, Subresource: c.sub, Manager: manager, Applying: c.applying}
}

func (c call) attrs(verb string) Attributes {
	return Attributes{
		User: c.user, Verb: verb, APIGroup: c.r.Group, Resource: c.r.Name,
		Subresource: c.sub, Namespace: c.namespace, Name: c.name, Object: c.object, FieldSelector: c.fields,
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
