package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Connection hardening (docs/security.md §1). The http.Server
// bounds a request's headers (internal/httpserve); the rest is here:
//   - a request is authenticated before anything reads its body, and a 401
//     closes the connection after at most unauthenticatedDrain of reading;
//   - failed authentications are slowed per source (failureThrottle);
//   - requests that are not long-running get a deadline: their context, the
//     reading of their body and the writing of their answer.

// DefaultRequestTimeout bounds a request that is not long-running, as
// kube-apiserver's --request-timeout (60 s) does; a `timeout` query parameter
// may shorten it.
const DefaultRequestTimeout = 60 * time.Second

// requestWriteGrace is how long after its deadline a request may still write
// its answer (the 504 of a handler that saw its context end).
const requestWriteGrace = 5 * time.Second

// unauthenticatedDrain is how long the server reads what remains of an
// unauthenticated request's body after its 401 was sent, before closing
// the connection. The answer is flushed before; Go's server reads no more
// than 256 KiB of it and none at all when Content-Length says more.
const unauthenticatedDrain = time.Second

// joinBodyTimeout bounds reading the body of a join request, the one body
// the server reads from a caller it does not know yet.
const joinBodyTimeout = 10 * time.Second

// withRequestDeadline gives every request that is not long-running a
// deadline: its context ends (the handler answers 504), its body must arrive
// before it and its answer be written shortly after it. kube-apiserver does
// the same in WithRequestDeadline (k8s.io/apiserver
// pkg/endpoints/filters/request_deadline.go) and with per-request read and
// write deadlines (KEP 4460, pkg/endpoints/filters/read_write_deadline_test.go);
// watches and logs are exempt, as its long-running check exempts the watch
// verb and the log subresource.
func (s *Server) withRequestDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if longRunning(req) {
			next.ServeHTTP(w, req)
			return
		}
		timeout := s.requestTimeout
		if v := req.URL.Query().Get("timeout"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				s.writeError(w, req, apierrors.NewBadRequest(fmt.Sprintf("invalid timeout specified in the request URL - %v", err)))
				return
			}
			// 0 or more than the maximum means the maximum, as upstream.
			if d > 0 && d < timeout {
				timeout = d
			}
		}
		deadline := time.Now().Add(timeout)
		ctx, cancel := context.WithDeadline(req.Context(), deadline)
		defer cancel()
		rc := http.NewResponseController(w)
		// Errors mean the writer cannot (a test's recorder): the context
		// still bounds the handler.
		_ = rc.SetReadDeadline(deadline)
		_ = rc.SetWriteDeadline(deadline.Add(requestWriteGrace))
		next.ServeHTTP(w, req.WithContext(ctx))
	})
}

// longRunning reports whether req streams for as long as its client wants:
// a watch (?watch=true) or a pod's log, which kube-apiserver's long-running
// check (BasicLongRunningRequestCheck in k8s.io/apiserver
// pkg/server/filters/longrunning.go, with the verbs and subresources
// cmd/kube-apiserver gives it) exempts from the request timeout.
func longRunning(req *http.Request) bool {
	// Image loads and blob downloads last as long as the bytes take.
	if strings.HasPrefix(req.URL.Path, imagesPath) || strings.HasPrefix(req.URL.Path, blobsPath) {
		return true
	}
	if req.Method != http.MethodGet {
		return false
	}
	if v := req.URL.Query().Get("watch"); v != "" {
		if w, err := strconv.ParseBool(v); err == nil && w {
			return true
		}
	}
	// /api/v1/namespaces/{namespace}/pods/{name}/log (podLogPath)
	p := strings.Split(req.URL.Path, "/")
	return len(p) == 8 && p[1] == "api" && p[2] == "v1" && p[3] == "namespaces" && p[5] == "pods" && p[7] == "log"
}

// refuse answers an unauthenticated request with err (a 401) and closes its
// connection without reading its body: "Connection: close", and a read
// deadline so that Go's server, which drains a little of an unread body
// before closing, gives up after unauthenticatedDrain. When failed is set the
// caller presented credentials that were wrong, and the answer waits for the
// source's failure throttle.
func (s *Server) refuse(w http.ResponseWriter, req *http.Request, err error, failed bool) {
	if failed {
		s.throttle.wait(req.Context(), req.RemoteAddr)
	}
	closeConnection(w)
	s.writeError(w, req, err)
}

// closeConnection makes the answer being written the connection's last: the
// server reads at most unauthenticatedDrain more of the request's body and
// closes the connection after the answer (in HTTP/2 it sends GOAWAY).
func closeConnection(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(unauthenticatedDrain))
}
