package apiserver

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/resources"
)

// TestCRUDRoundTrip creates, reads, lists, updates, patches (three ways) and
// deletes a DaemonSet over HTTP.
func TestCRUDRoundTrip(t *testing.T) {
	e := newEnv(t)

	created := e.createDS(newDS("agent"))
	if created.UID == "" || created.CreationTimestamp.IsZero() || created.Generation != 1 || created.ResourceVersion == "" {
		t.Fatalf("server-set metadata missing: %+v", created.ObjectMeta)
	}
	if created.APIVersion != "apps/v1" || created.Kind != "DaemonSet" || created.Namespace != "default" {
		t.Fatalf("typeMeta/namespace: %s %s %s", created.APIVersion, created.Kind, created.Namespace)
	}

	var got appsv1.DaemonSet
	e.get(dsPath+"/agent").must(t, http.StatusOK, &got)
	if got.UID != created.UID || got.ResourceVersion != created.ResourceVersion || got.Kind != "DaemonSet" {
		t.Fatalf("get: %+v", got.ObjectMeta)
	}

	e.createDS(newDS("other"))
	for _, path := range []string{dsPath, "/apis/apps/v1/daemonsets", dsPath + "?labelSelector=app%3Dagent"} {
		var list appsv1.DaemonSetList
		e.get(path).must(t, http.StatusOK, &list)
		if list.Kind != "DaemonSetList" || list.APIVersion != "apps/v1" || list.ResourceVersion == "" {
			t.Errorf("%s: list envelope %s %s rv=%q", path, list.Kind, list.APIVersion, list.ResourceVersion)
		}
		want := 2
		if strings.Contains(path, "labelSelector") {
			want = 1
		}
		if len(list.Items) != want {
			t.Errorf("%s: %d items, want %d", path, len(list.Items), want)
		}
	}

	// Update (PUT): a label change keeps the generation.
	upd := got.DeepCopy()
	upd.Labels["tier"] = "node"
	var updated appsv1.DaemonSet
	e.do(req{method: "PUT", path: dsPath + "/agent", body: toJSON(t, upd)}).must(t, http.StatusOK, &updated)
	if updated.Labels["tier"] != "node" || updated.ResourceVersion == got.ResourceVersion || updated.Generation != 1 {
		t.Fatalf("update: labels %v rv %s gen %d", updated.Labels, updated.ResourceVersion, updated.Generation)
	}
	// A PUT without resourceVersion is unconditional.
	upd = updated.DeepCopy()
	upd.ResourceVersion = ""
	upd.Labels["tier"] = "edge"
	e.do(req{method: "PUT", path: dsPath + "/agent", body: toJSON(t, upd)}).must(t, http.StatusOK, &updated)

	patches := []struct{ ct, body, image string }{
		{"application/strategic-merge-patch+json",
			`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"busybox:1.37"}]}}}}`, "busybox:1.37"},
		{"application/merge-patch+json", `{"metadata":{"labels":{"merged":"yes"}}}`, "busybox:1.37"},
		{"application/json-patch+json",
			`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"busybox:1.38"}]`, "busybox:1.38"},
	}
	for _, p := range patches {
		var out appsv1.DaemonSet
		e.do(req{method: "PATCH", path: dsPath + "/agent?fieldManager=kubectl-patch", contentType: p.ct, body: p.body}).
			must(t, http.StatusOK, &out)
		if img := out.Spec.Template.Spec.Containers[0].Image; img != p.image {
			t.Errorf("%s: image %q, want %q", p.ct, img, p.image)
		}
		if out.Kind != "DaemonSet" || out.APIVersion != "apps/v1" {
			t.Errorf("%s: typeMeta %s %s", p.ct, out.APIVersion, out.Kind)
		}
		updated = out
	}
	if updated.Labels["merged"] != "yes" || updated.Generation != 3 {
		t.Errorf("after patches: labels %v generation %d (want 3: two template changes)", updated.Labels, updated.Generation)
	}

	// A no-op patch returns the object with the same resourceVersion.
	var same appsv1.DaemonSet
	e.do(req{method: "PATCH", path: dsPath + "/agent", contentType: "application/merge-patch+json",
		body: `{"metadata":{"labels":{"merged":"yes"}}}`}).must(t, http.StatusOK, &same)
	if same.ResourceVersion != updated.ResourceVersion {
		t.Errorf("no-op patch moved resourceVersion %s -> %s", updated.ResourceVersion, same.ResourceVersion)
	}

	// YAML create.
	yml := "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: yaml-ds\nspec:\n  selector:\n    matchLabels: {app: yml}\n" +
		"  template:\n    metadata:\n      labels: {app: yml}\n    spec:\n      containers:\n      - name: c\n        image: busybox\n"
	e.do(req{method: "POST", path: dsPath, contentType: "application/yaml", body: yml}).must(t, http.StatusCreated, nil)

	// Duplicate create.
	r := e.do(req{method: "POST", path: dsPath, body: toJSON(t, newDS("agent"))})
	if st := r.status(t); r.code != 409 || st.Reason != metav1.StatusReasonAlreadyExists {
		t.Errorf("duplicate create: %d %s", r.code, st.Reason)
	}

	var deleted appsv1.DaemonSet
	e.do(req{method: "DELETE", path: dsPath + "/agent", body: `{"propagationPolicy":"Background"}`}).must(t, http.StatusOK, &deleted)
	if deleted.Name != "agent" || deleted.Kind != "DaemonSet" {
		t.Errorf("delete returned %s %s", deleted.Kind, deleted.Name)
	}
	if r := e.get(dsPath + "/agent"); r.code != http.StatusNotFound {
		t.Errorf("get after delete: %d", r.code)
	}
}

// TestStatusSubresource: /status writes change only status and never the
// generation; main-resource writes never change status.
func TestStatusSubresource(t *testing.T) {
	e := newEnv(t)
	ds := e.createDS(newDS("agent"))

	st := ds.DeepCopy()
	st.Status.DesiredNumberScheduled = 3
	st.Spec.Template.Spec.Containers[0].Image = "ignored"
	var out appsv1.DaemonSet
	e.do(req{method: "PUT", path: dsPath + "/agent/status", body: toJSON(t, st)}).must(t, http.StatusOK, &out)
	if out.Status.DesiredNumberScheduled != 3 || out.Spec.Template.Spec.Containers[0].Image != "busybox:1.36" || out.Generation != 1 {
		t.Fatalf("status update: status %+v image %s gen %d", out.Status, out.Spec.Template.Spec.Containers[0].Image, out.Generation)
	}
	e.do(req{method: "PATCH", path: dsPath + "/agent/status", contentType: "application/merge-patch+json",
		body: `{"status":{"numberReady":2}}`}).must(t, http.StatusOK, &out)
	if out.Status.NumberReady != 2 || out.Status.DesiredNumberScheduled != 3 {
		t.Fatalf("status patch: %+v", out.Status)
	}
	var got appsv1.DaemonSet
	e.get(dsPath+"/agent/status").must(t, http.StatusOK, &got)
	if got.Status.NumberReady != 2 || got.Kind != "DaemonSet" {
		t.Fatalf("get status: %+v", got.Status)
	}
	// The main resource ignores status.
	e.do(req{method: "PATCH", path: dsPath + "/agent", contentType: "application/merge-patch+json",
		body: `{"status":{"numberReady":9}}`}).must(t, http.StatusOK, &out)
	if out.Status.NumberReady != 2 {
		t.Fatalf("spec patch changed status: %+v", out.Status)
	}
}

// TestGeneration: generation moves on spec changes only.
func TestGeneration(t *testing.T) {
	e := newEnv(t)
	ds := e.createDS(newDS("agent"))
	steps := []struct {
		name  string
		patch string
		gen   int64
	}{
		{"label", `{"metadata":{"labels":{"a":"b"}}}`, 1},
		{"annotation", `{"metadata":{"annotations":{"a":"b"}}}`, 1},
		{"minReadySeconds", `{"spec":{"minReadySeconds":5}}`, 2},
		{"template image", `{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"busybox:2"}]}}}}`, 3},
		{"same spec again", `{"spec":{"minReadySeconds":5}}`, 3},
	}
	for _, s := range steps {
		e.do(req{method: "PATCH", path: dsPath + "/agent", contentType: "application/merge-patch+json", body: s.patch}).
			must(t, http.StatusOK, ds)
		if ds.Generation != s.gen {
			t.Errorf("after %s: generation %d, want %d", s.name, ds.Generation, s.gen)
		}
	}
	if got := ds.Annotations["deprecated.daemonset.template.generation"]; got != "2" {
		t.Errorf("template generation annotation %q, want 2", got)
	}
}

// TestDryRun: dryRun=All processes every write fully and stores nothing.
func TestDryRun(t *testing.T) {
	e := newEnv(t)
	var out appsv1.DaemonSet
	e.do(req{method: "POST", path: dsPath + "?dryRun=All", body: toJSON(t, newDS("dry"))}).must(t, http.StatusCreated, &out)
	if out.UID == "" || out.Generation != 1 || out.Kind != "DaemonSet" {
		t.Errorf("dry-run create did not run the create rules: %+v", out.ObjectMeta)
	}
	if r := e.get(dsPath + "/dry"); r.code != http.StatusNotFound {
		t.Fatalf("dry-run create stored the object: %d", r.code)
	}
	// Invalid objects still fail in a dry run.
	bad := newDS("Bad_Name")
	if r := e.do(req{method: "POST", path: dsPath + "?dryRun=All", body: toJSON(t, bad)}); r.code != 422 {
		t.Errorf("dry-run invalid create: %d", r.code)
	}

	ds := e.createDS(newDS("agent"))
	upd := ds.DeepCopy()
	upd.Labels["x"] = "y"
	e.do(req{method: "PUT", path: dsPath + "/agent?dryRun=All", body: toJSON(t, upd)}).must(t, http.StatusOK, &out)
	if out.Labels["x"] != "y" {
		t.Errorf("dry-run update result lacks the change")
	}
	e.do(req{method: "PATCH", path: dsPath + "/agent?dryRun=All", contentType: "application/merge-patch+json",
		body: `{"metadata":{"labels":{"p":"q"}}}`}).must(t, http.StatusOK, &out)
	if out.Labels["p"] != "q" {
		t.Errorf("dry-run patch result lacks the change")
	}
	e.do(req{method: "DELETE", path: dsPath + "/agent?dryRun=All"}).must(t, http.StatusOK, nil)
	e.do(req{method: "DELETE", path: dsPath + "?dryRun=All"}).must(t, http.StatusOK, nil)

	var now appsv1.DaemonSet
	e.get(dsPath+"/agent").must(t, http.StatusOK, &now)
	if now.ResourceVersion != ds.ResourceVersion || len(now.Labels) != len(ds.Labels) {
		t.Errorf("dry runs changed the stored object: rv %s -> %s labels %v", ds.ResourceVersion, now.ResourceVersion, now.Labels)
	}
}

// TestGenerateName: a name is made from generateName with a random suffix.
func TestGenerateName(t *testing.T) {
	e := newEnv(t)
	ds := newDS("")
	ds.GenerateName = "agent-"
	a := e.createDS(ds)
	b := e.createDS(ds)
	if !strings.HasPrefix(a.Name, "agent-") || len(a.Name) != len("agent-")+5 || a.Name == b.Name {
		t.Errorf("generated names %q, %q", a.Name, b.Name)
	}
}

// TestFieldValidationWarn: unknown fields are accepted with a Warning header
// by default and with Ignore silently.
func TestFieldValidationWarn(t *testing.T) {
	e := newEnv(t)
	body := `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"w"},"spec":{"bogus":1,` +
		`"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}}`
	r := e.do(req{method: "POST", path: dsPath, body: body}).must(t, http.StatusCreated, nil)
	if w := r.header.Get("Warning"); !strings.Contains(w, "unknown field") {
		t.Errorf("Warning header %q", w)
	}
	body = strings.Replace(body, `"name":"w"`, `"name":"i"`, 1)
	r = e.do(req{method: "POST", path: dsPath + "?fieldValidation=Ignore", body: body}).must(t, http.StatusCreated, nil)
	if w := r.header.Get("Warning"); w != "" {
		t.Errorf("Ignore gave a warning %q", w)
	}
}

// TestClusterScopedAndNamespaces covers nodes and namespaces, and namespace
// deletion taking its objects with it.
func TestClusterScopedAndNamespaces(t *testing.T) {
	e := newEnv(t)
	node := `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","labels":{"zone":"a"}}}`
	var n corev1.Node
	e.do(req{method: "POST", path: "/api/v1/nodes", body: node}).must(t, http.StatusCreated, &n)
	if n.Namespace != "" || n.Kind != "Node" {
		t.Fatalf("node: ns %q kind %q", n.Namespace, n.Kind)
	}
	var nodes corev1.NodeList
	e.get("/api/v1/nodes?fieldSelector=metadata.name%3Dn1").must(t, http.StatusOK, &nodes)
	if len(nodes.Items) != 1 || nodes.Kind != "NodeList" {
		t.Fatalf("node list: %d %s", len(nodes.Items), nodes.Kind)
	}

	e.do(req{method: "POST", path: "/api/v1/namespaces", body: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team"}}`}).
		must(t, http.StatusCreated, nil)
	e.do(req{method: "POST", path: "/apis/apps/v1/namespaces/team/daemonsets", body: toJSON(t, newDS("ds1"))}).
		must(t, http.StatusCreated, nil)
	var nss corev1.NamespaceList
	e.get("/api/v1/namespaces").must(t, http.StatusOK, &nss)
	if len(nss.Items) != 4 {
		t.Errorf("%d namespaces, want 4", len(nss.Items))
	}
	e.do(req{method: "DELETE", path: "/api/v1/namespaces/team"}).must(t, http.StatusOK, nil)
	if r := e.get("/api/v1/namespaces/team"); r.code != http.StatusNotFound {
		t.Errorf("namespace still there: %d", r.code)
	}
	if r := e.get("/apis/apps/v1/namespaces/team/daemonsets/ds1"); r.code != http.StatusNotFound {
		t.Errorf("daemonset in deleted namespace still there: %d", r.code)
	}
}

// TestDeleteCollection deletes by label selector.
func TestDeleteCollection(t *testing.T) {
	e := newEnv(t)
	for i := range 3 {
		p := newPod("p"+strconv.Itoa(i), "")
		if i == 2 {
			p.Labels = map[string]string{"app": "keep"}
		}
		e.createPod(p)
	}
	var deleted corev1.PodList
	e.do(req{method: "DELETE", path: podsPath + "?labelSelector=app%3Dp"}).must(t, http.StatusOK, &deleted)
	if len(deleted.Items) != 2 || deleted.Kind != "PodList" {
		t.Fatalf("deleted %d (%s), want 2", len(deleted.Items), deleted.Kind)
	}
	var left corev1.PodList
	e.get(podsPath).must(t, http.StatusOK, &left)
	if len(left.Items) != 1 || left.Items[0].Name != "p2" {
		t.Fatalf("left: %+v", left.Items)
	}
}

// TestOpenEndpoints: health and version need no token; /version reports 1.32.
func TestOpenEndpoints(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"/healthz", "/livez", "/readyz"} {
		r := e.do(req{method: "GET", path: p, token: "-"})
		if r.code != 200 || string(r.body) != "ok" {
			t.Errorf("%s: %d %q", p, r.code, r.body)
		}
	}
	var v map[string]string
	e.do(req{method: "GET", path: "/version", token: "-"}).must(t, http.StatusOK, &v)
	if v["major"] != "1" || v["minor"] != "32" || v["gitVersion"] != "v1.32.0-everynode" {
		t.Errorf("version %v", v)
	}
	if r := e.do(req{method: "GET", path: "/metrics", token: "-"}); r.code != http.StatusUnauthorized {
		t.Errorf("/metrics without token: %d", r.code)
	}
}

// TestAuthorizer: the hook sees the request attributes and can forbid;
// system:masters bypasses it.
func TestAuthorizer(t *testing.T) {
	var seen []Attributes
	e := newEnv(t, func(c *Config) {
		c.Authorizer = authorizerFunc(func(a Attributes) error {
			seen = append(seen, a)
			if a.Verb == "delete" {
				return errors.New("deletes are not allowed here")
			}
			return nil
		})
	})
	e.createDS(newDS("agent")) // admin: not asked
	if len(seen) != 0 {
		t.Fatalf("masters went through the authorizer: %+v", seen)
	}
	r := e.do(req{method: "GET", path: dsPath + "/agent/status", token: userToken}).must(t, http.StatusOK, nil)
	_ = r
	if len(seen) != 1 || seen[0].User.Name != "someone" || seen[0].Verb != "get" || seen[0].Resource != "daemonsets" ||
		seen[0].Subresource != "status" || seen[0].Namespace != "default" || seen[0].Name != "agent" || seen[0].APIGroup != "apps" {
		t.Fatalf("attributes %+v", seen)
	}
	r = e.do(req{method: "DELETE", path: dsPath + "/agent", token: userToken})
	if st := r.status(t); r.code != http.StatusForbidden || st.Reason != metav1.StatusReasonForbidden {
		t.Fatalf("forbidden delete: %d %s", r.code, r.body)
	}
}

// TestUpdateAdmitter: an authorizer's AdmitUpdate sees, inside every kind of
// update (PUT, merge patch, server-side apply, dry run), the stored object
// the write replaces; its refusal is a 403 that changes nothing; masters
// bypass it.
func TestUpdateAdmitter(t *testing.T) {
	admitter := &lockAdmitter{}
	e := newEnv(t, func(c *Config) { c.Authorizer = admitter })
	e.createDS(newDS("agent"))
	path := dsPath + "/agent"
	stored := func() *appsv1.DaemonSet {
		var out appsv1.DaemonSet
		e.get(path).must(t, http.StatusOK, &out)
		return &out
	}
	put := func(labels map[string]string) req {
		cur := stored()
		cur.Labels = labels
		return req{method: "PUT", path: path, body: toJSON(t, cur), token: userToken}
	}
	writes := []struct {
		what, verb string
		r          func() req
	}{
		{"put", "update", func() req { return put(map[string]string{"app": "agent", "w": "put"}) }},
		{"merge patch", "patch", func() req {
			return req{method: "PATCH", path: path, contentType: "application/merge-patch+json", body: `{"metadata":{"labels":{"w":"patch"}}}`, token: userToken}
		}},
		{"apply", "patch", func() req {
			return req{method: "PATCH", path: path + "?fieldManager=t", contentType: applyType, body: appliedDS("busybox:1.37"), token: userToken}
		}},
		{"dry-run patch", "patch", func() req {
			return req{method: "PATCH", path: path + "?dryRun=All", contentType: "application/merge-patch+json", body: `{"metadata":{"labels":{"w":"dry"}}}`, token: userToken}
		}},
	}
	for _, w := range writes {
		before := stored()
		admitter.seenRV, admitter.locked = "", false
		e.do(w.r()).must(t, http.StatusOK, nil)
		if admitter.seenRV != before.ResourceVersion || admitter.seenVerb != w.verb {
			t.Errorf("%s: admitted %s of resourceVersion %q, want the stored %q", w.what, admitter.seenVerb, admitter.seenRV, before.ResourceVersion)
		}
		before = stored()
		admitter.locked = true
		r := e.do(w.r())
		if st := r.status(t); r.code != http.StatusForbidden || st.Reason != metav1.StatusReasonForbidden || !strings.Contains(st.Message, "locked") {
			t.Errorf("%s while locked: %d %s, want 403 naming the lock", w.what, r.code, r.body)
		}
		if after := stored(); after.ResourceVersion != before.ResourceVersion {
			t.Errorf("%s: a refused write changed the object (resourceVersion %s → %s)", w.what, before.ResourceVersion, after.ResourceVersion)
		}
	}
	admitter.locked, admitter.seenRV = true, ""
	var out appsv1.DaemonSet
	e.do(req{method: "PATCH", path: path, contentType: "application/merge-patch+json", body: `{"metadata":{"labels":{"w":"admin"}}}`}).must(t, http.StatusOK, &out)
	if admitter.seenRV != "" || out.Labels["w"] != "admin" {
		t.Errorf("a master's patch went through the admitter (saw %q) or failed: %v", admitter.seenRV, out.Labels)
	}
}

// lockAdmitter allows every request and, while locked, refuses every update.
type lockAdmitter struct {
	locked           bool
	seenRV, seenVerb string
}

func (*lockAdmitter) Authorize(context.Context, Attributes) error { return nil }

func (l *lockAdmitter) AdmitUpdate(_ context.Context, a Attributes, old resources.Object) error {
	l.seenRV, l.seenVerb = old.GetResourceVersion(), a.Verb
	if l.locked {
		return errors.New("the object is locked")
	}
	return nil
}

type authorizerFunc func(Attributes) error

func (f authorizerFunc) Authorize(_ context.Context, a Attributes) error { return f(a) }
