package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// TestMalformedRequests sends each malformed request and checks its Status
// code and reason, and that the stored DaemonSet "agent" did not change and no
// other DaemonSet appeared.
func TestMalformedRequests(t *testing.T) {
	e := newEnv(t)
	orig := e.createDS(newDS("agent"))
	item := dsPath + "/agent"

	withDS := func(mut func(ds *appsv1.DaemonSet)) string {
		ds := orig.DeepCopy()
		mut(ds)
		return toJSON(t, ds)
	}
	newWith := func(name string, mut func(ds *appsv1.DaemonSet)) string {
		ds := newDS(name)
		mut(ds)
		return toJSON(t, ds)
	}
	huge := newDS("huge")
	huge.Annotations = map[string]string{"big": strings.Repeat("x", 3<<20)}

	cases := []struct {
		name   string
		req    req
		code   int
		reason metav1.StatusReason
		msg    string // a substring of the message, when not empty
	}{
		{"bad JSON", req{method: "POST", path: dsPath, body: `{"apiVersion": "apps/v1", "kind": `},
			400, metav1.StatusReasonBadRequest, ""},
		{"bad YAML", req{method: "POST", path: dsPath, contentType: "application/yaml", body: "apiVersion: apps/v1\nkind: [DaemonSet\n"},
			400, metav1.StatusReasonBadRequest, ""},
		{"wrong kind", req{method: "POST", path: dsPath, body: `{"apiVersion":"apps/v1","kind":"Pod","metadata":{"name":"x"}}`},
			400, metav1.StatusReasonBadRequest, "kind"},
		{"wrong apiVersion", req{method: "POST", path: dsPath, body: `{"apiVersion":"apps/v2","kind":"DaemonSet","metadata":{"name":"x"}}`},
			400, metav1.StatusReasonBadRequest, "API version"},
		{"invalid name", req{method: "POST", path: dsPath, body: newWith("Bad_Name", func(*appsv1.DaemonSet) {})},
			422, metav1.StatusReasonInvalid, "metadata.name"},
		{"selector does not match template labels", req{method: "POST", path: dsPath, body: newWith("sel", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Labels = map[string]string{"app": "other"}
		})}, 422, metav1.StatusReasonInvalid, "selector"},
		{"selector change on update", req{method: "PUT", path: item, body: withDS(func(ds *appsv1.DaemonSet) {
			ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent", "x": "y"}}
			ds.Spec.Template.Labels = map[string]string{"app": "agent", "x": "y"}
		})}, 422, metav1.StatusReasonInvalid, "field is immutable"},
		{"maxSurge and maxUnavailable both zero", req{method: "POST", path: dsPath, body: newWith("zero", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxSurge: intOrStr("0"), MaxUnavailable: intOrStr("0")}}
		})}, 422, metav1.StatusReasonInvalid, "maxUnavailable"},
		{"maxSurge and maxUnavailable both set", req{method: "POST", path: dsPath, body: newWith("both", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxSurge: intOrStr("1"), MaxUnavailable: intOrStr("1")}}
		})}, 422, metav1.StatusReasonInvalid, ""},
		{"body over 3 MiB", req{method: "POST", path: dsPath, body: toJSON(t, huge)},
			413, metav1.StatusReasonRequestEntityTooLarge, ""},
		{"stale resourceVersion", req{method: "PUT", path: item, body: withDS(func(ds *appsv1.DaemonSet) {
			ds.ResourceVersion = "1"
			ds.Labels["new"] = "label"
		})}, 409, metav1.StatusReasonConflict, "the object has been modified"},
		{"name differs from URL", req{method: "PUT", path: item, body: withDS(func(ds *appsv1.DaemonSet) { ds.Name = "other" })},
			400, metav1.StatusReasonBadRequest, "does not match the name"},
		{"namespace differs from URL", req{method: "POST", path: dsPath, body: newWith("nsx", func(ds *appsv1.DaemonSet) { ds.Namespace = "kube-system" })},
			400, metav1.StatusReasonBadRequest, "namespace"},
		{"namespace does not exist", req{method: "POST", path: "/apis/apps/v1/namespaces/nope/daemonsets", body: toJSON(t, newDS("x"))},
			404, metav1.StatusReasonNotFound, `namespaces "nope" not found`},
		{"update in a namespace that does not exist", req{method: "PUT", path: "/apis/apps/v1/namespaces/nope/daemonsets/agent",
			body: withDS(func(ds *appsv1.DaemonSet) { ds.Namespace = "" })}, 404, metav1.StatusReasonNotFound, `namespaces "nope" not found`},
		{"delete in a namespace that does not exist", req{method: "DELETE", path: "/apis/apps/v1/namespaces/nope/daemonsets/agent"},
			404, metav1.StatusReasonNotFound, `namespaces "nope" not found`},
		{"unknown resource", req{method: "GET", path: "/apis/apps/v1/namespaces/default/foos"},
			404, metav1.StatusReasonNotFound, ""},
		{"unknown group", req{method: "GET", path: "/apis/batch/v1/jobs"},
			404, metav1.StatusReasonNotFound, ""},
		{"missing token", req{method: "PUT", path: item, token: "-", body: withDS(func(ds *appsv1.DaemonSet) { ds.Labels["x"] = "y" })},
			401, metav1.StatusReasonUnauthorized, ""},
		{"bad token", req{method: "DELETE", path: item, token: "nope"},
			401, metav1.StatusReasonUnauthorized, ""},
		{"unknown patch type", req{method: "PATCH", path: item, contentType: "text/plain", body: `{"metadata":{"labels":{"x":"y"}}}`},
			415, metav1.StatusReasonUnsupportedMediaType, ""},
		{"server-side apply without fieldManager", req{method: "PATCH", path: item, contentType: "application/apply-patch+yaml", body: "metadata: {}"},
			400, metav1.StatusReasonBadRequest, "must specify fieldManager"},
		{"unknown field with fieldValidation=Strict", req{method: "POST", path: dsPath + "?fieldValidation=Strict",
			body: `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"strict"},"spec":{"bogus":1}}`},
			400, metav1.StatusReasonBadRequest, "unknown field"},
		{"unknown field in patch with fieldValidation=Strict", req{method: "PATCH", path: item + "?fieldValidation=Strict",
			contentType: "application/merge-patch+json", body: `{"spec":{"bogus":1}}`},
			400, metav1.StatusReasonBadRequest, "unknown field"},
		{"bad fieldValidation", req{method: "POST", path: dsPath + "?fieldValidation=Loud", body: toJSON(t, newDS("fv"))},
			400, metav1.StatusReasonBadRequest, "fieldValidation"},
		{"bad dryRun", req{method: "POST", path: dsPath + "?dryRun=Some", body: toJSON(t, newDS("dr"))},
			400, metav1.StatusReasonBadRequest, "dryRun"},
		{"unsupported body media type", req{method: "POST", path: dsPath, contentType: "application/x-www-form-urlencoded", body: "a=b"},
			415, metav1.StatusReasonUnsupportedMediaType, ""},
		{"unsupported field selector", req{method: "GET", path: dsPath + "?fieldSelector=spec.nodeName%3Dx"},
			400, metav1.StatusReasonBadRequest, "field label not supported"},
		{"bad label selector", req{method: "GET", path: dsPath + "?labelSelector=a%20in%20("},
			400, metav1.StatusReasonBadRequest, "labelSelector"},
		{"bad watch resourceVersion", req{method: "GET", path: dsPath + "?watch=true&resourceVersion=abc"},
			400, metav1.StatusReasonBadRequest, "resourceVersion"},
		{"bad propagationPolicy", req{method: "DELETE", path: item, body: `{"propagationPolicy":"Sideways"}`},
			400, metav1.StatusReasonBadRequest, "propagationPolicy"},
		{"delete precondition uid", req{method: "DELETE", path: item, body: `{"preconditions":{"uid":"not-it"}}`},
			409, metav1.StatusReasonConflict, "Precondition failed"},
		{"method not allowed", req{method: "POST", path: item, body: toJSON(t, newDS("agent"))},
			405, metav1.StatusReasonMethodNotAllowed, ""},
		{"get missing object", req{method: "GET", path: dsPath + "/missing"},
			404, metav1.StatusReasonNotFound, `daemonsets.apps "missing" not found`},
		{"delete immortal namespace", req{method: "DELETE", path: "/api/v1/namespaces/default"},
			403, metav1.StatusReasonForbidden, "may not be deleted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.req)
			if r.code != tc.code {
				t.Fatalf("code %d, want %d: %s", r.code, tc.code, r.body)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			st := r.status(t)
			if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure || int(st.Code) != tc.code {
				t.Errorf("Status envelope %+v", st)
			}
			if st.Reason != tc.reason {
				t.Errorf("reason %q, want %q (%s)", st.Reason, tc.reason, st.Message)
			}
			if !strings.Contains(st.Message, tc.msg) {
				t.Errorf("message %q, want it to contain %q", st.Message, tc.msg)
			}
			var now appsv1.DaemonSet
			e.get(item).must(t, http.StatusOK, &now)
			if now.ResourceVersion != orig.ResourceVersion || toJSON(t, now.Spec) != toJSON(t, orig.Spec) ||
				toJSON(t, now.ObjectMeta) != toJSON(t, orig.ObjectMeta) {
				t.Errorf("stored object changed:\n%s\nwas\n%s", toJSON(t, now), toJSON(t, orig))
			}
			var list appsv1.DaemonSetList
			e.get(dsPath).must(t, http.StatusOK, &list)
			if len(list.Items) != 1 {
				t.Errorf("%d daemonsets stored, want 1", len(list.Items))
			}
		})
	}
}

// TestStatusErrorMapping checks the one error mapping for errors that do not
// come over HTTP.
func TestStatusErrorMapping(t *testing.T) {
	s := &Server{log: testLogger()}
	ds := resources.DaemonSets
	cases := []struct {
		name   string
		err    error
		code   int32
		reason metav1.StatusReason
		msg    string
	}{
		{"passthrough", apierrors.NewBadRequest("nope"), 400, metav1.StatusReasonBadRequest, "nope"},
		{"store not found", &store.Error{Kind: store.NotFound, Resource: ds, Namespace: "default", Name: "a"},
			404, metav1.StatusReasonNotFound, `daemonsets.apps "a" not found`},
		{"wrapped store already exists", fmt.Errorf("ctx: %w", &store.Error{Kind: store.AlreadyExists, Resource: ds, Name: "a"}),
			409, metav1.StatusReasonAlreadyExists, "already exists"},
		{"store conflict", &store.Error{Kind: store.Conflict, Resource: ds, Name: "a"},
			409, metav1.StatusReasonConflict, "please apply your changes to the latest version"},
		{"store gone", &store.Error{Kind: store.Gone, Resource: ds}, 410, metav1.StatusReasonExpired, "too old resource version"},
		{"deadline", &store.Error{Kind: store.Internal, Resource: ds, Err: context.DeadlineExceeded}, 504, metav1.StatusReasonTimeout, ""},
		{"canceled", context.Canceled, 499, metav1.StatusReasonUnknown, ""},
		{"body too large", &http.MaxBytesError{Limit: 10}, 413, metav1.StatusReasonRequestEntityTooLarge, ""},
		{"other", errors.New("boom"), 500, metav1.StatusReasonInternalError, "boom"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := s.statusError(tc.err).ErrStatus
			if st.Code != tc.code || st.Reason != tc.reason || !strings.Contains(st.Message, tc.msg) {
				t.Errorf("got %d %s %q, want %d %s containing %q", st.Code, st.Reason, st.Message, tc.code, tc.reason, tc.msg)
			}
			if st.Kind != "Status" || st.APIVersion != "v1" {
				t.Errorf("TypeMeta %+v", st.TypeMeta)
			}
		})
	}
}
