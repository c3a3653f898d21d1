package store

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/everynode/everynode/resources"
)

// storedProto checks that value is kube-apiserver's storage format and
// decodes the object in it into into.
func storedProto[T interface{ Unmarshal([]byte) error }](t *testing.T, value []byte, into T) (runtime.Unknown, T) {
	t.Helper()
	raw, ok := bytes.CutPrefix(value, []byte("k8s\x00"))
	if !ok {
		t.Fatalf("stored value %q does not start with k8s\\x00", value)
	}
	var env runtime.Unknown
	if err := env.Unmarshal(raw); err != nil {
		t.Fatalf("envelope of %q: %v", value, err)
	}
	if env.ContentType != "" || env.ContentEncoding != "" {
		t.Fatalf("envelope content type %q encoding %q", env.ContentType, env.ContentEncoding)
	}
	if err := into.Unmarshal(env.Raw); err != nil {
		t.Fatalf("object in %q: %v", value, err)
	}
	return env, into
}

// TestEveryKindStoredAsProtobuf: every served kind has a protobuf encoding
// (none falls back to JSON) that comes back as the object it was.
func TestEveryKindStoredAsProtobuf(t *testing.T) {
	for _, r := range resources.All() {
		obj := r.New()
		if !r.HasProto() {
			t.Errorf("%s: %T has no protobuf codec", r.Name, obj)
			continue
		}
		obj.SetName("x")
		obj.SetLabels(map[string]string{"a": "b"})
		obj.SetUID("u-1")
		obj.SetCreationTimestamp(metav1.Unix(1700000000, 0))
		if r.Namespaced {
			obj.SetNamespace("default")
		}
		obj.SetResourceVersion("7")
		data, out, err := encode(r, obj)
		if err != nil {
			t.Fatalf("%s: encode: %v", r.Name, err)
		}
		env, _ := storedProto(t, data, r.New().(interface{ Unmarshal([]byte) error }))
		if env.APIVersion != r.APIVersion() || env.Kind != r.Kind {
			t.Errorf("%s: envelope %s %s", r.Name, env.APIVersion, env.Kind)
		}
		back, err := decode(r, data, 9)
		if err != nil {
			t.Fatalf("%s: decode: %v", r.Name, err)
		}
		if back.GetResourceVersion() != "9" || back.GetObjectKind().GroupVersionKind() != r.GVK() {
			t.Errorf("%s: decoded resourceVersion %q kind %v", r.Name, back.GetResourceVersion(), back.GetObjectKind().GroupVersionKind())
		}
		back.SetResourceVersion("")
		if !reflect.DeepEqual(back, out) {
			t.Errorf("%s: decoded %+v, encoded %+v", r.Name, back, out)
		}
	}
}

// TestDecodeRejectsWrongOrBrokenValues: a value whose envelope names another
// kind, or that is cut short, is an error naming what is wrong, not an
// object of the wrong shape.
func TestDecodeRejectsWrongOrBrokenValues(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cm"}, Data: map[string]string{"k": strings.Repeat("v", 100)}}
	data, _, err := encode(resources.ConfigMaps, cm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decode(resources.Pods, data, 1); err == nil || !strings.Contains(err.Error(), "encoded as v1 ConfigMap, not v1 Pod") {
		t.Errorf("ConfigMap decoded as a Pod: %v", err)
	}
	for _, cut := range []int{len(data) - 1, len(data) / 2, len(protoMagic) + 3} {
		if obj, err := decode(resources.ConfigMaps, data[:cut], 1); err == nil {
			t.Errorf("value cut to %d of %d bytes decoded as %+v", cut, len(data), obj)
		}
	}
	if _, err := decode(resources.ConfigMaps, []byte("not an object"), 1); err == nil {
		t.Error("garbage decoded")
	}
}

// TestJSONValuesReadAndRewritten: a value an earlier version stored as JSON
// is read, listed and watched as before, and written back as protobuf at its
// next change.
func TestJSONValuesReadAndRewritten(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	const key = "/registry/configmaps/default/old"
	if _, err := s.Client().Put(ctx, key, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"old","namespace":"default","uid":"u-old"},"data":{"k":"v"}}`); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, resources.ConfigMaps, "default", "old")
	if err != nil || got.(*corev1.ConfigMap).Data["k"] != "v" || got.GetUID() != "u-old" {
		t.Fatalf("Get: %+v %v", got, err)
	}
	upd := got.(*corev1.ConfigMap).DeepCopy()
	upd.Data["k"] = "w"
	if _, err := s.Update(ctx, resources.ConfigMaps, upd); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Client().Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("raw get: %v", err)
	}
	if _, cm := storedProto(t, resp.Kvs[0].Value, &corev1.ConfigMap{}); cm.Data["k"] != "w" || cm.UID != "u-old" {
		t.Fatalf("rewritten as %+v", cm)
	}
}
