package strategy

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/everynode/everynode/resources"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// FuzzDecodeValidate feeds arbitrary bodies through the create and update
// pipelines of every resource: nothing may panic.
func FuzzDecodeValidate(f *testing.F) {
	for _, path := range manifests {
		b := readFile(f, path)
		f.Add(b, true, true, uint8(4))
		js, err := yaml.YAMLToJSON(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(js, false, true, uint8(4))
		f.Add(js, false, false, uint8(4))
	}
	f.Add([]byte(`{"metadata":{"name":"n","generateName":"x-"},"spec":{"taints":[{"key":"k","effect":"NoExecute"}]}}`), false, true, uint8(1))
	f.Add([]byte(`{"metadata":{"name":"p","namespace":"d"},"spec":{"hostNetwork":true,"containers":[{"name":"c","image":"i","ports":[{"containerPort":80}],"livenessProbe":{"httpGet":{"port":"http"}}}],"volumes":[{"name":"v"}]}}`), false, false, uint8(2))
	f.Add([]byte(`{"metadata":{"name":"cr","namespace":"d"},"data":{"spec":{}},"revision":-1}`), false, true, uint8(5))
	f.Add([]byte(`{"spec":{"updateStrategy":{"rollingUpdate":{"maxSurge":"101%","maxUnavailable":"x"}}}}`), false, false, uint8(4))
	f.Add([]byte("metadata:\n  name: a\n  name: b\n"), true, true, uint8(0))
	f.Add([]byte(`[]`), false, false, uint8(3))
	all := resources.All()
	f.Fuzz(func(t *testing.T, body []byte, isYAML, strict bool, which uint8) {
		r := all[int(which)%len(all)]
		ct := ContentTypeJSON
		if isYAML {
			ct = ContentTypeYAML
		}
		obj, err := Decode(r, ct, body, strict)
		if err != nil {
			if obj != nil {
				t.Fatalf("object and error")
			}
			return
		}
		old := obj.DeepCopyObject().(resources.Object)
		Default(r, obj)
		PrepareForCreate(r, obj, testNow, testUID)
		errs := ValidateCreate(r, obj)
		_ = InvalidError(r, obj.GetName(), errs).Error()

		Default(r, old)
		old.SetResourceVersion("1")
		PrepareForUpdate(r, old, obj)
		_ = ValidateUpdate(r, old, obj)
		PrepareForStatusUpdate(r, old, obj)
		_ = ValidateUpdate(r, old, obj)
	})
}

// FuzzApplyPatch applies arbitrary patches of the three types to a fixed
// DaemonSet: nothing may panic, cur is never modified, errors are status
// errors, and a result that passes validation re-encodes and decodes stably.
func FuzzApplyPatch(f *testing.F) {
	seeds := []string{
		`{}`, `[]`, `null`,
		`{"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"redis"}],"containers":[{"image":"redis:6","name":"redis"}]}}}}`,
		`{"spec":{"template":{"$patch":"replace","metadata":{"labels":{"name":"redis-ds"}},"spec":{"containers":[{"name":"redis","image":"redis:4"}]}}}}`,
		`{"spec":{"updateStrategy":{"$retainKeys":["type"],"type":"OnDelete"}}}`,
		`{"metadata":{"labels":{"app":null,"x":"y"}}}`,
		`{"spec":{"template":{"spec":{"containers":[{"name":"redis","$patch":"delete"}]}}}}`,
		`{"spec":{"template":{"spec":{"$deleteFromPrimitiveList/args":["a"]}}}}`,
		`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"busybox:1.40"}]`,
		`[{"op":"copy","from":"/spec/template","path":"/metadata/annotations/x"}]`,
		`[{"op":"move","from":"/spec/selector","path":"/spec/template/metadata"}]`,
		`[{"op":"add","path":"/spec/template/spec/containers/-","value":{"name":"b","image":"b"}}]`,
		`[{"op":"remove","path":"/spec/template/spec/tolerations/0"}]`,
		`{"spec":{"minReadySeconds":"5"}}`,
	}
	for i, s := range seeds {
		f.Add([]byte(s), uint8(i))
	}
	ptypes := []types.PatchType{types.StrategicMergePatchType, types.MergePatchType, types.JSONPatchType}
	cur := stored(f, resources.DaemonSets, createDS(f, manifests[0]), "100")
	pristine := cur.DeepCopyObject()
	r := resources.DaemonSets
	f.Fuzz(func(t *testing.T, patch []byte, which uint8) {
		pt := ptypes[int(which)%len(ptypes)]
		obj, err := ApplyPatch(r, cur, pt, patch)
		if !reflect.DeepEqual(cur, pristine) {
			t.Fatalf("ApplyPatch modified cur")
		}
		if err != nil {
			if obj != nil {
				t.Fatalf("object and error")
			}
			wantStatusType(t, err)
			return
		}
		Default(r, obj)
		PrepareForUpdate(r, obj, cur)
		if errs := ValidateUpdate(r, obj, cur); len(errs) > 0 {
			_ = InvalidError(r, obj.GetName(), errs).Error()
			return
		}
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatalf("encode valid result: %v", err)
		}
		again, err := Decode(r, ContentTypeJSON, b, true)
		if err != nil {
			t.Fatalf("decode re-encoded valid result: %v\n%s", err, b)
		}
		Default(r, again)
		if !apiequality.Semantic.DeepEqual(obj, again) {
			t.Fatalf("round trip not stable:\n%+v\n%+v", obj, again)
		}
		b2, err := json.Marshal(again)
		if err != nil || string(b2) != string(b) {
			t.Fatalf("second encoding differs (%v):\n%s\n%s", err, b, b2)
		}
	})
}

func wantStatusType(t *testing.T, err error) {
	t.Helper()
	if _, ok := err.(*apierrors.StatusError); !ok {
		t.Fatalf("error %v (%T) is not a status error", err, err)
	}
}
