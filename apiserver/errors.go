package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/everynode/everynode/store"
)

// conflictMessage is Kubernetes' text for a stale resourceVersion.
const conflictMessage = "the object has been modified; please apply your changes to the latest version and try again"

// statusClientClosed is the code of a request whose client went away (nginx's 499).
const statusClientClosed = 499

// statusError maps any error to the Kubernetes Status the API returns for it.
// It is the one place where errors become HTTP codes; nil maps to nil.
func (s *Server) statusError(err error) *apierrors.StatusError {
	if err == nil {
		return nil
	}
	var st metav1.Status
	var apiStatus apierrors.APIStatus
	var storeErr *store.Error
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &apiStatus):
		st = apiStatus.Status()
	case errors.As(err, &storeErr) && storeErr.Kind != store.Internal:
		st = s.storeStatus(storeErr)
	case errors.As(err, &tooLarge):
		// kube-apiserver's words (limitedReadBody in k8s.io/apiserver
		// pkg/endpoints/handlers/rest.go).
		st = apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", tooLarge.Limit)).ErrStatus
	case store.IsUnavailable(err):
		// A cluster of servers without quorum, or electing its etcd leader
		// (docs/ha.md): a clear, retryable answer instead of a 500.
		s.log.Warn("etcd unavailable", "err", err)
		st = apierrors.NewServiceUnavailable("etcd cannot commit now: a majority of the servers is unreachable or a leader election is under way; " +
			"retry (a write that timed out may or may not have been applied)").ErrStatus
	case errors.Is(err, context.DeadlineExceeded):
		st = apierrors.NewTimeoutError("the request did not complete in the allowed time", 0).ErrStatus
	case errors.Is(err, context.Canceled):
		st = metav1.Status{Status: metav1.StatusFailure, Code: statusClientClosed,
			Reason: metav1.StatusReasonUnknown, Message: "the request was canceled"}
	default:
		s.log.Error("internal error", "err", err)
		st = apierrors.NewInternalError(err).ErrStatus
	}
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	if st.Status == "" {
		st.Status = metav1.StatusFailure
	}
	if st.Code == 0 {
		st.Code = http.StatusInternalServerError
	}
	return &apierrors.StatusError{ErrStatus: st}
}

// storeStatus maps a typed store error.
func (s *Server) storeStatus(e *store.Error) metav1.Status {
	var gr schema.GroupResource
	if e.Resource != nil {
		gr = e.Resource.GroupResource()
	}
	switch {
	case store.IsNotFound(e):
		return apierrors.NewNotFound(gr, e.Name).ErrStatus
	case store.IsAlreadyExists(e):
		return apierrors.NewAlreadyExists(gr, e.Name).ErrStatus
	case store.IsConflict(e):
		return apierrors.NewConflict(gr, e.Name, errors.New(conflictMessage)).ErrStatus
	case store.IsGone(e):
		msg := "too old resource version"
		if e.Err != nil {
			msg = e.Err.Error() // "too old resource version: 5 (10)", as Kubernetes says
		}
		return apierrors.NewResourceExpired(msg).ErrStatus
	case e.Kind == store.Invalid:
		return apierrors.NewBadRequest(e.Error()).ErrStatus
	}
	s.log.Error("store error", "err", e)
	return apierrors.NewInternalError(e).ErrStatus
}

// writeError writes err as a Status response, in protobuf or YAML when the
// Accept header prefers them, else in JSON (ErrorNegotiated upstream: a
// failed negotiation never hides the original error).
func (s *Server) writeError(w http.ResponseWriter, req *http.Request, err error) {
	se := s.statusError(err)
	if se.ErrStatus.Code >= 500 {
		s.log.Warn("request failed", "method", req.Method, "path", req.URL.Path,
			"code", se.ErrStatus.Code, "err", err)
	}
	code := int(se.ErrStatus.Code)
	if code == statusClientClosed {
		// Nobody is listening; record the code for metrics only.
		w.WriteHeader(code)
		return
	}
	out, ok := s.wire.negotiate(req.Header.Get("Accept"), plainRestrictions{})
	if !ok {
		writeJSON(w, code, &se.ErrStatus)
		return
	}
	s.wire.write(w, code, out, "", &se.ErrStatus)
}

// writeJSON writes v as a JSON response with the given code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(&metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Code: http.StatusInternalServerError,
			Reason: metav1.StatusReasonInternalError, Message: "encoding the response: " + err.Error(),
		})
		code = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
