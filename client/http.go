package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"

	resources "github.com/everynode/everynode/resources/core"
)

// Config says how to reach and authenticate to an everynode API server.
type Config struct {
	// Server is the API's base URL ("https://127.0.0.1:6443").
	Server string
	// CAPEM holds the PEM certificates trusted for the server; empty means the
	// system roots.
	CAPEM []byte
	// Token is the bearer token sent on every request.
	Token string
	// Timeout bounds each non-watch request; 0 means 30s. Watches are bounded
	// only by their context and ListOptions.TimeoutSeconds.
	Timeout time.Duration
	// UserAgent is sent as User-Agent; empty means "everynode".
	UserAgent string
	// Logger receives debug lines per request; nil discards them.
	Logger *slog.Logger
	// Transport, when set, carries the requests instead of a transport of
	// the client's own (TLS from CAPEM); many clients with different tokens
	// may share one, and with it one HTTP/2 connection pool (simulated fleets).
	Transport http.RoundTripper
	// Servers, when set, are other API servers of the cluster (base URLs,
	// read again at each failover): requests move to one of them when
	// Server cannot be reached (Failover).
	Servers func() []string
	// Down, when set with Servers, returns the base URLs of servers known
	// to be dead (an agent's gossip view), read at each request: they are
	// tried after the others, so a request does not wait for a dial to a
	// dead server to time out.
	Down func() []string
	// PingAfter and PingTimeout pace the health check of a failover
	// client's own connections (Servers set, Transport not): a connection
	// silent for PingAfter is pinged and closed when the answer takes
	// longer than PingTimeout. Zero means DefaultPingAfter and
	// DefaultPingTimeout; slow links (the wan gossip profile) ping less
	// often.
	PingAfter, PingTimeout time.Duration
	// ResourceFor finds the resource of an object given to Create or
	// Update by its Go type. nil knows the core/v1 kinds alone
	// (resources/core.ForObject), all the node agent writes; pass
	// resources.ForObject to write any served kind. (The default keeps the
	// rest of the resource table out of the lean agent's binary.)
	ResourceFor func(runtime.Object) *resources.Resource
	// Protobuf, when set, sends objects and asks for them (watches too) in
	// Kubernetes' protobuf encoding (application/vnd.kubernetes.protobuf),
	// as the kubelet does; answers in JSON are still read. Off, everything
	// is JSON. Protobuf decodes about six times faster and is about 40 %
	// smaller: the node agent uses it.
	Protobuf bool
}

// failoverDialTimeout bounds connecting to a server when Config.Servers
// offers others to fail over to: a host that does not answer is given up
// on quickly. A TCP handshake is answered by the server's kernel, however
// busy its process, in one round trip; the bound still outlasts the first
// retransmission of a lost SYN (1 s on Linux), so one lost packet does
// not move the client.
const failoverDialTimeout = 1500 * time.Millisecond

// DefaultPingAfter and DefaultPingTimeout are the health check of a
// failover client's connections: after DefaultPingAfter without a frame
// from the server a ping is sent, and the connection is closed when its
// answer takes longer than DefaultPingTimeout (a partitioned server), as
// the server paces its own pings. The server's HTTP/2 layer answers a
// ping at once, however long its handlers take, so a slow answer never
// closes the connection; a ping answered late by a live but starved
// server costs a reconnection to that same server (the dial succeeds),
// not a failover.
const (
	DefaultPingAfter   = time.Second
	DefaultPingTimeout = time.Second
)

// DefaultTimeout bounds a non-watch request when Config.Timeout is zero: long
// enough for a busy embedded etcd, short enough that a dead server is reported.
const DefaultTimeout = 30 * time.Second

// acceptProtobuf is the Accept of a Protobuf client's object requests:
// protobuf, else JSON (for kinds or answers the server has no protobuf for).
const acceptProtobuf = runtime.ContentTypeProtobuf + ", " + runtime.ContentTypeJSON

// maxErrorBody caps how much of a non-Status error body is quoted in messages.
const maxErrorBody = 512

// HTTP is the Interface over HTTPS. It is safe for concurrent use.
type HTTP struct {
	base    *url.URL
	caPEM   []byte
	token   string
	timeout time.Duration
	ua      string
	log     *slog.Logger
	hc      *http.Client
	watch   *watchCodec
	kindOf  func(runtime.Object) *resources.Resource
	// coreOnly is set when kindOf is the default, core/v1 alone.
	coreOnly bool
	// proto is Config.Protobuf.
	proto bool
}

var _ Interface = (*HTTP)(nil)

// NewHTTP returns a client for cfg. It does not contact the server.
func NewHTTP(cfg Config) (*HTTP, error) {
	if cfg.Server == "" {
		return nil, errors.New("client: no server URL")
	}
	base, err := url.Parse(strings.TrimRight(cfg.Server, "/"))
	if err != nil {
		return nil, fmt.Errorf("client: server URL %q: %w", cfg.Server, err)
	}
	if base.Scheme != "https" && base.Scheme != "http" {
		return nil, fmt.Errorf("client: server URL %q: scheme must be https", cfg.Server)
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(cfg.CAPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CAPEM) {
			return nil, errors.New("client: CA data holds no PEM certificate")
		}
		tlsCfg.RootCAs = pool
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	tr.ForceAttemptHTTP2 = true
	tr.Proxy = nil
	h := &HTTP{
		base:    base,
		caPEM:   append([]byte(nil), cfg.CAPEM...),
		token:   cfg.Token,
		timeout: cfg.Timeout,
		ua:      cfg.UserAgent,
		log:     cfg.Logger,
		hc:      &http.Client{Transport: tr},
		watch:   newWatchCodec(),
		kindOf:  cfg.ResourceFor,
		proto:   cfg.Protobuf,
	}
	if h.kindOf == nil {
		h.kindOf, h.coreOnly = resources.ForObject, true
	}
	if cfg.Transport != nil {
		h.hc = &http.Client{Transport: cfg.Transport}
	}
	if cfg.Servers != nil {
		if cfg.Transport == nil {
			tr.DialContext = (&net.Dialer{Timeout: failoverDialTimeout, KeepAlive: 15 * time.Second}).DialContext
			// A server cut off the network sends nothing, not even a
			// reset: a connection silent for PingAfter is pinged and
			// closed when no answer comes, so the next request dials
			// afresh and fails over.
			after, timeout := cfg.PingAfter, cfg.PingTimeout
			if after <= 0 {
				after = DefaultPingAfter
			}
			if timeout <= 0 {
				timeout = DefaultPingTimeout
			}
			tr.HTTP2 = &http.HTTP2Config{SendPingTimeout: after, PingTimeout: timeout}
		}
		fo, err := NewFailover(h.hc.Transport, cfg.Server, cfg.Servers, cfg.Down)
		if err != nil {
			return nil, err
		}
		h.hc = &http.Client{Transport: fo}
	}
	if h.timeout <= 0 {
		h.timeout = DefaultTimeout
	}
	if h.ua == "" {
		h.ua = "everynode"
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h, nil
}

// Current is the base URL of the server requests go to now: Config.Server,
// or the server a failover moved to.
func (h *HTTP) Current() string {
	if fo, ok := h.hc.Transport.(*Failover); ok {
		return fo.Current()
	}
	return h.base.Scheme + "://" + h.base.Host
}

// Close releases idle connections.
func (h *HTTP) Close() { h.hc.CloseIdleConnections() }

// Server returns the base URL the client talks to.
func (h *HTTP) Server() string { return h.base.String() }

// CAPEM returns the PEM certificates the client trusts for the server
// (empty: the system's).
func (h *HTTP) CAPEM() []byte { return append([]byte(nil), h.caPEM...) }

// Path returns the URL path of a resource collection or object:
// /api/v1[/namespaces/NS]/RESOURCE[/NAME[/SUBRESOURCE]] for the core group,
// /apis/GROUP/VERSION/... otherwise. An empty namespace on a namespaced
// resource addresses all namespaces.
func Path(r *resources.Resource, namespace, name, subresource string) string {
	var b strings.Builder
	if r.Group == "" {
		b.WriteString("/api/" + r.Version)
	} else {
		b.WriteString("/apis/" + r.Group + "/" + r.Version)
	}
	if r.Namespaced && namespace != "" {
		b.WriteString("/namespaces/" + url.PathEscape(namespace))
	}
	b.WriteString("/" + r.Name)
	if name != "" {
		b.WriteString("/" + url.PathEscape(name))
		if subresource != "" {
			b.WriteString("/" + subresource)
		}
	}
	return b.String()
}

// Get implements Interface.
func (h *HTTP) Get(ctx context.Context, r *resources.Resource, namespace, name string) (Object, error) {
	body, ct, err := h.doObject(ctx, r, http.MethodGet, Path(r, namespace, name, ""), nil, "", nil)
	if err != nil {
		return nil, err
	}
	return decodeObject(r, body, ct)
}

// List implements Interface.
func (h *HTTP) List(ctx context.Context, r *resources.Resource, namespace string, opts ListOptions) ([]Object, string, error) {
	q := url.Values{}
	if opts.LabelSelector != "" {
		q.Set("labelSelector", opts.LabelSelector)
	}
	if opts.FieldSelector != "" {
		q.Set("fieldSelector", opts.FieldSelector)
	}
	body, ct, err := h.doObject(ctx, r, http.MethodGet, Path(r, namespace, "", ""), q, "", nil)
	if err != nil {
		return nil, "", err
	}
	var list runtime.Object
	if isProtobuf(ct) {
		list, err = r.DecodeProtoList(body)
	} else {
		list = r.NewList()
		err = json.Unmarshal(body, list)
	}
	if err != nil {
		return nil, "", fmt.Errorf("client: decode %s list: %w", r.Name, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, "", fmt.Errorf("client: %s list: %w", r.Name, err)
	}
	out := make([]Object, 0, len(items))
	for _, it := range items {
		obj, ok := it.(Object)
		if !ok {
			return nil, "", fmt.Errorf("client: %s list item is %T", r.Name, it)
		}
		r.SetTypeMeta(obj)
		out = append(out, obj)
	}
	la, err := meta.ListAccessor(list)
	if err != nil {
		return nil, "", fmt.Errorf("client: %s list: %w", r.Name, err)
	}
	return out, la.GetResourceVersion(), nil
}

// Create implements Interface. A namespaced object without a namespace goes
// to "default", as with kubectl.
func (h *HTTP) Create(ctx context.Context, obj Object, opts WriteOptions) (Object, error) {
	r, data, ct, err := h.encodeObject(obj)
	if err != nil {
		return nil, err
	}
	body, ct, err := h.doObject(ctx, r, http.MethodPost, Path(r, namespaceOf(r, obj), "", ""), opts.query(), ct, data)
	if err != nil {
		return nil, err
	}
	return decodeObject(r, body, ct)
}

// Update implements Interface.
func (h *HTTP) Update(ctx context.Context, obj Object, opts WriteOptions) (Object, error) {
	return h.put(ctx, obj, opts, "")
}

// UpdateStatus implements Interface.
func (h *HTTP) UpdateStatus(ctx context.Context, obj Object, opts WriteOptions) (Object, error) {
	return h.put(ctx, obj, opts, "status")
}

func (h *HTTP) put(ctx context.Context, obj Object, opts WriteOptions, sub string) (Object, error) {
	r, data, ct, err := h.encodeObject(obj)
	if err != nil {
		return nil, err
	}
	if obj.GetName() == "" {
		return nil, apierrors.NewBadRequest("client: update needs a name")
	}
	body, ct, err := h.doObject(ctx, r, http.MethodPut, Path(r, namespaceOf(r, obj), obj.GetName(), sub), opts.query(), ct, data)
	if err != nil {
		return nil, err
	}
	return decodeObject(r, body, ct)
}

// Patch implements Interface.
func (h *HTTP) Patch(ctx context.Context, r *resources.Resource, namespace, name string, pt types.PatchType, data []byte, opts WriteOptions, subresource string) (Object, error) {
	body, ct, err := h.doObject(ctx, r, http.MethodPatch, Path(r, namespace, name, subresource), opts.query(), string(pt), data)
	if err != nil {
		return nil, err
	}
	return decodeObject(r, body, ct)
}

// Delete implements Interface. When the server answers with a success Status
// instead of the object, Delete returns (nil, nil).
func (h *HTTP) Delete(ctx context.Context, r *resources.Resource, namespace, name string, opts metav1.DeleteOptions) (Object, error) {
	opts.TypeMeta = metav1.TypeMeta{Kind: "DeleteOptions", APIVersion: "v1"}
	data, err := json.Marshal(&opts)
	if err != nil {
		return nil, fmt.Errorf("client: encode delete options: %w", err)
	}
	q := url.Values{}
	if len(opts.DryRun) > 0 {
		q.Set("dryRun", "All")
	}
	body, ct, err := h.doObject(ctx, r, http.MethodDelete, Path(r, namespace, name, ""), q, "application/json", data)
	if err != nil {
		return nil, err
	}
	if _, ok := bodyStatus(body, ct); ok {
		return nil, nil
	}
	return decodeObject(r, body, ct)
}

// ServerVersion reads /version.
func (h *HTTP) ServerVersion(ctx context.Context) (*version.Info, error) {
	body, err := h.do(ctx, http.MethodGet, "/version", nil, "", nil)
	if err != nil {
		return nil, err
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("client: decode /version: %w", err)
	}
	return &info, nil
}

// RawPost POSTs a JSON body to a path and returns the body of a 2xx answer.
func (h *HTTP) RawPost(ctx context.Context, path string, body []byte) ([]byte, error) {
	return h.do(ctx, http.MethodPost, path, nil, "application/json", body)
}

// RawGet GETs a path (such as "/readyz") and returns the body of a 2xx answer.
func (h *HTTP) RawGet(ctx context.Context, path string) ([]byte, error) {
	return h.do(ctx, http.MethodGet, path, nil, "", nil)
}

func (o WriteOptions) query() url.Values {
	q := url.Values{}
	if o.DryRun {
		q.Set("dryRun", "All")
	}
	if o.FieldManager != "" {
		q.Set("fieldManager", o.FieldManager)
	}
	return q
}

func namespaceOf(r *resources.Resource, obj Object) string {
	if !r.Namespaced {
		return ""
	}
	if ns := obj.GetNamespace(); ns != "" {
		return ns
	}
	return metav1.NamespaceDefault
}

// encodeObject encodes obj for a request body, with apiVersion and kind
// set: in protobuf for a Protobuf client, else as JSON (a copy of obj is
// stamped). It returns the body's Content-Type.
func (h *HTTP) encodeObject(obj Object) (*resources.Resource, []byte, string, error) {
	r := h.kindOf(obj)
	if r == nil && h.coreOnly {
		return nil, nil, "", fmt.Errorf("client: %T is not a core/v1 kind, the only ones this client knows: set Config.ResourceFor to resources.ForObject to write every served kind", obj)
	}
	if r == nil {
		return nil, nil, "", fmt.Errorf("client: %T is not a served resource (or not one Config.ResourceFor knows)", obj)
	}
	if h.proto && r.HasProto() {
		data, err := r.EncodeProto(obj)
		if err != nil {
			return nil, nil, "", fmt.Errorf("client: encode %s: %w", r.Kind, err)
		}
		return r, data, runtime.ContentTypeProtobuf, nil
	}
	cp := obj.DeepCopyObject()
	r.SetTypeMeta(cp)
	data, err := json.Marshal(cp)
	if err != nil {
		return nil, nil, "", fmt.Errorf("client: encode %s: %w", r.Kind, err)
	}
	return r, data, runtime.ContentTypeJSON, nil
}

// isProtobuf says whether a response's Content-Type is Kubernetes' protobuf.
func isProtobuf(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.TrimSpace(mt) == runtime.ContentTypeProtobuf
}

// protoStatus decodes data, Kubernetes' protobuf encoding of an object, as
// a v1 Status with its kind set; ok is false when data holds anything else
// or does not decode.
func protoStatus(data []byte) (*metav1.Status, bool) {
	env, err := resources.UnwrapProto(data)
	if err != nil || env.Kind != "Status" || env.APIVersion != "v1" {
		return nil, false
	}
	st := &metav1.Status{}
	if st.Unmarshal(env.Raw) != nil {
		return nil, false
	}
	st.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
	return st, true
}

// bodyStatus decodes an answer's body of Content-Type ct, in protobuf or
// JSON, as a v1 Status; ok is false when it holds anything else.
func bodyStatus(body []byte, ct string) (*metav1.Status, bool) {
	if isProtobuf(ct) {
		return protoStatus(body)
	}
	var st metav1.Status
	if json.Unmarshal(body, &st) != nil || st.Kind != "Status" {
		return nil, false
	}
	return &st, true
}

// decodeObject decodes a response body of Content-Type ct holding one of
// r's objects.
func decodeObject(r *resources.Resource, body []byte, ct string) (Object, error) {
	var obj Object
	var err error
	if isProtobuf(ct) {
		obj, err = r.DecodeProto(body)
	} else {
		obj = r.New()
		err = json.Unmarshal(body, obj)
	}
	if err != nil {
		return nil, fmt.Errorf("client: decode %s: %w", r.Kind, err)
	}
	r.SetTypeMeta(obj)
	return obj, nil
}

// accept is the Accept of a request for r's objects.
func (h *HTTP) accept(r *resources.Resource) string {
	if h.proto && r.HasProto() {
		return acceptProtobuf
	}
	return runtime.ContentTypeJSON
}

func (h *HTTP) newRequest(ctx context.Context, method, path string, q url.Values, contentType string, body []byte) (*http.Request, string, error) {
	u := *h.base
	u.Path = strings.TrimRight(h.base.Path, "/") + path
	u.RawQuery = q.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, "", fmt.Errorf("client: %s %s: %w", method, u.String(), err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", h.ua)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	return req, u.String(), nil
}

// do sends one bounded request for JSON and returns the body of a 2xx
// answer; any other answer becomes a *apierrors.StatusError.
func (h *HTTP) do(ctx context.Context, method, path string, q url.Values, contentType string, body []byte) ([]byte, error) {
	data, _, err := h.send(ctx, method, path, q, runtime.ContentTypeJSON, contentType, body)
	return data, err
}

// doObject is do for a request whose answer is one of r's objects: in
// protobuf when the client is a Protobuf one and r has it. It also returns
// the answer's Content-Type.
func (h *HTTP) doObject(ctx context.Context, r *resources.Resource, method, path string, q url.Values, contentType string, body []byte) ([]byte, string, error) {
	return h.send(ctx, method, path, q, h.accept(r), contentType, body)
}

func (h *HTTP) send(ctx context.Context, method, path string, q url.Values, accept, contentType string, body []byte) ([]byte, string, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, u, err := h.newRequest(ctx, method, path, q, contentType, body)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Accept", accept)
	start := time.Now()
	resp, err := h.hc.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("client: %s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	h.log.Debug("request", "method", method, "url", u, "code", resp.StatusCode, "took", time.Since(start))
	if err != nil {
		return nil, "", fmt.Errorf("client: %s %s: read body: %w", method, u, err)
	}
	ct := resp.Header.Get("Content-Type")
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, "", statusError(method, u, resp.StatusCode, data, ct)
	}
	return data, ct, nil
}

// statusError turns a failed answer into a *apierrors.StatusError: the
// server's own Status when the body is one, else one built from the HTTP code
// with a message naming the request.
func statusError(method, u string, code int, body []byte, contentType string) error {
	if st, ok := bodyStatus(body, contentType); ok && (st.Status != "" || st.Code != 0 || st.Reason != "") {
		if st.Code == 0 {
			st.Code = int32(code)
		}
		if st.Status == "" {
			st.Status = metav1.StatusFailure
		}
		return &apierrors.StatusError{ErrStatus: *st}
	}
	// NewGenericServerResponse picks the Reason matching the code.
	reason := apierrors.NewGenericServerResponse(code, method, schema.GroupResource{}, "", "", 0, false).ErrStatus.Reason
	msg := strings.TrimSpace(string(body))
	if len(msg) > maxErrorBody {
		msg = msg[:maxErrorBody] + "…"
	}
	text := fmt.Sprintf("%s %s: %d %s", method, u, code, http.StatusText(code))
	if msg != "" {
		text += ": " + msg
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Code:     int32(code),
		Reason:   reason,
		Message:  text,
	}}
}

// watchQuery builds the query of a watch request.
func watchQuery(opts ListOptions) url.Values {
	q := url.Values{"watch": {"true"}}
	if opts.LabelSelector != "" {
		q.Set("labelSelector", opts.LabelSelector)
	}
	if opts.FieldSelector != "" {
		q.Set("fieldSelector", opts.FieldSelector)
	}
	if opts.ResourceVersion != "" {
		q.Set("resourceVersion", opts.ResourceVersion)
	}
	if opts.TimeoutSeconds > 0 {
		q.Set("timeoutSeconds", strconv.FormatInt(opts.TimeoutSeconds, 10))
	}
	return q
}

// Watch implements Interface.
func (h *HTTP) Watch(ctx context.Context, r *resources.Resource, namespace string, opts ListOptions) (watch.Interface, error) {
	wctx, cancel := context.WithCancel(ctx)
	req, u, err := h.newRequest(wctx, http.MethodGet, Path(r, namespace, "", ""), watchQuery(opts), "", nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", h.accept(r))
	resp, err := h.hc.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("client: watch %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		cancel()
		return nil, statusError(http.MethodGet, u, resp.StatusCode, data, resp.Header.Get("Content-Type"))
	}
	return h.watch.newWatcher(wctx, r, resp.Body, resp.Header.Get("Content-Type"), cancel, h.log.With("watch", u)), nil
}

// Stream sends one request with a streamed body (nil for none) and header,
// bounded only by ctx, and returns the response of a 2xx answer for the
// caller to read and close; any other answer becomes a
// *apierrors.StatusError. The image store uses it (package images).
func (h *HTTP) Stream(ctx context.Context, method, path string, q url.Values, header http.Header, body io.Reader) (*http.Response, error) {
	req, u, err := h.newRequest(ctx, method, path, q, "", nil)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Body = io.NopCloser(body)
		req.ContentLength = -1
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, u, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, statusError(method, u, resp.StatusCode, data, resp.Header.Get("Content-Type"))
	}
	return resp, nil
}
