package apiserver

import (
	"net/http"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

const applyType = "application/apply-patch+yaml"

// appliedDS is a DaemonSet apply body (YAML) with the given image.
func appliedDS(image string) string {
	return `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
  labels: {app: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers:
      - name: agent
        image: ` + image + "\n"
}

func (e *env) apply(manager, body string, force bool) resp {
	e.t.Helper()
	q := "?fieldManager=" + manager + "&fieldValidation=Strict"
	if force {
		q += "&force=true"
	}
	return e.do(req{method: "PATCH", path: dsPath + "/agent" + q, contentType: applyType, body: body})
}

func managerEntry(ds *appsv1.DaemonSet, manager string) *metav1.ManagedFieldsEntry {
	for i := range ds.ManagedFields {
		if ds.ManagedFields[i].Manager == manager {
			return &ds.ManagedFields[i]
		}
	}
	return nil
}

func TestServerSideApply(t *testing.T) {
	e := newEnv(t)

	// Create: 201, defaults applied, the manager owns what it sent.
	var created appsv1.DaemonSet
	e.apply("kubectl", appliedDS("busybox:1.36"), false).must(t, http.StatusCreated, &created)
	if created.UID == "" || created.Generation != 1 || created.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Fatalf("created without server defaults: %+v", created.ObjectMeta)
	}
	m := managerEntry(&created, "kubectl")
	if m == nil || m.Operation != metav1.ManagedFieldsOperationApply || m.APIVersion != "apps/v1" ||
		!strings.Contains(string(m.FieldsV1.Raw), `"f:image"`) || strings.Contains(string(m.FieldsV1.Raw), "updateStrategy") {
		t.Fatalf("managedFields %+v", created.ManagedFields)
	}

	// The same apply again changes nothing: same resourceVersion.
	var again appsv1.DaemonSet
	e.apply("kubectl", appliedDS("busybox:1.36"), false).must(t, http.StatusOK, &again)
	if again.ResourceVersion != created.ResourceVersion {
		t.Fatalf("no-op apply changed resourceVersion %s → %s", created.ResourceVersion, again.ResourceVersion)
	}

	// The owner may change its own fields.
	var updated appsv1.DaemonSet
	e.apply("kubectl", appliedDS("busybox:1.37"), false).must(t, http.StatusOK, &updated)
	if img := updated.Spec.Template.Spec.Containers[0].Image; img != "busybox:1.37" || updated.Generation != 2 {
		t.Fatalf("image %s generation %d", img, updated.Generation)
	}

	// Another manager setting the same field to another value conflicts.
	r := e.apply("other", appliedDS("busybox:1.40"), false)
	st := r.status(t)
	if r.code != http.StatusConflict || st.Reason != metav1.StatusReasonConflict ||
		!strings.Contains(st.Message, `Apply failed with 1 conflict: conflict with "kubectl": .spec.template.spec.containers[name="agent"].image`) {
		t.Fatalf("conflict: code %d %s", r.code, r.body)
	}
	// The same value is shared ownership, not a conflict.
	e.apply("other", appliedDS("busybox:1.37"), false).must(t, http.StatusOK, nil)

	// force takes the field over.
	var forced appsv1.DaemonSet
	e.apply("other", appliedDS("busybox:1.40"), true).must(t, http.StatusOK, &forced)
	if img := forced.Spec.Template.Spec.Containers[0].Image; img != "busybox:1.40" {
		t.Fatalf("forced image %s", img)
	}
	if k := managerEntry(&forced, "kubectl"); k != nil && strings.Contains(string(k.FieldsV1.Raw), `"f:image"`) {
		t.Fatalf("kubectl still owns the image after a forced apply: %s", k.FieldsV1.Raw)
	}

	// A field an Update manager set also conflicts for an applier.
	e.do(req{method: "PATCH", path: dsPath + "/agent?fieldManager=kubectl-patch", contentType: "application/merge-patch+json",
		body: `{"spec":{"minReadySeconds":5}}`}).must(t, http.StatusOK, nil)
	r = e.apply("other", strings.Replace(appliedDS("busybox:1.40"), "spec:\n  selector", "spec:\n  minReadySeconds: 7\n  selector", 1), false)
	if r.code != http.StatusConflict || !strings.Contains(string(r.body), `conflict with \"kubectl-patch\" using apps/v1: .spec.minReadySeconds`) {
		t.Fatalf("conflict with an Update manager: code %d %s", r.code, r.body)
	}
}

func TestServerSideApplyErrors(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name, path, body string
		code             int
		msg              string
	}{
		{"unknown field", dsPath + "/agent?fieldManager=m&fieldValidation=Strict",
			strings.Replace(appliedDS("busybox"), "image:", "imagex:", 1), 400, "unknown field"},
		{"name mismatch", dsPath + "/other?fieldManager=m", appliedDS("busybox"), 400, "does not match the name"},
		{"wrong kind", dsPath + "/agent?fieldManager=m", strings.Replace(appliedDS("busybox"), "kind: DaemonSet", "kind: Pod", 1), 400, ""},
		{"managedFields set", dsPath + "/agent?fieldManager=m",
			strings.Replace(appliedDS("busybox"), "  name: agent\n", "  name: agent\n  managedFields: [{manager: x}]\n", 1), 400, "managedFields must be nil"},
		{"invalid object", dsPath + "/agent?fieldManager=m", strings.Replace(appliedDS("busybox"), "{matchLabels: {app: agent}}", "{matchLabels: {app: other}}", 1), 422, "selector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(req{method: "PATCH", path: tt.path, contentType: applyType, body: tt.body})
			if r.code != tt.code || !strings.Contains(string(r.body), tt.msg) {
				t.Fatalf("code %d, want %d with %q: %s", r.code, tt.code, tt.msg, r.body)
			}
		})
	}
	// dryRun creates nothing.
	e.do(req{method: "PATCH", path: dsPath + "/agent?fieldManager=m&dryRun=All", contentType: applyType, body: appliedDS("busybox")}).must(t, http.StatusCreated, nil)
	e.get(dsPath+"/agent").must(t, http.StatusNotFound, nil)
}

func TestManagedFieldsOnUpdates(t *testing.T) {
	e := newEnv(t)
	var ds appsv1.DaemonSet
	e.do(req{method: "POST", path: dsPath + "?fieldManager=kubectl-create", body: toJSON(t, newDS("agent"))}).must(t, http.StatusCreated, &ds)
	if m := managerEntry(&ds, "kubectl-create"); m == nil || m.Operation != metav1.ManagedFieldsOperationUpdate {
		t.Fatalf("create managedFields %+v", ds.ManagedFields)
	}
	// A PUT without managedFields keeps the stored ones and adds its manager.
	ds.ManagedFields = nil
	ds.Labels["x"] = "y"
	var put appsv1.DaemonSet
	e.do(req{method: "PUT", path: dsPath + "/agent?fieldManager=kubectl-replace", body: toJSON(t, &ds)}).must(t, http.StatusOK, &put)
	if managerEntry(&put, "kubectl-create") == nil || managerEntry(&put, "kubectl-replace") == nil {
		t.Fatalf("PUT managedFields %+v", put.ManagedFields)
	}
	// Status writes leave managedFields alone.
	put.Status.DesiredNumberScheduled = 3
	var status appsv1.DaemonSet
	e.do(req{method: "PUT", path: dsPath + "/agent/status", body: toJSON(t, &put)}).must(t, http.StatusOK, &status)
	if len(status.ManagedFields) != len(put.ManagedFields) {
		t.Fatalf("status write changed managedFields: %+v", status.ManagedFields)
	}
}

// TestServerSideApplyPortsByProtocol: container ports are keyed by port and
// protocol, as upstream, so 53/TCP and 53/UDP may coexist.
func TestServerSideApplyPortsByProtocol(t *testing.T) {
	e := newEnv(t)
	body := appliedDS("coredns") + "        ports:\n        - {containerPort: 53, protocol: UDP}\n        - {containerPort: 53}\n"
	var ds appsv1.DaemonSet
	e.apply("kubectl", body, false).must(t, http.StatusCreated, &ds)
	if p := ds.Spec.Template.Spec.Containers[0].Ports; len(p) != 2 || p[1].Protocol != "TCP" {
		t.Fatalf("ports %+v", p)
	}
	e.apply("kubectl", body, false).must(t, http.StatusOK, nil)
}

// TestLocalClientApply: the in-process client serves server-side apply and
// records its FieldManager on other writes.
func TestLocalClientApply(t *testing.T) {
	e := newEnv(t)
	lc := NewLocalClient(e.s, "controller", mastersGroup)
	ctx := testCtx(t)
	obj, err := lc.Patch(ctx, resources.DaemonSets, "default", "agent", types.ApplyYAMLPatchType,
		[]byte(appliedDS("busybox:1.36")), client.WriteOptions{FieldManager: "everynode-apply"}, "")
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	ds := obj.(*appsv1.DaemonSet)
	if m := managerEntry(ds, "everynode-apply"); m == nil || m.Operation != metav1.ManagedFieldsOperationApply {
		t.Fatalf("managedFields %+v", ds.ManagedFields)
	}
	ds.Labels["x"] = "y"
	obj, err = lc.Update(ctx, ds, client.WriteOptions{FieldManager: "labeller"})
	if err != nil {
		t.Fatal(err)
	}
	if m := managerEntry(obj.(*appsv1.DaemonSet), "labeller"); m == nil || !strings.Contains(string(m.FieldsV1.Raw), `"f:x"`) {
		t.Fatalf("update managedFields %+v", obj.(*appsv1.DaemonSet).ManagedFields)
	}
	if _, err := lc.Patch(ctx, resources.DaemonSets, "default", "agent", types.ApplyYAMLPatchType,
		[]byte(appliedDS("busybox:1.36")), client.WriteOptions{}, ""); !apierrors.IsBadRequest(err) {
		t.Fatalf("apply without a field manager: %v", err)
	}
}
