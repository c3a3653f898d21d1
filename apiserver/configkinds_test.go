package apiserver

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

const (
	cmPath     = "/api/v1/namespaces/default/configmaps"
	secretPath = "/api/v1/namespaces/default/secrets"
	saPath     = "/api/v1/namespaces/default/serviceaccounts"
)

// TestConfigKindsServed: ConfigMaps, Secrets and ServiceAccounts are in
// discovery with kube-apiserver's short names and no subresources, in the
// core OpenAPI v3 document with their group-version-kind and a PATCH
// operation each, and print kube-apiserver's table columns.
func TestConfigKindsServed(t *testing.T) {
	e := newEnv(t)
	var list metav1.APIResourceList
	e.get("/api/v1").must(t, http.StatusOK, &list)
	want := map[string][]string{"configmaps": {"cm"}, "secrets": nil, "serviceaccounts": {"sa"}}
	for _, r := range list.APIResources {
		for name, short := range want {
			if strings.HasPrefix(r.Name, name+"/") {
				t.Errorf("subresource %s served", r.Name)
			}
			if r.Name != name {
				continue
			}
			if !slices.Equal(r.ShortNames, short) || !r.Namespaced || len(r.Verbs) != 8 {
				t.Errorf("%s: %+v", name, r)
			}
			delete(want, name)
		}
	}
	if len(want) > 0 {
		t.Errorf("not in discovery: %v", want)
	}

	var root struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	e.get("/openapi/v3").must(t, http.StatusOK, &root)
	var doc struct {
		Paths      map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	e.get(root.Paths["api/v1"].ServerRelativeURL).must(t, http.StatusOK, &doc)
	for kind, path := range map[string]string{"ConfigMap": "configmaps", "Secret": "secrets", "ServiceAccount": "serviceaccounts"} {
		gvk := toJSONString(t, doc.Components.Schemas["io.k8s.api.core.v1."+kind]["x-kubernetes-group-version-kind"])
		if gvk != fmt.Sprintf(`[{"group":"","kind":"%s","version":"v1"}]`, kind) {
			t.Errorf("%s GVK %s", kind, gvk)
		}
		if doc.Paths["/api/v1/namespaces/{namespace}/"+path+"/{name}"]["patch"] == nil {
			t.Errorf("no PATCH operation for %s", path)
		}
	}
	if data := doc.Components.Schemas["io.k8s.api.core.v1.Secret"]["properties"].(map[string]any)["data"]; !strings.Contains(toJSONString(t, data), `"format":"byte"`) {
		t.Errorf("Secret data is not base64 bytes: %s", toJSONString(t, data))
	}

	e.do(req{method: "POST", path: cmPath, body: `{"metadata":{"name":"cm"},"data":{"a":"1"},"binaryData":{"b":"AA=="}}`}).must(t, http.StatusCreated, nil)
	e.do(req{method: "POST", path: secretPath, body: `{"metadata":{"name":"s"},"type":"kubernetes.io/basic-auth","stringData":{"username":"u"}}`}).must(t, http.StatusCreated, nil)
	e.do(req{method: "POST", path: saPath, body: `{"metadata":{"name":"sa"},"secrets":[{"name":"t"}]}`}).must(t, http.StatusCreated, nil)
	for _, tt := range []struct {
		path  string
		cols  []string
		cells []any
	}{
		{cmPath, []string{"Name", "Data", "Age"}, []any{"cm", 2.0}},
		{secretPath, []string{"Name", "Type", "Data", "Age"}, []any{"s", "kubernetes.io/basic-auth", 1.0}},
		{saPath, []string{"Name", "Secrets", "Age"}, []any{"sa", 1.0}},
	} {
		tbl := e.getTable(tt.path, tableAccept)
		cols, wide := columnNames(tbl)
		if !slices.Equal(cols, tt.cols) || wide != nil || len(tbl.Rows) != 1 {
			t.Fatalf("%s: columns %v wide %v, %d rows", tt.path, cols, wide, len(tbl.Rows))
		}
		if got := tbl.Rows[0].Cells[:len(tt.cells)]; toJSON(t, got) != toJSON(t, tt.cells) {
			t.Errorf("%s: cells %v, want %v", tt.path, got, tt.cells)
		}
	}
}

// TestSecretWrites: stringData is merged into data and never stored or
// returned, the type defaults to Opaque, and the type is a field selector.
func TestSecretWrites(t *testing.T) {
	e := newEnv(t)
	var s corev1.Secret
	e.do(req{method: "POST", path: secretPath,
		body: `{"metadata":{"name":"s"},"data":{"a":"ZnJvbSBkYXRh","b":"a2VwdA=="},"stringData":{"a":"from stringData","c":"new"}}`}).
		must(t, http.StatusCreated, &s)
	check := func(how string, s corev1.Secret) {
		t.Helper()
		if s.Type != corev1.SecretTypeOpaque || s.StringData != nil ||
			string(s.Data["a"]) != "from stringData" || string(s.Data["b"]) != "kept" || string(s.Data["c"]) != "new" {
			t.Errorf("%s: type %q data %q stringData %v", how, s.Type, s.Data, s.StringData)
		}
	}
	check("create", s)
	r := e.get(secretPath+"/s").must(t, http.StatusOK, &s)
	check("get", s)
	if strings.Contains(string(r.body), "stringData") {
		t.Errorf("stringData returned: %s", r.body)
	}
	// A patch of stringData lands in data.
	e.do(req{method: "PATCH", path: secretPath + "/s", contentType: "application/merge-patch+json", body: `{"stringData":{"b":"patched"}}`}).
		must(t, http.StatusOK, &s)
	if string(s.Data["b"]) != "patched" || s.StringData != nil {
		t.Errorf("patch: data %q stringData %v", s.Data, s.StringData)
	}

	e.do(req{method: "POST", path: secretPath, body: `{"metadata":{"name":"tls"},"type":"kubernetes.io/tls","data":{"tls.crt":"","tls.key":""}}`}).
		must(t, http.StatusCreated, nil)
	names := func(sel string) []string {
		var l corev1.SecretList
		e.get(secretPath+"?fieldSelector="+sel).must(t, http.StatusOK, &l)
		var out []string
		for _, it := range l.Items {
			out = append(out, it.Name)
		}
		return out
	}
	if got := names("type%3Dkubernetes.io%2Ftls"); !slices.Equal(got, []string{"tls"}) {
		t.Errorf("type=kubernetes.io/tls: %v", got)
	}
	if got := names("type%21%3DOpaque,metadata.name%21%3Dx"); !slices.Equal(got, []string{"tls"}) {
		t.Errorf("type!=Opaque: %v", got)
	}
	if st := e.get(cmPath + "?fieldSelector=type%3DOpaque").status(t); st.Code != http.StatusBadRequest || st.Message != "field label not supported: type" {
		t.Errorf("configmaps by type: %+v", st)
	}
}

// TestBadConfigInput: a Secret whose data is not base64 (400), a ConfigMap
// over 1 MiB (422), an immutable ConfigMap or Secret changed (422), each
// answered with kube-apiserver's Status, and nothing stored changes.
func TestBadConfigInput(t *testing.T) {
	e := newEnv(t)
	rv := func(path string) string {
		var l metav1.List
		e.get(path).must(t, http.StatusOK, &l)
		return l.ResourceVersion
	}
	var frozen corev1.ConfigMap
	e.do(req{method: "POST", path: cmPath, body: `{"metadata":{"name":"frozen"},"data":{"a":"1"},"immutable":true}`}).must(t, http.StatusCreated, &frozen)
	var sealed corev1.Secret
	e.do(req{method: "POST", path: secretPath, body: `{"metadata":{"name":"sealed"},"stringData":{"a":"1"},"immutable":true}`}).must(t, http.StatusCreated, &sealed)
	before := rv(cmPath)

	big := strings.Repeat("x", 1<<20)
	changed := frozen.DeepCopy()
	changed.Data["a"] = "2"
	thawed := frozen.DeepCopy()
	thawed.Immutable = ptr.To(false)
	const immutable = "field is immutable when `immutable` is set"
	for _, tc := range []struct {
		name, method, path, contentType, body string
		code                                  int32
		reason                                metav1.StatusReason
		message                               string
		causes                                []string // "field: type"
	}{
		{"secret data not base64", "POST", secretPath, "", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"bad"},"data":{"k":"not base64!"}}`,
			400, metav1.StatusReasonBadRequest, `Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 3`, nil},
		{"secret data not base64, YAML", "POST", secretPath, "application/yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: bad}\ndata: {k: '%%%'}\n",
			400, metav1.StatusReasonBadRequest, `Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 0`, nil},
		{"configmap over 1 MiB", "POST", cmPath, "", `{"metadata":{"name":"big"},"data":{"a":"` + big + `","b":"y"}}`,
			422, metav1.StatusReasonInvalid, `ConfigMap "big" is invalid: []: Too long: may not be more than 1048576 bytes`, []string{"[]: FieldValueTooLong"}},
		{"secret over 1 MiB", "POST", secretPath, "", `{"metadata":{"name":"big"},"stringData":{"a":"` + big + `","b":"y"}}`,
			422, metav1.StatusReasonInvalid, `Secret "big" is invalid: data: Too long: may not be more than 1048576 bytes`, []string{"data: FieldValueTooLong"}},
		{"immutable configmap data, update", "PUT", cmPath + "/frozen", "", toJSON(t, changed),
			422, metav1.StatusReasonInvalid, `ConfigMap "frozen" is invalid: data: Forbidden: ` + immutable, []string{"data: FieldValueForbidden"}},
		{"immutable configmap data, patch", "PATCH", cmPath + "/frozen", "application/merge-patch+json", `{"data":{"b":"new"}}`,
			422, metav1.StatusReasonInvalid, `ConfigMap "frozen" is invalid: data: Forbidden: ` + immutable, []string{"data: FieldValueForbidden"}},
		{"immutable configmap made mutable", "PUT", cmPath + "/frozen", "", toJSON(t, thawed),
			422, metav1.StatusReasonInvalid, `ConfigMap "frozen" is invalid: immutable: Forbidden: ` + immutable, []string{"immutable: FieldValueForbidden"}},
		{"immutable secret, stringData patch", "PATCH", secretPath + "/sealed", "application/merge-patch+json", `{"stringData":{"a":"2"}}`,
			422, metav1.StatusReasonInvalid, `Secret "sealed" is invalid: data: Forbidden: ` + immutable, []string{"data: FieldValueForbidden"}},
		{"secret type changed", "PATCH", secretPath + "/sealed", "application/merge-patch+json", `{"type":"kubernetes.io/ssh-auth","data":{"ssh-privatekey":"aw=="}}`,
			422, metav1.StatusReasonInvalid, `Secret "sealed" is invalid: [type: Invalid value: "kubernetes.io/ssh-auth": field is immutable, data: Forbidden: ` + immutable + `]`,
			[]string{"type: FieldValueInvalid", "data: FieldValueForbidden"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(req{method: tc.method, path: tc.path, contentType: tc.contentType, body: tc.body})
			st := r.status(t)
			if r.code != int(tc.code) || st.Code != tc.code || st.Reason != tc.reason || st.Message != tc.message || st.Kind != "Status" {
				t.Fatalf("got %d %s %q, want %d %s %q", r.code, st.Reason, st.Message, tc.code, tc.reason, tc.message)
			}
			var causes []string
			if st.Details != nil {
				for _, c := range st.Details.Causes {
					causes = append(causes, c.Field+": "+string(c.Type))
				}
			}
			if !slices.Equal(causes, tc.causes) {
				t.Errorf("causes %v, want %v", causes, tc.causes)
			}
		})
	}
	if after := rv(cmPath); after != before {
		t.Errorf("the store changed: resourceVersion %s → %s", before, after)
	}
	for _, path := range []string{cmPath + "/big", secretPath + "/big", secretPath + "/bad"} {
		if r := e.get(path); r.code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", path, r.code)
		}
	}
	var cm corev1.ConfigMap
	e.get(cmPath+"/frozen").must(t, http.StatusOK, &cm)
	if cm.ResourceVersion != frozen.ResourceVersion || cm.Data["a"] != "1" || !*cm.Immutable {
		t.Errorf("frozen changed: %+v", cm)
	}
	// Its metadata may still change, as in Kubernetes.
	e.do(req{method: "PATCH", path: cmPath + "/frozen", contentType: "application/merge-patch+json", body: `{"metadata":{"labels":{"x":"y"}}}`}).
		must(t, http.StatusOK, &cm)
	if cm.Labels["x"] != "y" || cm.Data["a"] != "1" {
		t.Errorf("label patch: %+v", cm)
	}
}

// TestClientGoProtobufConfigKinds: client-go's typed clientset, in
// protobuf both ways, creates, gets, updates and lists ConfigMaps, Secrets
// (binary data intact) and ServiceAccounts.
func TestClientGoProtobufConfigKinds(t *testing.T) {
	_, cfg, log := serveTLS(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	bin := []byte{0, 1, 2, 0xff}
	s, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"},
		Data: map[string][]byte{"bin": bin}, StringData: map[string]string{"p": "q"}}, metav1.CreateOptions{})
	if err != nil || string(s.Data["bin"]) != string(bin) || string(s.Data["p"]) != "q" || s.Type != corev1.SecretTypeOpaque {
		t.Fatalf("secret: %+v %v", s, err)
	}
	cm, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"},
		Data: map[string]string{"a": "1"}, Immutable: ptr.To(true)}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("configmap: %v", err)
	}
	cm.Data["a"] = "2"
	if _, err := cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "field is immutable when `immutable` is set") {
		t.Errorf("immutable update: %v", err)
	}
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("serviceaccount: %v", err)
	}
	l, err := cs.CoreV1().ServiceAccounts("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 || l.Items[0].Name != "sa" {
		t.Fatalf("list: %+v %v", l, err)
	}
	got, err := cs.CoreV1().Secrets("default").Get(ctx, "s", metav1.GetOptions{})
	if err != nil || string(got.Data["bin"]) != string(bin) {
		t.Fatalf("get: %+v %v", got, err)
	}
	reqs, resps := log.snapshot()
	for _, entry := range append(reqs, resps...) {
		if !strings.Contains(entry, " application/vnd.kubernetes.protobuf") {
			t.Errorf("not protobuf on the wire: %v / %v", reqs, resps)
			break
		}
	}
}
