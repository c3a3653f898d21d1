// Package ui serves the fleet dashboard at /ui/ (docs/dashboard.md): the
// application shell and its assets, embedded in the binary, to anyone; a
// login that keeps the caller's token in a sealed, HttpOnly, Secure,
// SameSite=Strict cookie; and /ui/api/..., where the cookie becomes the
// bearer token of an ordinary API request — same authentication, same RBAC —
// and every state-changing request must also carry the session's CSRF token
// and come from the server's own origin.
package ui

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

// apiPrefix is where the page's API calls go: /ui/api/api/v1/nodes is the
// API's /api/v1/nodes.
const apiPrefix = Prefix + "api/"

// CookieName is the session cookie; CSRFHeader carries the session's CSRF
// token on every state-changing request.
const (
	CookieName = "everynode_session"
	CSRFHeader = "X-Everynode-CSRF"
)

// DefaultSessionTTL is how long a login lasts unless Config says otherwise.
const DefaultSessionTTL = 12 * time.Hour

// maxLoginBody bounds the login request (a token is a few KiB at most).
const maxLoginBody = 64 << 10

//go:embed assets
var embedded embed.FS

// Config configures the dashboard handler.
type Config struct {
	// API serves the API with its authentication and authorization: the
	// dashboard hands it requests with an Authorization header.
	API http.Handler
	// Authenticate checks a token at login, returning the user's name.
	Authenticate func(req *http.Request, token string) (user string, ok bool)
	// SessionTTL is how long a login lasts; 0 means DefaultSessionTTL.
	// The token's own expiry still applies: the API checks it on every call.
	SessionTTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Handler serves Prefix. Create it with New.
type Handler struct {
	api    http.Handler
	authn  func(*http.Request, string) (string, bool)
	ttl    time.Duration
	now    func() time.Time
	aead   cipher.AEAD
	macKey []byte
	static http.Handler
}

// New builds the handler with fresh session keys: sessions end when the
// server restarts.
func New(cfg Config) (*Handler, error) {
	if cfg.API == nil || cfg.Authenticate == nil {
		return nil, errors.New("ui: Config.API and Config.Authenticate are required")
	}
	key := make([]byte, 32)
	macKey := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("ui: session key: %w", err)
	}
	if _, err := rand.Read(macKey); err != nil {
		return nil, fmt.Errorf("ui: session key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("ui: session cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("ui: session cipher: %w", err)
	}
	sub, err := fs.Sub(embedded, "assets")
	if err != nil {
		return nil, fmt.Errorf("ui: assets: %w", err)
	}
	h := &Handler{api: cfg.API, authn: cfg.Authenticate, ttl: cfg.SessionTTL, now: cfg.Now, aead: aead, macKey: macKey,
		static: http.StripPrefix(Prefix, http.FileServerFS(sub))}
	if h.ttl <= 0 {
		h.ttl = DefaultSessionTTL
	}
	if h.now == nil {
		h.now = time.Now
	}
	return h, nil
}

// Owns reports whether path is the dashboard's.
func Owns(path string) bool { return path == "/ui" || strings.HasPrefix(path, Prefix) }

func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	p := req.URL.Path
	switch {
	case p == "/ui":
		http.Redirect(w, req, Prefix, http.StatusMovedPermanently)
	case strings.HasPrefix(p, apiPrefix):
		h.serveAPI(w, req)
	case p == Prefix+"login":
		h.login(w, req)
	case p == Prefix+"logout":
		h.logout(w, req)
	case p == Prefix+"session":
		h.session(w, req)
	case req.Method == http.MethodGet || req.Method == http.MethodHead:
		securityHeaders(w.Header())
		w.Header().Set("Cache-Control", "no-cache")
		h.static.ServeHTTP(w, req)
	default:
		fail(w, http.StatusMethodNotAllowed, "the dashboard's pages are read with GET")
	}
}

// securityHeaders keep the page to its own origin: no script, style,
// frame or request elsewhere (it works on an air-gapped network).
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// status is the Kubernetes-shaped error body the page shows.
type status struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Status     string `json:"status"`
	Message    string `json:"message"`
	Reason     string `json:"reason,omitempty"`
	Code       int    `json:"code"`
}

func fail(w http.ResponseWriter, code int, msg string) {
	reason := map[int]string{401: "Unauthorized", 403: "Forbidden", 405: "MethodNotAllowed", 400: "BadRequest"}[code]
	writeJSON(w, code, status{Kind: "Status", APIVersion: "v1", Status: "Failure", Message: msg, Reason: reason, Code: code})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// sameOrigin reports whether a state-changing request comes from the
// dashboard's own origin: its Origin header (browsers send it on every
// POST, PATCH and DELETE) names this server, and Sec-Fetch-Site, when
// sent, says same-origin.
func sameOrigin(req *http.Request) error {
	if s := req.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return fmt.Errorf("cross-site request refused (Sec-Fetch-Site: %s)", s)
	}
	origin := req.Header.Get("Origin")
	if origin == "" {
		return errors.New("request without an Origin header refused: state-changing requests come from the dashboard page")
	}
	scheme := "http"
	if req.TLS != nil {
		scheme = "https"
	}
	if !strings.EqualFold(origin, scheme+"://"+req.Host) {
		return fmt.Errorf("cross-origin request from %s refused", origin)
	}
	return nil
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// sealed cookie: base64url(nonce | AES-GCM(expiry unix seconds (8 bytes) | token)).

func (h *Handler) seal(token string, exp time.Time) string {
	plain := binary.BigEndian.AppendUint64(nil, uint64(exp.Unix()))
	plain = append(plain, token...)
	nonce := make([]byte, h.aead.NonceSize())
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(h.aead.Seal(nonce, nonce, plain, []byte(CookieName)))
}

var (
	errNoSession = errors.New("not logged in: paste a token on the dashboard's login screen")
	errForged    = errors.New("the session cookie is not valid (forged, damaged or from before a server restart): log in again")
	errExpired   = errors.New("the session has expired: log in again")
)

// open returns the token of a session cookie value.
func (h *Handler) open(v string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(v)
	n := h.aead.NonceSize()
	if err != nil || len(raw) < n {
		return "", errForged
	}
	plain, err := h.aead.Open(nil, raw[:n], raw[n:], []byte(CookieName))
	if err != nil || len(plain) < 8 {
		return "", errForged
	}
	if !h.now().Before(time.Unix(int64(binary.BigEndian.Uint64(plain)), 0)) {
		return "", errExpired
	}
	return string(plain[8:]), nil
}

// csrfToken is bound to the session cookie: a page that cannot read the
// session (another origin) cannot compute it.
func (h *Handler) csrfToken(cookie string) string {
	m := hmac.New(sha256.New, h.macKey)
	io.WriteString(m, cookie)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sessionOf returns the request's token and cookie value.
func (h *Handler) sessionOf(req *http.Request) (token, cookie string, err error) {
	c, err := req.Cookie(CookieName)
	if err != nil || c.Value == "" {
		return "", "", errNoSession
	}
	token, err = h.open(c.Value)
	return token, c.Value, err
}

// checkCSRF requires, on a state-changing request, the server's own origin
// and the session's CSRF token: the cookie alone never authorizes a write.
func (h *Handler) checkCSRF(req *http.Request, cookie string) error {
	if err := sameOrigin(req); err != nil {
		return err
	}
	got := req.Header.Get(CSRFHeader)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(h.csrfToken(cookie))) != 1 {
		return fmt.Errorf("missing or wrong %s header: reload the dashboard", CSRFHeader)
	}
	return nil
}

type sessionInfo struct {
	User string `json:"user"`
	CSRF string `json:"csrf"`
}

// login: POST {"token": "..."} from the dashboard's origin. The token is
// checked as the API checks it; the answer sets the session cookie and
// gives the page its CSRF token.
func (h *Handler) login(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		fail(w, http.StatusMethodNotAllowed, "log in with POST")
		return
	}
	if err := sameOrigin(req); err != nil {
		fail(w, http.StatusForbidden, err.Error())
		return
	}
	if ct := req.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		fail(w, http.StatusBadRequest, "log in with a JSON body {\"token\": \"...\"}")
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxLoginBody)).Decode(&body); err != nil {
		fail(w, http.StatusBadRequest, "log in with a JSON body {\"token\": \"...\"}: "+err.Error())
		return
	}
	token := strings.TrimSpace(body.Token)
	user, ok := "", false
	if token != "" {
		user, ok = h.authn(req, token)
	}
	if !ok || user == "" {
		fail(w, http.StatusUnauthorized, "token not accepted: it is wrong, expired or revoked")
		return
	}
	exp := h.now().Add(h.ttl)
	v := h.seal(token, exp)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: v, Path: Prefix, Expires: exp, MaxAge: int(h.ttl / time.Second),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	writeJSON(w, http.StatusOK, sessionInfo{User: user, CSRF: h.csrfToken(v)})
}

// session answers the logged-in page its user and CSRF token (after a
// reload); the same-origin policy keeps other origins from reading it.
func (h *Handler) session(w http.ResponseWriter, req *http.Request) {
	if !safeMethod(req.Method) {
		fail(w, http.StatusMethodNotAllowed, "read the session with GET")
		return
	}
	token, cookie, err := h.sessionOf(req)
	if err != nil {
		fail(w, http.StatusUnauthorized, err.Error())
		return
	}
	user, ok := h.authn(req, token)
	if !ok {
		fail(w, http.StatusUnauthorized, "the session's token is no longer accepted (expired or revoked): log in again")
		return
	}
	writeJSON(w, http.StatusOK, sessionInfo{User: user, CSRF: h.csrfToken(cookie)})
}

// logout clears the cookie (CSRF-checked: a logout is a state change).
func (h *Handler) logout(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		fail(w, http.StatusMethodNotAllowed, "log out with POST")
		return
	}
	_, cookie, err := h.sessionOf(req)
	if err == nil {
		err = h.checkCSRF(req, cookie)
	}
	if err != nil && !errors.Is(err, errExpired) && !errors.Is(err, errForged) {
		fail(w, http.StatusForbidden, err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

// serveAPI turns the session into the API request's bearer token.
func (h *Handler) serveAPI(w http.ResponseWriter, req *http.Request) {
	token, cookie, err := h.sessionOf(req)
	if err != nil {
		fail(w, http.StatusUnauthorized, err.Error())
		return
	}
	if !safeMethod(req.Method) {
		if err := h.checkCSRF(req, cookie); err != nil {
			fail(w, http.StatusForbidden, err.Error())
			return
		}
	}
	r2 := req.Clone(req.Context())
	r2.URL.Path = "/" + strings.TrimPrefix(req.URL.Path, apiPrefix)
	r2.URL.RawPath = ""
	r2.RequestURI = r2.URL.RequestURI()
	r2.Header.Del("Cookie")
	r2.Header.Del(CSRFHeader)
	for k := range r2.Header {
		if strings.HasPrefix(k, "Impersonate-") {
			r2.Header.Del(k) // the dashboard acts as its user only
		}
	}
	r2.Header.Set("Authorization", "Bearer "+token)
	h.api.ServeHTTP(w, r2)
}
