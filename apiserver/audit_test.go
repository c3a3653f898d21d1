package apiserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// lockedBuffer is a fake audit sink for unit tests: a buffer safe for the
// handlers' concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) take() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := bytes.Clone(b.buf.Bytes())
	b.buf.Reset()
	return out
}

// events parses the lines written since the last call, failing on any line
// that is not one audit.k8s.io/v1 Event with the fields every event has.
func (b *lockedBuffer) events(t *testing.T) []auditv1.Event {
	t.Helper()
	var out []auditv1.Event
	sc := bufio.NewScanner(bytes.NewReader(b.take()))
	for sc.Scan() {
		var ev auditv1.Event
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if ev.APIVersion != "audit.k8s.io/v1" || ev.Kind != "Event" || ev.Stage != auditv1.StageResponseComplete ||
			ev.Level != auditv1.LevelMetadata || ev.AuditID == "" || ev.RequestReceivedTimestamp.IsZero() ||
			ev.StageTimestamp.Before(&ev.RequestReceivedTimestamp) || len(ev.SourceIPs) != 1 || ev.SourceIPs[0] != "127.0.0.1" ||
			ev.ResponseStatus == nil || ev.RequestObject != nil || ev.ResponseObject != nil {
			t.Fatalf("audit line lacks a field: %s", sc.Text())
		}
		out = append(out, ev)
	}
	return out
}

// TestAuditLog: every write and every 401 and 403 is one audit line with
// who, what, where and the code; reads are not logged; no line holds a
// token, a Secret's data or a request body.
func TestAuditLog(t *testing.T) {
	sink := &lockedBuffer{}
	const wrongToken = "wrong-token-must-not-be-logged"
	e := newEnv(t, func(c *Config) {
		c.AuditLog = sink
		c.Authorizer = NewNodeRestriction(StoreGraph(c.Store))
		c.Authenticator = tokens{adminToken: {Name: "admin", Groups: []string{mastersGroup}},
			n1Token: {Name: "system:node:n1", Groups: []string{nodesGroup}}}
	})
	sink.take() // the namespaces made at start are not requests
	one := func(what string) auditv1.Event {
		t.Helper()
		evs := sink.events(t)
		if len(evs) != 1 {
			t.Fatalf("%s: %d audit lines, want 1: %+v", what, len(evs), evs)
		}
		return evs[0]
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"}, StringData: map[string]string{"password": "audit-s3cret"}}
	e.do(req{method: "POST", path: "/api/v1/namespaces/default/secrets", body: toJSON(t, sec)}).must(t, http.StatusCreated, nil)
	raw := string(sink.buf.Bytes())
	ev := one("create")
	if ev.Verb != "create" || ev.User.Username != "admin" || ev.ResponseStatus.Code != 201 || ev.ObjectRef == nil ||
		*ev.ObjectRef != (auditv1.ObjectReference{Resource: "secrets", Namespace: "default", Name: "db", APIVersion: "v1"}) {
		t.Fatalf("create: %+v %+v", ev, ev.ObjectRef)
	}
	for _, leak := range []string{"audit-s3cret", "YXVkaXQtczNjcmV0", adminToken} {
		if strings.Contains(raw, leak) {
			t.Fatalf("the audit line holds %q: %s", leak, raw)
		}
	}

	// Reads are not logged.
	e.get("/api/v1/namespaces/default/secrets/db").must(t, http.StatusOK, nil)
	e.get("/api/v1/pods").must(t, http.StatusOK, nil)
	if evs := sink.events(t); len(evs) != 0 {
		t.Fatalf("reads logged: %+v", evs)
	}

	e.do(req{method: "PATCH", path: "/api/v1/namespaces/default/secrets/db", contentType: "application/merge-patch+json",
		body: `{"metadata":{"labels":{"a":"b"}}}`}).must(t, http.StatusOK, nil)
	if ev := one("patch"); ev.Verb != "patch" || ev.ObjectRef.Name != "db" || ev.ResponseStatus.Code != 200 {
		t.Fatalf("patch: %+v", ev)
	}

	// 401: no token, and a wrong one (never logged).
	if r := e.do(req{method: "GET", path: "/api/v1/pods", token: "-"}); r.code != http.StatusUnauthorized {
		t.Fatalf("anonymous: %d", r.code)
	}
	if ev := one("anonymous"); ev.ResponseStatus.Code != 401 || ev.User.Username != "system:anonymous" || ev.Verb != "list" ||
		ev.ObjectRef == nil || ev.ObjectRef.Resource != "pods" {
		t.Fatalf("anonymous: %+v", ev)
	}
	if r := e.do(req{method: "DELETE", path: "/api/v1/namespaces/default/secrets/db", token: wrongToken}); r.code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", r.code)
	}
	raw = string(sink.buf.Bytes())
	if ev := one("wrong token"); ev.ResponseStatus.Code != 401 || ev.Verb != "delete" || ev.ObjectRef.Name != "db" || strings.Contains(raw, wrongToken) {
		t.Fatalf("wrong token: %+v %s", ev, raw)
	}

	// 403: a node reading a Secret no pod of its refers to.
	if r := e.do(req{method: "GET", path: "/api/v1/namespaces/default/secrets/db", token: n1Token}); r.code != http.StatusForbidden {
		t.Fatalf("node read: %d", r.code)
	}
	if ev := one("forbidden"); ev.ResponseStatus.Code != 403 || ev.User.Username != "system:node:n1" || ev.Verb != "get" ||
		ev.ObjectRef.Resource != "secrets" || ev.ObjectRef.Name != "db" || !strings.Contains(strings.Join(ev.User.Groups, ","), "system:nodes") {
		t.Fatalf("forbidden: %+v", ev)
	}

	// Impersonation records both users.
	hr, _ := http.NewRequest("DELETE", e.srv.URL+"/api/v1/namespaces/default/secrets/db", nil)
	hr.Header.Set("Authorization", "Bearer "+adminToken)
	hr.Header.Set("Impersonate-User", "jane")
	res, err := e.srv.Client().Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if ev := one("impersonated"); ev.User.Username != "admin" || ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != "jane" ||
		ev.ResponseStatus.Code != int32(res.StatusCode) || ev.Verb != "delete" {
		t.Fatalf("impersonated: %+v", ev)
	}
	e.do(req{method: "DELETE", path: "/api/v1/namespaces/default/secrets/db"}).must(t, http.StatusOK, nil)
	if ev := one("delete"); ev.Verb != "delete" || ev.ResponseStatus.Code != 200 {
		t.Fatalf("delete: %+v", ev)
	}
}
