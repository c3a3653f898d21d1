package apiserver_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// The contract test: one table of requests goes to the three implementations
// of client.Interface — client/fake, the in-process client over a real API
// server on a real store, and the HTTP client against the same server over
// HTTPS — and every answer must be the same, after normalising only what
// legitimately differs (uids, resourceVersion values, timestamps, the random
// suffix of generated names).

// contractManager is the field manager of every write, so managedFields do
// not differ by transport (the server otherwise names the user or the
// User-Agent).
const contractManager = "contract"

var wo = client.WriteOptions{FieldManager: contractManager}

// outcome is one normalised answer: an error's status or an object's JSON.
type outcome struct {
	Err    *metav1.Status `json:"err,omitempty"`
	Object any            `json:"object,omitempty"`
}

// uidPattern matches the uids of all three implementations.
var uidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// recorder collects a step's outcomes on one implementation.
type recorder struct {
	t   testing.TB
	ns  string // the namespace this run writes in, normalised to "<ns>"
	out []outcome
}

// obj records the answer of a call returning one object and returns the
// object (nil on error) for later calls of the step.
func (r *recorder) obj(o client.Object, err error) client.Object {
	if err != nil {
		r.add(outcome{Err: errStatus(err)})
		return nil
	}
	r.add(outcome{Object: normalise(r.t, o)})
	return o
}

// list records the answer of a List.
func (r *recorder) list(items []client.Object, _ string, err error) {
	if err != nil {
		r.add(outcome{Err: errStatus(err)})
		return
	}
	objs := make([]any, len(items))
	for i, it := range items {
		objs[i] = normalise(r.t, it)
	}
	r.add(outcome{Object: objs})
}

// add records o with the run's namespace (and the names derived from it)
// replaced by "<ns>".
func (r *recorder) add(o outcome) {
	r.t.Helper()
	data, err := json.Marshal(o)
	if err != nil {
		r.t.Fatalf("record: %v", err)
	}
	data = []byte(strings.ReplaceAll(string(data), r.ns, "<ns>"))
	data = uidPattern.ReplaceAll(data, []byte("<uid>")) // in messages

	var n outcome
	if err := json.Unmarshal(data, &n); err != nil {
		r.t.Fatalf("record: %v", err)
	}
	r.out = append(r.out, n)
}

// errStatus is the comparable part of an error: code, reason, details
// (kind, name, causes) and message.
func errStatus(err error) *metav1.Status {
	var st metav1.Status
	if s, ok := err.(apierrors.APIStatus); ok {
		st = s.Status()
	} else {
		st = metav1.Status{Code: -1, Message: "not a status error: " + err.Error()}
	}
	return &metav1.Status{Code: st.Code, Reason: st.Reason, Details: st.Details, Message: st.Message}
}

// normalise renders o as JSON with the values that legitimately differ
// between implementations replaced by placeholders.
func normalise(t testing.TB, o client.Object) any {
	t.Helper()
	c := o.DeepCopyObject().(client.Object)
	if c.GetUID() != "" {
		c.SetUID("<uid>")
	}
	if c.GetResourceVersion() != "" {
		c.SetResourceVersion("<rv>")
	}
	if ts := c.GetCreationTimestamp(); !ts.IsZero() {
		c.SetCreationTimestamp(metav1.NewTime(time.Unix(1, 0).UTC()))
	}
	if c.GetDeletionTimestamp() != nil {
		c.SetDeletionTimestamp(ptr.To(metav1.NewTime(time.Unix(2, 0).UTC())))
	}
	if g := c.GetGenerateName(); g != "" && strings.HasPrefix(c.GetName(), g) {
		c.SetName(g + "<random>")
	}
	mf := c.GetManagedFields()
	for i := range mf {
		if mf[i].Time != nil {
			mf[i].Time = ptr.To(metav1.NewTime(time.Unix(3, 0).UTC()))
		}
	}
	c.SetManagedFields(mf)
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatalf("normalise: %v", err)
	}
	var m any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("normalise: %v", err)
	}
	return m
}

// contractStep is one row of the table: calls on c, recorded in r. Steps run
// in order on each implementation, so later steps see earlier writes.
type contractStep struct {
	name string
	run  func(ctx context.Context, c client.Interface, r *recorder)
}

func testDS(ns, name, image string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"team": "a"}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}},
			},
		},
	}
}

func testPod(ns, name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
}

func getDS(ctx context.Context, c client.Interface, ns, name string) *appsv1.DaemonSet {
	o, err := c.Get(ctx, resources.DaemonSets, ns, name)
	if err != nil {
		return testDS(ns, name, "missing")
	}
	return o.(*appsv1.DaemonSet)
}

// contractTable is the table of requests.
func contractTable() []contractStep {
	return []contractStep{
		{"create valid", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Create(ctx, testDS(r.ns, "web", "nginx:1"), wo))
		}},
		{"create invalid", func(ctx context.Context, c client.Interface, r *recorder) {
			bad := testDS(r.ns, "bad", "")
			bad.Spec.Selector.MatchLabels = map[string]string{"app": "other"}
			r.obj(c.Create(ctx, bad, wo))
		}},
		{"create invalid name", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Create(ctx, testDS(r.ns, "Bad_Name", "nginx:1"), wo))
		}},
		{"create duplicate", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Create(ctx, testDS(r.ns, "web", "nginx:1"), wo))
		}},
		{"create with generateName", func(ctx context.Context, c client.Interface, r *recorder) {
			p := testPod(r.ns, "", "", nil)
			p.GenerateName = "gen-"
			r.obj(c.Create(ctx, p, wo))
		}},
		{"create without namespace", func(ctx context.Context, c client.Interface, r *recorder) {
			p := testPod(r.ns, r.ns+"-nons", "", nil)
			p.Namespace = ""
			r.obj(c.Create(ctx, p, wo))
		}},
		{"create cluster-scoped with namespace", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.ns + "-n1", Namespace: r.ns}}, wo))
		}},
		{"dry-run create", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Create(ctx, testDS(r.ns, "dry", "nginx:1"), client.WriteOptions{DryRun: true, FieldManager: contractManager}))
			r.obj(c.Get(ctx, resources.DaemonSets, r.ns, "dry"))
		}},
		{"get missing", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Get(ctx, resources.DaemonSets, r.ns, "nope"))
		}},
		{"update unchanged spec keeps generation", func(ctx context.Context, c client.Interface, r *recorder) {
			ds := getDS(ctx, c, r.ns, "web")
			ds.Labels["tier"] = "front"
			r.obj(c.Update(ctx, ds, wo))
		}},
		{"update spec change bumps generation", func(ctx context.Context, c client.Interface, r *recorder) {
			ds := getDS(ctx, c, r.ns, "web")
			ds.Spec.Template.Spec.Containers[0].Image = "nginx:2"
			r.obj(c.Update(ctx, ds, wo))
		}},
		{"update with stale resourceVersion", func(ctx context.Context, c client.Interface, r *recorder) {
			stale := getDS(ctx, c, r.ns, "web")
			fresh := stale.DeepCopy()
			fresh.Labels["x"] = "1"
			r.obj(c.Update(ctx, fresh, wo))
			stale.Labels["x"] = "2"
			r.obj(c.Update(ctx, stale, wo))
		}},
		{"update invalid", func(ctx context.Context, c client.Interface, r *recorder) {
			ds := getDS(ctx, c, r.ns, "web")
			ds.Spec.Selector.MatchLabels = map[string]string{"app": "changed"}
			r.obj(c.Update(ctx, ds, wo))
		}},
		{"update missing", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Update(ctx, testDS(r.ns, "ghost", "nginx:1"), wo))
		}},
		{"status update keeps generation and spec", func(ctx context.Context, c client.Interface, r *recorder) {
			ds := getDS(ctx, c, r.ns, "web")
			ds.Status.DesiredNumberScheduled = 3
			ds.Status.ObservedGeneration = ds.Generation
			ds.Spec.Template.Spec.Containers[0].Image = "ignored:9"
			r.obj(c.UpdateStatus(ctx, ds, wo))
		}},
		{"update cannot change status", func(ctx context.Context, c client.Interface, r *recorder) {
			ds := getDS(ctx, c, r.ns, "web")
			ds.Status.DesiredNumberScheduled = 99
			r.obj(c.Update(ctx, ds, wo))
		}},
		{"strategic merge patch", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Patch(ctx, resources.DaemonSets, r.ns, "web", types.StrategicMergePatchType,
				[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"nginx:3"}]}}}}`), wo, ""))
		}},
		{"merge patch", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Patch(ctx, resources.DaemonSets, r.ns, "web", types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"tier":null,"merged":"yes"}}}`), wo, ""))
		}},
		{"JSON patch", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Patch(ctx, resources.DaemonSets, r.ns, "web", types.JSONPatchType,
				[]byte(`[{"op":"replace","path":"/spec/minReadySeconds","value":5}]`), wo, ""))
		}},
		{"JSON patch that does not apply", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Patch(ctx, resources.DaemonSets, r.ns, "web", types.JSONPatchType,
				[]byte(`[{"op":"replace","path":"/spec/nothing/here","value":5}]`), wo, ""))
		}},
		{"malformed patch", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Patch(ctx, resources.DaemonSets, r.ns, "web", types.MergePatchType, []byte(`{"metadata":`), wo, ""))
		}},
		{"patch to an invalid object", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Patch(ctx, resources.DaemonSets, r.ns, "web", types.MergePatchType,
				[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":""}]}}}}`), wo, ""))
		}},
		{"patch with stale resourceVersion", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Patch(ctx, resources.DaemonSets, r.ns, "web", types.MergePatchType,
				[]byte(`{"metadata":{"resourceVersion":"1","labels":{"y":"1"}}}`), wo, ""))
		}},
		{"status patch", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Patch(ctx, resources.DaemonSets, r.ns, "web", types.MergePatchType,
				[]byte(`{"status":{"numberReady":2},"spec":{"minReadySeconds":50}}`), wo, "status"))
		}},
		{"patch missing", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Patch(ctx, resources.DaemonSets, r.ns, "ghost", types.MergePatchType, []byte(`{}`), wo, ""))
		}},
		{"server-side apply", func(ctx context.Context, c client.Interface, r *recorder) {
			body := `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"applied","namespace":"` + r.ns + `"},` +
				`"spec":{"selector":{"matchLabels":{"app":"applied"}},"template":{"metadata":{"labels":{"app":"applied"}},` +
				`"spec":{"containers":[{"name":"c","image":"a:1"}]}}}}`
			r.obj(c.Patch(ctx, resources.DaemonSets, r.ns, "applied", types.ApplyYAMLPatchType, []byte(body), wo, ""))
			r.obj(c.Patch(ctx, resources.DaemonSets, r.ns, "applied", types.ApplyYAMLPatchType,
				[]byte(strings.Replace(body, "a:1", "a:2", 1)), wo, ""))
			r.obj(c.Patch(ctx, resources.DaemonSets, r.ns, "applied", types.ApplyYAMLPatchType,
				[]byte(strings.Replace(body, "a:1", "a:3", 1)), client.WriteOptions{FieldManager: "other"}, ""))
		}},
		{"pods for the selectors", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Create(ctx, testPod(r.ns, "p1", "n1", map[string]string{"app": "a"}), wo))
			r.obj(c.Create(ctx, testPod(r.ns, "p2", "n2", map[string]string{"app": "a"}), wo))
			r.obj(c.Create(ctx, testPod(r.ns, "p3", "n1", map[string]string{"app": "b"}), wo))
		}},
		{"list with label selector", func(ctx context.Context, c client.Interface, r *recorder) {
			r.list(c.List(ctx, resources.Pods, r.ns, client.ListOptions{LabelSelector: "app=a"}))
		}},
		{"list with field selector spec.nodeName", func(ctx context.Context, c client.Interface, r *recorder) {
			r.list(c.List(ctx, resources.Pods, r.ns, client.ListOptions{FieldSelector: "spec.nodeName=n1"}))
			r.list(c.List(ctx, resources.Pods, "", client.ListOptions{FieldSelector: "spec.nodeName=n1,metadata.name!=p1,metadata.namespace=" + r.ns}))
			r.list(c.List(ctx, resources.Pods, "", client.ListOptions{FieldSelector: "metadata.namespace=" + r.ns, LabelSelector: "app in (a,b)"}))
		}},
		{"list with unsupported field selector", func(ctx context.Context, c client.Interface, r *recorder) {
			r.list(c.List(ctx, resources.Pods, r.ns, client.ListOptions{FieldSelector: "spec.restartPolicy=Always"}))
		}},
		{"list with bad label selector", func(ctx context.Context, c client.Interface, r *recorder) {
			r.list(c.List(ctx, resources.Pods, r.ns, client.ListOptions{LabelSelector: "app in ("}))
		}},
		{"pod spec is immutable", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Patch(ctx, resources.Pods, r.ns, "p1", types.MergePatchType, []byte(`{"spec":{"nodeName":"n9"}}`), wo, ""))
		}},
		{"delete unbound pod", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Delete(ctx, resources.Pods, "default", r.ns+"-nons", metav1.DeleteOptions{}))
			r.obj(c.Get(ctx, resources.Pods, "default", r.ns+"-nons"))
		}},
		{"delete bound pod waits for its grace period", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Delete(ctx, resources.Pods, r.ns, "p1", metav1.DeleteOptions{}))
			r.obj(c.Get(ctx, resources.Pods, r.ns, "p1"))
			r.obj(c.Delete(ctx, resources.Pods, r.ns, "p1", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
			r.obj(c.Get(ctx, resources.Pods, r.ns, "p1"))
		}},
		{"dry-run delete", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Delete(ctx, resources.Pods, r.ns, "p3", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}, GracePeriodSeconds: ptr.To[int64](0)}))
			r.obj(c.Get(ctx, resources.Pods, r.ns, "p3"))
		}},
		{"delete with preconditions", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Delete(ctx, resources.Pods, r.ns, "p3", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(types.UID("other"))}}))
		}},
		{"delete with orphan propagation", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Delete(ctx, resources.DaemonSets, r.ns, "applied", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}))
			r.obj(c.Patch(ctx, resources.DaemonSets, r.ns, "applied", types.JSONPatchType,
				[]byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), wo, ""))
			r.obj(c.Get(ctx, resources.DaemonSets, r.ns, "applied"))
		}},
		{"delete with finalizer", func(ctx context.Context, c client.Interface, r *recorder) {
			ds := testDS(r.ns, "fin", "nginx:1")
			ds.Finalizers = []string{"example.com/hold"}
			r.obj(c.Create(ctx, ds, wo))
			r.obj(c.Delete(ctx, resources.DaemonSets, r.ns, "fin", metav1.DeleteOptions{}))
			held := getDS(ctx, c, r.ns, "fin")
			held.Spec.MinReadySeconds = 7 // a spec change while being deleted
			r.obj(c.Update(ctx, held, wo))
			held = getDS(ctx, c, r.ns, "fin")
			held.Finalizers = nil
			r.obj(c.Update(ctx, held, wo))
			r.obj(c.Get(ctx, resources.DaemonSets, r.ns, "fin"))
		}},
		{"delete", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Delete(ctx, resources.DaemonSets, r.ns, "web", metav1.DeleteOptions{}))
			r.obj(c.Get(ctx, resources.DaemonSets, r.ns, "web"))
		}},
		{"delete missing", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Delete(ctx, resources.DaemonSets, r.ns, "web", metav1.DeleteOptions{}))
		}},
		{"delete with invalid propagation policy", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Delete(ctx, resources.Pods, r.ns, "p2", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletionPropagation("Sideways"))}))
		}},
		{"secret: stringData merged into data, type defaulted, selectable", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "s"},
				Data: map[string][]byte{"a": []byte("1")}, StringData: map[string]string{"a": "2", "b": "3"}}, wo))
			r.list(c.List(ctx, resources.Secrets, r.ns, client.ListOptions{FieldSelector: "type=Opaque"}))
			r.list(c.List(ctx, resources.ConfigMaps, r.ns, client.ListOptions{FieldSelector: "type=Opaque"}))
		}},
		{"configmap over 1 MiB", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "big"},
				Data: map[string]string{"a": strings.Repeat("x", 1<<20+1)}}, wo))
		}},
		{"immutable configmap changed", func(ctx context.Context, c client.Interface, r *recorder) {
			o := r.obj(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "frozen"},
				Data: map[string]string{"a": "1"}, Immutable: ptr.To(true)}, wo))
			if o == nil {
				return
			}
			cm := o.(*corev1.ConfigMap)
			cm.Data["a"] = "2"
			cm.Immutable = nil
			r.obj(c.Update(ctx, cm, wo))
			r.obj(c.Patch(ctx, resources.ConfigMaps, r.ns, "frozen", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), wo, ""))
		}},
		{"delete an immortal namespace", func(ctx context.Context, c client.Interface, r *recorder) {
			r.obj(c.Delete(ctx, resources.Namespaces, "", "default", metav1.DeleteOptions{}))
		}},
	}
}

// runContract runs the table on c and returns each step's outcomes.
func runContract(t testing.TB, ctx context.Context, c client.Interface, ns string) [][]outcome {
	t.Helper()
	if _, err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, wo); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	table := contractTable()
	out := make([][]outcome, len(table))
	for i, s := range table {
		r := &recorder{t: t, ns: ns}
		s.run(ctx, c, r)
		out[i] = r.out
	}
	return out
}

// contractDiffs compares two implementations' outcomes step by step and
// describes every difference; none means they agree.
func contractDiffs(aName string, a [][]outcome, bName string, b [][]outcome) []string {
	table := contractTable()
	var diffs []string
	for i := range table {
		if i >= len(a) || i >= len(b) {
			diffs = append(diffs, fmt.Sprintf("%s: missing outcomes", table[i].name))
			continue
		}
		if reflect.DeepEqual(a[i], b[i]) {
			continue
		}
		ja, _ := json.MarshalIndent(a[i], "", "  ")
		jb, _ := json.MarshalIndent(b[i], "", "  ")
		diffs = append(diffs, fmt.Sprintf("%s:\n%s:\n%s\n%s:\n%s", table[i].name, aName, ja, bName, jb))
	}
	return diffs
}

// tokens is the contract server's authenticator: one admin token.
type tokens struct{}

func (tokens) AuthenticateToken(token string) (string, []string, bool) {
	return "admin", []string{"system:masters"}, token == "admin-token"
}

// contractServer starts an API server on a real store (embedded etcd in a
// temporary directory) and returns the in-process client and an HTTPS client.
func contractServer(t *testing.T, ctx context.Context) (local, overHTTP client.Interface) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(ctx, store.Config{DataDir: t.TempDir(), CompactInterval: -1, Logger: log})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	s, err := apiserver.New(apiserver.Config{Store: st, Authenticator: tokens{}, Logger: log})
	if err != nil {
		t.Fatalf("apiserver.New: %v", err)
	}
	if err := s.EnsureNamespaces(ctx, "default", "kube-system", "kube-public"); err != nil {
		t.Fatalf("EnsureNamespaces: %v", err)
	}
	srv := httptest.NewTLSServer(s.Handler())
	t.Cleanup(func() {
		s.Stop()
		srv.Close()
	})
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	h, err := client.NewHTTP(client.Config{Server: srv.URL, CAPEM: ca, Token: "admin-token", ResourceFor: resources.ForObject})
	if err != nil {
		t.Fatalf("client.NewHTTP: %v", err)
	}
	t.Cleanup(h.Close)
	return apiserver.NewLocalClient(s, "admin", "system:masters"), h
}

func TestContract(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	local, overHTTP := contractServer(t, ctx)
	impls := []struct {
		name string
		c    client.Interface
	}{
		{"local", local},
		{"http", overHTTP},
		{"fake", fake.New()},
	}
	var want [][]outcome
	for i, im := range impls {
		// local and http share the server: each run writes in a namespace
		// of its own.
		got := runContract(t, ctx, im.c, "contract-"+im.name)
		if i == 0 {
			want = got
			continue
		}
		for _, d := range contractDiffs(impls[0].name, want, im.name, got) {
			t.Errorf("%s differs from %s in %s", im.name, impls[0].name, d)
		}
	}
}

// lenient is a deliberately divergent implementation: the fake as it was
// before it ran the server's rules, bumping generation on every update
// and accepting field selectors on any field. The comparison must catch it.
type lenient struct{ *fake.Client }

func (l lenient) Update(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error) {
	out, err := l.Client.Update(ctx, obj, opts)
	if err == nil {
		out.SetGeneration(out.GetGeneration() + 1)
	}
	return out, err
}

func (l lenient) List(ctx context.Context, r *resources.Resource, namespace string, opts client.ListOptions) ([]client.Object, string, error) {
	if strings.Contains(opts.FieldSelector, "restartPolicy") {
		return nil, "1", nil
	}
	return l.Client.List(ctx, r, namespace, opts)
}

// TestContractCatchesDivergence: the comparison reports a divergent
// implementation in exactly the steps where it diverges.
func TestContractCatchesDivergence(t *testing.T) {
	ctx := context.Background()
	want := runContract(t, ctx, fake.New(), "contract-a")
	if d := contractDiffs("fake", want, "fake", runContract(t, ctx, fake.New(), "contract-b")); len(d) != 0 {
		t.Fatalf("two fakes differ:\n%s", strings.Join(d, "\n"))
	}
	diffs := contractDiffs("fake", want, "lenient", runContract(t, ctx, lenient{fake.New()}, "contract-c"))
	for _, step := range []string{"update unchanged spec keeps generation", "list with unsupported field selector"} {
		found := false
		for _, d := range diffs {
			found = found || strings.HasPrefix(d, step+":")
		}
		if !found {
			t.Errorf("the divergence in %q was not reported; diffs:\n%s", step, strings.Join(diffs, "\n"))
		}
	}
}
