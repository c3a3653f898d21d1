package apiserver

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/uuid"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// auditRecord is what the audit filter learns from the handlers inside it:
// the authenticated user, the impersonated one, and the name of a created
// object (not in its URL).
type auditRecord struct {
	user, impersonated *UserInfo
	createdName        string
}

type auditKey struct{}

// noteUser records the request's user for the audit log: the first call
// the authenticated user, a later one the impersonated user.
func noteUser(ctx context.Context, u UserInfo) {
	rec, ok := ctx.Value(auditKey{}).(*auditRecord)
	if !ok {
		return
	}
	if rec.user == nil {
		rec.user = &u
	} else if u.Name != rec.user.Name {
		rec.impersonated = &u
	}
}

// noteCreated records the name of the object a create stored.
func noteCreated(ctx context.Context, name string) {
	if rec, ok := ctx.Value(auditKey{}).(*auditRecord); ok {
		rec.createdName = name
	}
}

// requestInfos parses paths as kube-apiserver does.
var requestInfos = &genericapirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// withAudit writes one audit.k8s.io/v1 Event (level Metadata, stage
// ResponseComplete) per write (any method but GET, HEAD and OPTIONS) and per
// request answered 401 or 403, as one JSON line to s.audit. It records who,
// from where, what verb on which object and the response code; never a
// request or response body, a header or a token.
func (s *Server) withAudit(next http.Handler) http.Handler {
	if s.audit == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		received := time.Now()
		rec := &auditRecord{}
		sw := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(sw, req.WithContext(context.WithValue(req.Context(), auditKey{}, rec)))
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		switch {
		case code == http.StatusUnauthorized || code == http.StatusForbidden:
		case req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == http.MethodOptions:
			return
		}
		s.writeAudit(req, rec, code, received)
	})
}

func (s *Server) writeAudit(req *http.Request, rec *auditRecord, code int, received time.Time) {
	ev := auditv1.Event{
		TypeMeta:                 metav1.TypeMeta{APIVersion: auditv1.SchemeGroupVersion.String(), Kind: "Event"},
		Level:                    auditv1.LevelMetadata,
		AuditID:                  uuid.NewUUID(),
		Stage:                    auditv1.StageResponseComplete,
		RequestURI:               req.URL.Path,
		UserAgent:                req.UserAgent(),
		SourceIPs:                []string{remoteIP(req.RemoteAddr)},
		ResponseStatus:           &metav1.Status{Code: int32(code)},
		RequestReceivedTimestamp: metav1.NewMicroTime(received),
		StageTimestamp:           metav1.NewMicroTime(time.Now()),
	}
	if req.URL.RawQuery != "" {
		ev.RequestURI += "?" + req.URL.RawQuery
	}
	ev.User = authnv1.UserInfo{Username: "system:anonymous", Groups: []string{"system:unauthenticated"}}
	if rec.user != nil {
		ev.User = authnv1.UserInfo{Username: rec.user.Name, Groups: rec.user.Groups}
	}
	if rec.impersonated != nil {
		ev.ImpersonatedUser = &authnv1.UserInfo{Username: rec.impersonated.Name, Groups: rec.impersonated.Groups}
	}
	info, err := requestInfos.NewRequestInfo(req)
	if err == nil {
		ev.Verb = info.Verb
		if info.IsResourceRequest {
			ev.ObjectRef = &auditv1.ObjectReference{Resource: info.Resource, Namespace: info.Namespace, Name: info.Name,
				APIGroup: info.APIGroup, APIVersion: info.APIVersion, Subresource: info.Subresource}
			if ev.ObjectRef.Name == "" {
				ev.ObjectRef.Name = rec.createdName
			}
		}
	}
	line, err := json.Marshal(&ev)
	if err != nil {
		s.log.Error("audit event not encoded", "err", err)
		return
	}
	if _, err := s.audit.Write(append(line, '\n')); err != nil {
		s.log.Error("audit log write failed", "err", err)
	}
}

// remoteIP is the address of the connection's peer, without its port.
func remoteIP(remoteAddr string) string {
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return host
	}
	return remoteAddr
}
