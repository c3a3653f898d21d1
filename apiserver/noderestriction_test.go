package apiserver

import (
	"context"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeRestriction(t *testing.T) {
	pods := map[string]*corev1.Pod{
		"mine":   {ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "mine"}, Spec: corev1.PodSpec{NodeName: "n1"}},
		"theirs": {ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "theirs"}, Spec: corev1.PodSpec{NodeName: "n2"}},
	}
	authz := NewNodeRestriction(func(_ context.Context, _, name string) (*corev1.Pod, error) { return pods[name], nil })
	n1 := UserInfo{Name: "system:node:n1", Groups: []string{"system:nodes", authenticatedGroup}}
	mirror := func(node string, annotated bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "static-" + node}, Spec: corev1.PodSpec{NodeName: node}}
		if annotated {
			p.Annotations = map[string]string{mirrorPodAnnotation: "x"}
		}
		return p
	}
	cases := []struct {
		name  string
		attrs Attributes
		allow bool
	}{
		{"list pods", Attributes{User: n1, Verb: "list", Resource: "pods"}, true},
		{"watch daemonsets", Attributes{User: n1, Verb: "watch", APIGroup: "apps", Resource: "daemonsets"}, true},
		{"get other node", Attributes{User: n1, Verb: "get", Resource: "nodes", Name: "n2"}, true},
		{"create own node", Attributes{User: n1, Verb: "create", Resource: "nodes", Name: "n1"}, true},
		{"create other node", Attributes{User: n1, Verb: "create", Resource: "nodes", Name: "n2"}, false},
		{"update own node status", Attributes{User: n1, Verb: "update", Resource: "nodes", Subresource: "status", Name: "n1"}, true},
		{"patch other node", Attributes{User: n1, Verb: "patch", Resource: "nodes", Name: "n2"}, false},
		{"delete other node", Attributes{User: n1, Verb: "delete", Resource: "nodes", Name: "n2"}, false},
		// Pod status writes are decided by AdmitUpdate (TestNodeRestrictionAdmitUpdate).
		{"pod status", Attributes{User: n1, Verb: "patch", Resource: "pods", Subresource: "status", Namespace: "default", Name: "theirs"}, true},
		{"missing pod delete", Attributes{User: n1, Verb: "delete", Resource: "pods", Namespace: "default", Name: "gone"}, true},
		{"own pod spec", Attributes{User: n1, Verb: "update", Resource: "pods", Namespace: "default", Name: "mine"}, false},
		{"delete own pod", Attributes{User: n1, Verb: "delete", Resource: "pods", Namespace: "default", Name: "mine"}, true},
		{"delete other pod", Attributes{User: n1, Verb: "delete", Resource: "pods", Namespace: "default", Name: "theirs"}, false},
		{"create own mirror pod", Attributes{User: n1, Verb: "create", Resource: "pods", Namespace: "default", Name: "static-n1", Object: mirror("n1", true)}, true},
		{"create plain pod", Attributes{User: n1, Verb: "create", Resource: "pods", Namespace: "default", Name: "static-n1", Object: mirror("n1", false)}, false},
		{"create mirror pod elsewhere", Attributes{User: n1, Verb: "create", Resource: "pods", Namespace: "default", Name: "static-n2", Object: mirror("n2", true)}, false},
		{"deletecollection pods", Attributes{User: n1, Verb: "deletecollection", Resource: "pods", Namespace: "default"}, false},
		{"create event", Attributes{User: n1, Verb: "create", Resource: "events", Namespace: "default"}, true},
		{"create daemonset", Attributes{User: n1, Verb: "create", APIGroup: "apps", Resource: "daemonsets", Namespace: "default", Name: "x"}, false},
		{"create namespace", Attributes{User: n1, Verb: "create", Resource: "namespaces", Name: "x"}, false},
		{"not a node", Attributes{User: UserInfo{Name: "system:node:n1"}, Verb: "get", Resource: "pods"}, false},
		{"someone else", Attributes{User: UserInfo{Name: "bob"}, Verb: "list", Resource: "pods"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := authz.Authorize(context.Background(), c.attrs)
			if c.allow {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) {
				t.Fatalf("want 403, got %v", err)
			}
			if code := err.(apierrors.APIStatus).Status().Code; code != http.StatusForbidden {
				t.Fatalf("code %d", code)
			}
		})
	}
	err := authz.Authorize(context.Background(), Attributes{User: n1, Verb: "patch", Resource: "nodes", Name: "n2"})
	if want := `nodes "n2" is forbidden: node "n1" may only modify its own Node object, not node "n2"`; err == nil || err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

// TestNodeRestrictionAdmitUpdate: a node's pod status write is checked
// against the pod it replaces; other writes pass (Authorize decided them).
func TestNodeRestrictionAdmitUpdate(t *testing.T) {
	authz := NewNodeRestriction(func(context.Context, string, string) (*corev1.Pod, error) {
		t.Fatal("AdmitUpdate read a pod")
		return nil, nil
	})
	n1 := UserInfo{Name: "system:node:n1", Groups: []string{"system:nodes", authenticatedGroup}}
	pod := func(node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}, Spec: corev1.PodSpec{NodeName: node}}
	}
	status := Attributes{User: n1, Verb: "patch", Resource: "pods", Subresource: "status", Namespace: "default", Name: "p"}
	if err := authz.AdmitUpdate(context.Background(), status, pod("n1")); err != nil {
		t.Errorf("own pod's status: %v", err)
	}
	err := authz.AdmitUpdate(context.Background(), status, pod("n2"))
	if want := `pods "p" is forbidden: node "n1" may only update the status of pods bound to itself (this pod is bound to "n2")`; err == nil || err.Error() != want {
		t.Errorf("another node's pod: %v, want %q", err, want)
	}
	if err := authz.AdmitUpdate(context.Background(), status, pod("")); !apierrors.IsForbidden(err) {
		t.Errorf("an unbound pod: %v, want 403", err)
	}
	node := Attributes{User: n1, Verb: "update", Resource: "nodes", Subresource: "status", Name: "n1"}
	if err := authz.AdmitUpdate(context.Background(), node, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Errorf("own node's status: %v", err)
	}
	admin := status
	admin.User = UserInfo{Name: "admin", Groups: []string{"system:masters"}}
	if err := authz.AdmitUpdate(context.Background(), admin, pod("n2")); err != nil {
		t.Errorf("not a node: %v", err)
	}
}
