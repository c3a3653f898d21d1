package apiserver

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/apiserver/strategy"
)

// TestDeletePropagation: Orphan and Foreground mark the object and add their
// finalizer; Background removes it; emptying the finalizers of a marked
// object removes it.
func TestDeletePropagation(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name, body, query string
		finalizer         string // "" = removed at once
	}{
		{"orphan body", `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Orphan"}`, "", strategy.FinalizerOrphan},
		{"foreground body", `{"propagationPolicy":"Foreground"}`, "", strategy.FinalizerForeground},
		{"orphan query", "", "?propagationPolicy=Orphan", strategy.FinalizerOrphan},
		{"orphanDependents", `{"orphanDependents":true}`, "", strategy.FinalizerOrphan},
		{"background", `{"propagationPolicy":"Background"}`, "", ""},
		{"none", "", "", ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "ds" + string(rune('a'+i))
			e.createDS(newDS(name))
			var out appsv1.DaemonSet
			e.do(req{method: "DELETE", path: dsPath + "/" + name + tc.query, body: tc.body}).must(t, http.StatusOK, &out)
			if out.Kind != "DaemonSet" {
				t.Errorf("kind %q", out.Kind)
			}
			r := e.get(dsPath + "/" + name)
			if tc.finalizer == "" {
				if r.code != http.StatusNotFound {
					t.Fatalf("still there: %d", r.code)
				}
				return
			}
			var got appsv1.DaemonSet
			r.must(t, http.StatusOK, &got)
			if got.DeletionTimestamp == nil || !slices.Contains(got.Finalizers, tc.finalizer) {
				t.Fatalf("want deletionTimestamp and %q, got %v %v", tc.finalizer, got.DeletionTimestamp, got.Finalizers)
			}
			// A second delete changes nothing.
			var again appsv1.DaemonSet
			e.do(req{method: "DELETE", path: dsPath + "/" + name + tc.query, body: tc.body}).must(t, http.StatusOK, &again)
			if again.ResourceVersion != got.ResourceVersion {
				t.Errorf("repeated delete wrote: rv %s -> %s", got.ResourceVersion, again.ResourceVersion)
			}
			// The garbage collector's part: drop the finalizer → gone.
			e.do(req{method: "PATCH", path: dsPath + "/" + name, contentType: "application/merge-patch+json",
				body: `{"metadata":{"finalizers":null}}`}).must(t, http.StatusOK, nil)
			if r := e.get(dsPath + "/" + name); r.code != http.StatusNotFound {
				t.Fatalf("after removing finalizers: %d %s", r.code, r.body)
			}
		})
	}
}

// TestDeleteWithFinalizers: an object with its own finalizer is only marked
// by a background delete.
func TestDeleteWithFinalizers(t *testing.T) {
	e := newEnv(t)
	ds := newDS("fin")
	ds.Finalizers = []string{"example.com/hold"}
	e.createDS(ds)
	var out appsv1.DaemonSet
	e.do(req{method: "DELETE", path: dsPath + "/fin"}).must(t, http.StatusOK, &out)
	if out.DeletionTimestamp == nil || !slices.Equal(out.Finalizers, []string{"example.com/hold"}) {
		t.Fatalf("want marked with the finalizer kept: %v %v", out.DeletionTimestamp, out.Finalizers)
	}
	// Updating with the finalizer removed deletes it.
	upd := out.DeepCopy()
	upd.Finalizers = nil
	e.do(req{method: "PUT", path: dsPath + "/fin", body: toJSON(t, upd)}).must(t, http.StatusOK, nil)
	if r := e.get(dsPath + "/fin"); r.code != http.StatusNotFound {
		t.Fatalf("still there: %d", r.code)
	}
}

// TestPodGracefulDelete: a pod bound to a node is marked with its grace
// period; the agent's gracePeriodSeconds=0 delete finishes it. Unbound pods
// go at once.
func TestPodGracefulDelete(t *testing.T) {
	e := newEnv(t)
	e.createPod(newPod("unbound", ""))
	e.do(req{method: "DELETE", path: podsPath + "/unbound"}).must(t, http.StatusOK, nil)
	if r := e.get(podsPath + "/unbound"); r.code != http.StatusNotFound {
		t.Fatalf("unbound pod still there: %d", r.code)
	}

	p := newPod("bound", "n1")
	grace := int64(12)
	p.Spec.TerminationGracePeriodSeconds = &grace
	e.createPod(p)
	var marked corev1.Pod
	e.do(req{method: "DELETE", path: podsPath + "/bound", body: `{"propagationPolicy":"Background"}`}).must(t, http.StatusOK, &marked)
	if marked.DeletionTimestamp == nil || marked.DeletionGracePeriodSeconds == nil || *marked.DeletionGracePeriodSeconds != 12 {
		t.Fatalf("want marked with grace 12: %v %v", marked.DeletionTimestamp, marked.DeletionGracePeriodSeconds)
	}
	e.get(podsPath+"/bound").must(t, http.StatusOK, nil)
	// A shorter grace period shortens it.
	e.do(req{method: "DELETE", path: podsPath + "/bound?gracePeriodSeconds=5"}).must(t, http.StatusOK, &marked)
	if *marked.DeletionGracePeriodSeconds != 5 {
		t.Fatalf("grace %d, want 5", *marked.DeletionGracePeriodSeconds)
	}
	// The agent finishes.
	e.do(req{method: "DELETE", path: podsPath + "/bound", body: `{"gracePeriodSeconds":0}`}).must(t, http.StatusOK, nil)
	if r := e.get(podsPath + "/bound"); r.code != http.StatusNotFound {
		t.Fatalf("bound pod still there after grace 0: %d", r.code)
	}

	// Explicit gracePeriodSeconds=0 on a bound pod removes it at once.
	e.createPod(newPod("forced", "n1"))
	e.do(req{method: "DELETE", path: podsPath + "/forced?gracePeriodSeconds=0"}).must(t, http.StatusOK, nil)
	if r := e.get(podsPath + "/forced"); r.code != http.StatusNotFound {
		t.Fatalf("forced pod still there: %d", r.code)
	}
}

// TestDeletePreconditions: matching preconditions delete; stale ones are 409.
func TestDeletePreconditions(t *testing.T) {
	e := newEnv(t)
	ds := e.createDS(newDS("pre"))
	r := e.do(req{method: "DELETE", path: dsPath + "/pre", body: `{"preconditions":{"resourceVersion":"1"}}`})
	if r.code != http.StatusConflict {
		t.Fatalf("stale precondition: %d %s", r.code, r.body)
	}
	body := `{"preconditions":{"uid":"` + string(ds.UID) + `","resourceVersion":"` + ds.ResourceVersion + `"}}`
	e.do(req{method: "DELETE", path: dsPath + "/pre", body: body}).must(t, http.StatusOK, nil)
	if r := e.get(dsPath + "/pre"); r.code != http.StatusNotFound {
		t.Fatalf("still there: %d", r.code)
	}
}

// TestUpdateUIDPrecondition: a uid in a write is a precondition, answered as
// kube-apiserver answers it: a PUT (object or /status) carrying another uid
// is a 409 from the storage's precondition check, a patch that sets another
// uid a 422 (uid is immutable); nothing is written.
func TestUpdateUIDPrecondition(t *testing.T) {
	e := newEnv(t)
	pod := e.createPod(newPod("pre", "n1"))
	stale := pod.DeepCopy()
	stale.UID = "another-uid"
	stale.ResourceVersion = ""
	stale.Status.Phase = corev1.PodFailed
	want := `Operation cannot be fulfilled on pods "pre": Precondition failed: UID in precondition: another-uid, UID in object meta: ` + string(pod.UID)
	for _, path := range []string{podsPath + "/pre", podsPath + "/pre/status"} {
		r := e.do(req{method: "PUT", path: path, body: toJSON(t, stale)})
		var st metav1.Status
		if err := json.Unmarshal(r.body, &st); err != nil || r.code != http.StatusConflict || st.Message != want {
			t.Errorf("PUT %s with another uid: %d %s", path, r.code, r.body)
		}
	}
	r := e.do(req{method: "PATCH", path: podsPath + "/pre/status", contentType: "application/strategic-merge-patch+json",
		body: `{"metadata":{"uid":"another-uid"},"status":{"phase":"Failed"}}`})
	if r.code != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "metadata.uid") {
		t.Errorf("status patch with another uid: %d %s", r.code, r.body)
	}
	var got corev1.Pod
	e.do(req{method: "GET", path: podsPath + "/pre"}).must(t, http.StatusOK, &got)
	if got.Status.Phase == corev1.PodFailed || got.ResourceVersion != pod.ResourceVersion {
		t.Errorf("written: phase %s, resourceVersion %s → %s", got.Status.Phase, pod.ResourceVersion, got.ResourceVersion)
	}
	same := pod.DeepCopy()
	same.Status.Phase = corev1.PodRunning
	e.do(req{method: "PUT", path: podsPath + "/pre/status", body: toJSON(t, same)}).must(t, http.StatusOK, nil)
}
