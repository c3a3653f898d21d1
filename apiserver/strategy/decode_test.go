package strategy

import (
	"net/http"
	"testing"

	"github.com/everynode/everynode/resources"
	corev1 "k8s.io/api/core/v1"
)

func TestDecode(t *testing.T) {
	const dsJSON = `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"a"},"spec":{}}`
	tests := []struct {
		name        string
		r           *resources.Resource
		contentType string
		body        string
		strict      bool
		wantCode    int32 // 0: success
		wantMsg     string
	}{
		{name: "json", r: resources.DaemonSets, contentType: "application/json", body: dsJSON},
		{name: "empty content type is json", r: resources.DaemonSets, body: dsJSON},
		{name: "json with charset", r: resources.DaemonSets, contentType: "application/json; charset=utf-8", body: dsJSON},
		{name: "yaml", r: resources.DaemonSets, contentType: "application/yaml", body: "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: a\n"},
		{name: "type meta absent is filled in", r: resources.Pods, body: `{"metadata":{"name":"p"}}`},
		{name: "unknown field ignored without strict", r: resources.DaemonSets, body: `{"metadata":{"name":"a"},"spec":{"foo":1}}`},
		{name: "strict unknown field", r: resources.DaemonSets, strict: true,
			body:     `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"a"},"spec":{"foo":1}}`,
			wantCode: http.StatusBadRequest, wantMsg: `strict decoding error: unknown field "spec.foo"`},
		{name: "strict unknown nested field", r: resources.DaemonSets, strict: true,
			body:     `{"spec":{"template":{"spec":{"containers":[{"name":"c","commandx":["a"]}]}}}}`,
			wantCode: http.StatusBadRequest, wantMsg: `unknown field "spec.template.spec.containers[0].commandx"`},
		{name: "strict duplicate field", r: resources.DaemonSets, strict: true,
			body:     `{"metadata":{"name":"a","name":"b"}}`,
			wantCode: http.StatusBadRequest, wantMsg: `strict decoding error: duplicate field "metadata.name"`},
		{name: "strict yaml unknown field", r: resources.DaemonSets, strict: true, contentType: "application/yaml",
			body:     "metadata:\n  name: a\nspec:\n  foo: 1\n",
			wantCode: http.StatusBadRequest, wantMsg: `strict decoding error: unknown field "spec.foo"`},
		{name: "strict yaml duplicate key", r: resources.DaemonSets, strict: true, contentType: "application/yaml",
			body:     "metadata:\n  name: a\n  name: b\n",
			wantCode: http.StatusBadRequest, wantMsg: `strict decoding error`},
		{name: "case-sensitive field names", r: resources.DaemonSets, strict: true, body: `{"Metadata":{"name":"a"}}`,
			wantCode: http.StatusBadRequest, wantMsg: `unknown field "Metadata"`},
		{name: "wrong kind", r: resources.DaemonSets, body: `{"apiVersion":"apps/v1","kind":"Pod"}`,
			wantCode: http.StatusBadRequest, wantMsg: "the kind in the data (Pod) does not match the expected kind (DaemonSet)"},
		{name: "wrong apiVersion", r: resources.DaemonSets, body: `{"apiVersion":"v1","kind":"DaemonSet"}`,
			wantCode: http.StatusBadRequest, wantMsg: "the API version in the data (v1) does not match the expected API version (apps/v1)"},
		{name: "extensions apiVersion", r: resources.DaemonSets, body: `{"apiVersion":"extensions/v1beta1","kind":"DaemonSet"}`,
			wantCode: http.StatusBadRequest, wantMsg: "(extensions/v1beta1)"},
		{name: "malformed json", r: resources.DaemonSets, body: `{"metadata":{"name":"a"`,
			wantCode: http.StatusBadRequest, wantMsg: "cannot be handled as a DaemonSet"},
		{name: "malformed json syntax", r: resources.DaemonSets, body: `{"metadata":{"name":}}`,
			wantCode: http.StatusBadRequest, wantMsg: "invalid character"},
		{name: "malformed yaml", r: resources.DaemonSets, contentType: "application/yaml", body: "metadata:\n  name: [a\n",
			wantCode: http.StatusBadRequest, wantMsg: "error converting YAML to JSON"},
		{name: "yaml tab indentation", r: resources.DaemonSets, contentType: "application/yaml", body: "metadata:\n\tname: a\n",
			wantCode: http.StatusBadRequest, wantMsg: "yaml"},
		{name: "yaml alias bomb", r: resources.DaemonSets, contentType: "application/yaml", body: yamlBomb,
			wantCode: http.StatusBadRequest, wantMsg: "excessive aliasing"},
		{name: "empty body", r: resources.DaemonSets, body: "",
			wantCode: http.StatusBadRequest, wantMsg: "empty"},
		{name: "array body", r: resources.DaemonSets, body: `[{"kind":"DaemonSet"}]`,
			wantCode: http.StatusBadRequest, wantMsg: "must be a JSON object"},
		{name: "string where int belongs", r: resources.DaemonSets, body: `{"spec":{"minReadySeconds":"ten"}}`,
			wantCode: http.StatusBadRequest, wantMsg: "cannot unmarshal string"},
		{name: "unsupported content type", r: resources.DaemonSets, contentType: "application/vnd.kubernetes.protobuf", body: dsJSON,
			wantCode: http.StatusUnsupportedMediaType, wantMsg: "application/json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := Decode(tc.r, tc.contentType, []byte(tc.body), tc.strict)
			if tc.wantCode != 0 {
				if obj != nil {
					t.Errorf("got object %v with error", obj)
				}
				wantStatus(t, err, tc.wantCode, tc.wantMsg)
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if gvk := obj.GetObjectKind().GroupVersionKind(); gvk != tc.r.GVK() {
				t.Errorf("gvk %v, want %v", gvk, tc.r.GVK())
			}
		})
	}
}

func TestDecodeTypes(t *testing.T) {
	for _, r := range resources.All() {
		obj, err := Decode(r, "", []byte(`{"metadata":{"name":"x"}}`), true)
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		if got := resources.ForObject(obj); got != r {
			t.Errorf("%s: decoded %T", r.Name, obj)
		}
	}
	obj, err := Decode(resources.Nodes, "application/yaml", []byte("metadata:\n  name: n1\nspec:\n  taints:\n  - key: k\n    effect: NoSchedule\n"), true)
	if err != nil {
		t.Fatal(err)
	}
	if n := obj.(*corev1.Node); len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "k" {
		t.Errorf("taints %v", n.Spec.Taints)
	}
	ds := createDS(t, manifests[0])
	if ds.Spec.Template.Spec.Containers[0].Image != "redis:5-alpine" {
		t.Errorf("image %q", ds.Spec.Template.Spec.Containers[0].Image)
	}
}

func TestInvalidError(t *testing.T) {
	ds := createDS(t, manifests[0])
	ds.Spec.Template.Labels = map[string]string{"x": "y"}
	errs := ValidateCreate(resources.DaemonSets, ds)
	err := InvalidError(resources.DaemonSets, ds.Name, errs)
	wantStatus(t, err, http.StatusUnprocessableEntity, `DaemonSet.apps "redis-ds" is invalid: spec.template.metadata.labels: Invalid value`)
}

// yamlBomb expands to 9^9 strings unless the YAML decoder limits aliasing.
const yamlBomb = `a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`
