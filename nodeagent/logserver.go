package nodeagent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/everynode/everynode/images"
	"github.com/everynode/everynode/internal/httpserve"
)

// The agent's log endpoint, as kubelet's:
//
//	GET /containerLogs/{namespace}/{pod}/{container}?follow=&tailLines=&timestamps=&sinceSeconds=&sinceTime=&previous=
//
// served over HTTPS by ServeLogs. The API server proxies
// /api/v1/namespaces/{ns}/pods/{name}/log here, to the address and port the
// Node publishes (InternalIP, status.daemonEndpoints.kubeletEndpoint.Port).
//
// Trust on this hop: the agent serves a self-signed certificate made at
// start (SelfSignedTLS), so the API server does not verify the agent's
// certificate; it authenticates to the agent with a bearer token, the log
// token, derived from the node's credential (LogToken). The log token opens
// this node's logs and nothing else: whoever impersonates a node's address
// learns no credential that writes to the API.

// logTokenPurpose separates the log token from the node credential it is
// derived from.
const logTokenPurpose = "everynode-container-logs"

// LogToken returns the bearer token the API server presents to a node's log
// endpoint: HMAC-SHA256 of a fixed purpose keyed by the node's credential
// (the node token the agent joined with). Both sides compute it: the agent
// from its own token, the server from its key material.
func LogToken(nodeToken string) string {
	m := hmac.New(sha256.New, []byte(nodeToken))
	m.Write([]byte(logTokenPurpose))
	return hex.EncodeToString(m.Sum(nil))
}

// LogAuthorizer returns the authorize function for ServeLogs of an agent
// holding nodeToken: it accepts exactly LogToken(nodeToken), compared in
// constant time.
func LogAuthorizer(nodeToken string) func(token string) bool {
	want := []byte(LogToken(nodeToken))
	return func(token string) bool {
		return subtle.ConstantTimeCompare([]byte(token), want) == 1
	}
}

// logServerShutdown bounds how long ServeLogs waits for open streams once
// its context ends (follows are cancelled with it, so this is short).
const logServerShutdown = 5 * time.Second

// ServeLogs serves LogHandler on ln until ctx ends, over TLS when tlsCfg is
// not nil; authorize checks the bearer token of every request. It returns
// nil after a clean shutdown. It may run before, during and after Run: logs
// of pods the agent does not know are 404.
func (a *Agent) ServeLogs(ctx context.Context, ln net.Listener, tlsCfg *tls.Config, authorize func(token string) bool) error {
	if authorize == nil {
		return errors.New("nodeagent: serve logs: an authorize function is required")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The connection deadlines of the API server (docs/security.md
	// §1); no write timeout, which would cut follows.
	srv := httpserve.NewServer(a.LogHandler(authorize), httpserve.DefaultLimits(),
		slog.NewLogLogger(a.log.Handler(), slog.LevelDebug))
	srv.BaseContext = func(net.Listener) context.Context { return ctx }
	a.log.Info("serving container logs", "addr", ln.Addr().String(), "tls", tlsCfg != nil)
	// cancel ends every follow (their contexts derive from BaseContext).
	if err := httpserve.Serve(ctx, srv, ln, tlsCfg, logServerShutdown, cancel); err != nil {
		return fmt.Errorf("nodeagent: log server: %w", err)
	}
	return nil
}

// LogHandler is the log endpoint's handler (see ServeLogs); mount it on a
// server of your own if needed.
func (a *Agent) LogHandler(authorize func(token string) bool) http.Handler {
	mux := http.NewServeMux()
	h := func(w http.ResponseWriter, req *http.Request) {
		a.serveContainerLogs(w, req)
	}
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", h)
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}", h)
	mux.HandleFunc("/", http.NotFound)
	// Every request is authenticated before anything else, its body unread.
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// Image blobs for peers, with their own credential (images.PeerHandler).
		if a.cfg.PeerBlobs != nil && strings.HasPrefix(req.URL.Path, images.BlobsPath) {
			a.cfg.PeerBlobs.ServeHTTP(w, req)
			return
		}
		token, ok := logBearer(req.Header.Get("Authorization"))
		if !ok || !authorize(token) {
			refuseLogRequest(w)
			return
		}
		mux.ServeHTTP(w, req)
	})
}

// refuseLogRequest answers 401 and closes the connection without reading
// the request's body (docs/security.md §1).
func refuseLogRequest(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	// The server drains at most this long of a body it was sent before
	// closing: the answer is flushed first.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(time.Second))
	http.Error(w, "Unauthorized", http.StatusUnauthorized)
}

func logBearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func (a *Agent) serveContainerLogs(w http.ResponseWriter, req *http.Request) {
	lreq, err := ParseLogQuery(req.URL.Query(), a.clock.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	lreq.Container = req.PathValue("container")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	fw := &flushWriter{w: w, rc: http.NewResponseController(w)}
	err = a.Logs(req.Context(), req.PathValue("namespace"), req.PathValue("pod"), lreq, fw)
	if err == nil || fw.wrote {
		if err != nil && req.Context().Err() == nil {
			a.log.Warn("container log stream failed", "path", req.URL.Path, "err", err)
		}
		return
	}
	code := http.StatusInternalServerError
	if errors.Is(err, ErrLogsNotFound) {
		code = http.StatusNotFound
	}
	http.Error(w, strings.TrimPrefix(err.Error(), ErrLogsNotFound.Error()+": "), code)
}

// ParseLogQuery reads the PodLogOptions query parameters the log endpoint
// takes (follow, previous, timestamps, tailLines, sinceSeconds, sinceTime);
// now anchors sinceSeconds. The container is not read from the query.
func ParseLogQuery(q map[string][]string, now time.Time) (LogRequest, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	var r LogRequest
	var err error
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"follow", &r.Follow}, {"previous", &r.Previous}, {"timestamps", &r.Timestamps}} {
		if v := get(b.name); v != "" {
			if *b.dst, err = strconv.ParseBool(v); err != nil {
				return r, fmt.Errorf("invalid %s %q: want true or false", b.name, v)
			}
		}
	}
	if v := get("tailLines"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return r, fmt.Errorf("invalid tailLines %q: must be a non-negative integer", v)
		}
		r.TailLines = &n
	}
	since, sinceTime := get("sinceSeconds"), get("sinceTime")
	if since != "" && sinceTime != "" {
		return r, errors.New("at most one of sinceTime or sinceSeconds may be specified")
	}
	if since != "" {
		n, err := strconv.ParseInt(since, 10, 64)
		if err != nil || n < 1 {
			return r, fmt.Errorf("invalid sinceSeconds %q: must be greater than 0", since)
		}
		r.Since = now.Add(-time.Duration(n) * time.Second)
	}
	if sinceTime != "" {
		t, err := time.Parse(time.RFC3339, sinceTime)
		if err != nil {
			return r, fmt.Errorf("invalid sinceTime %q: want RFC 3339", sinceTime)
		}
		r.Since = t
	}
	return r, nil
}

// flushWriter flushes after every write, so a follow reaches the reader as
// the container writes; the first write commits a 200 answer.
type flushWriter struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	wrote bool
}

func (f *flushWriter) Write(p []byte) (int, error) {
	if !f.wrote {
		f.w.WriteHeader(http.StatusOK)
		f.wrote = true
	}
	n, err := f.w.Write(p)
	if err != nil {
		return n, err
	}
	if err := f.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return n, err
	}
	return n, nil
}

// SelfSignedTLS returns a server TLS configuration with a fresh self-signed
// ECDSA certificate for hosts (IP addresses or DNS names), valid for ten
// years. The log endpoint uses it: the API server authenticates the agent by
// nothing but the reachability of its published address and authenticates
// itself with the log token.
func SelfSignedTLS(hosts ...string) (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("nodeagent: log server key: %w", err)
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, fmt.Errorf("nodeagent: log server certificate serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: "everynode-agent-logs"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("nodeagent: log server certificate: %w", err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		MinVersion:   tls.VersionTLS12,
	}, nil
}
