package strategy

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/everynode/everynode/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func storedNode(t *testing.T, taints ...corev1.Taint) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"zone": "a", "disk": "ssd"}},
		Spec: corev1.NodeSpec{Taints: taints}}
	PrepareForCreate(resources.Nodes, n, testNow, testUID)
	return stored(t, resources.Nodes, n, "20").(*corev1.Node)
}

// TestPatchNode replays kubectl's taint, untaint, cordon, uncordon and label
// bodies (docs/kubectl-wire.md §2.7–2.9).
func TestPatchNode(t *testing.T) {
	other := corev1.Taint{Key: "other", Value: "x", Effect: corev1.TaintEffectNoExecute}
	key := corev1.Taint{Key: "key", Value: "val", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name       string
		start      []corev1.Taint
		pt         types.PatchType
		patch      string
		wantTaints []corev1.Taint
		check      func(t *testing.T, n *corev1.Node)
	}{
		{name: "taint adds", start: []corev1.Taint{other}, pt: types.StrategicMergePatchType,
			patch:      `{"spec":{"taints":[{"effect":"NoExecute","key":"other","value":"x"},{"effect":"NoSchedule","key":"key","value":"val"}]}}`,
			wantTaints: []corev1.Taint{other, key}},
		{name: "untaint removes", start: []corev1.Taint{other, key}, pt: types.StrategicMergePatchType,
			patch:      `{"spec":{"taints":[{"effect":"NoExecute","key":"other","value":"x"}]}}`,
			wantTaints: []corev1.Taint{other}},
		{name: "untaint last", start: []corev1.Taint{key}, pt: types.StrategicMergePatchType,
			patch: `{"spec":{"taints":null}}`, wantTaints: nil},
		{name: "taint overwrite", start: []corev1.Taint{key}, pt: types.StrategicMergePatchType,
			patch:      `{"spec":{"taints":[{"effect":"NoSchedule","key":"key","value":"new"}]}}`,
			wantTaints: []corev1.Taint{{Key: "key", Value: "new", Effect: corev1.TaintEffectNoSchedule}}},
		{name: "cordon", start: []corev1.Taint{key}, pt: types.StrategicMergePatchType, patch: `{"spec":{"unschedulable":true}}`,
			wantTaints: []corev1.Taint{key}, check: func(t *testing.T, n *corev1.Node) {
				if !n.Spec.Unschedulable {
					t.Error("not cordoned")
				}
			}},
		{name: "label add", pt: types.MergePatchType, patch: `{"metadata":{"labels":{"role":"edge"}}}`,
			check: func(t *testing.T, n *corev1.Node) {
				want := map[string]string{"zone": "a", "disk": "ssd", "role": "edge"}
				if !reflect.DeepEqual(n.Labels, want) {
					t.Errorf("labels %v, want %v", n.Labels, want)
				}
			}},
		{name: "label remove with null", pt: types.MergePatchType, patch: `{"metadata":{"labels":{"zone":null}}}`,
			check: func(t *testing.T, n *corev1.Node) {
				if want := map[string]string{"disk": "ssd"}; !reflect.DeepEqual(n.Labels, want) {
					t.Errorf("labels %v, want %v", n.Labels, want)
				}
			}},
		{name: "label with resourceVersion precondition", pt: types.MergePatchType,
			patch: `{"metadata":{"labels":{"k":"v"},"resourceVersion":"19"}}`,
			check: func(t *testing.T, n *corev1.Node) {
				if n.ResourceVersion != "19" {
					t.Errorf("resourceVersion %q: the HTTP layer needs the client's value to send a 409", n.ResourceVersion)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cur := storedNode(t, tc.start...)
			before := cur.DeepCopy()
			obj, err := ApplyPatch(resources.Nodes, cur, tc.pt, []byte(tc.patch))
			if err != nil {
				t.Fatalf("ApplyPatch: %v", err)
			}
			if !reflect.DeepEqual(cur, before) {
				t.Errorf("ApplyPatch modified cur")
			}
			n := obj.(*corev1.Node)
			if tc.check == nil || tc.wantTaints != nil {
				if !apiequality.Semantic.DeepEqual(n.Spec.Taints, tc.wantTaints) {
					t.Errorf("taints %v, want %v", n.Spec.Taints, tc.wantTaints)
				}
			}
			if tc.check != nil {
				tc.check(t, n)
			}
			if n.Kind != "Node" || n.APIVersion != "v1" {
				t.Errorf("type meta %v", n.TypeMeta)
			}
			if errs := ValidateUpdate(resources.Nodes, n, cur); len(errs) > 0 {
				t.Errorf("patched node invalid: %v", errs)
			}
		})
	}

	// Uncordon: null removes the field.
	cur := storedNode(t)
	cur.Spec.Unschedulable = true
	obj, err := ApplyPatch(resources.Nodes, cur, types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":null}}`))
	if err != nil {
		t.Fatal(err)
	}
	if obj.(*corev1.Node).Spec.Unschedulable {
		t.Error("uncordon left the node unschedulable")
	}
}

// TestPatchDaemonSet replays kubectl apply, edit, patch, rollout restart and
// rollout undo bodies against a stored DaemonSet.
func TestPatchDaemonSet(t *testing.T) {
	image := func(t *testing.T, ds *appsv1.DaemonSet, want string) {
		t.Helper()
		if len(ds.Spec.Template.Spec.Containers) != 1 || ds.Spec.Template.Spec.Containers[0].Image != want {
			t.Errorf("containers %+v, want one with image %s", ds.Spec.Template.Spec.Containers, want)
		}
	}
	tests := []struct {
		name  string
		pt    types.PatchType
		patch string
		check func(t *testing.T, ds, cur *appsv1.DaemonSet)
	}{
		{"apply with setElementOrder", types.StrategicMergePatchType,
			`{"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}\n"}},` +
				`"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"redis"}],"containers":[{"image":"redis:6-alpine","name":"redis"}]}}}}`,
			func(t *testing.T, ds, cur *appsv1.DaemonSet) {
				image(t, ds, "redis:6-alpine")
				c := ds.Spec.Template.Spec.Containers[0]
				if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 6379 || c.ImagePullPolicy != corev1.PullIfNotPresent {
					t.Errorf("merge lost container fields: %+v", c)
				}
				if ds.Annotations["kubectl.kubernetes.io/last-applied-configuration"] != "{}\n" || ds.Annotations[TemplateGenerationAnnotation] != "1" {
					t.Errorf("annotations %v", ds.Annotations)
				}
			}},
		{"apply adds a second container in order", types.StrategicMergePatchType,
			`{"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"sidecar"},{"name":"redis"}],"containers":[{"image":"busybox","name":"sidecar"}]}}}}`,
			func(t *testing.T, ds, cur *appsv1.DaemonSet) {
				cs := ds.Spec.Template.Spec.Containers
				if len(cs) != 2 || cs[0].Name != "sidecar" || cs[1].Name != "redis" {
					t.Errorf("containers %+v", cs)
				}
			}},
		{"delete a container with $patch", types.StrategicMergePatchType,
			`{"spec":{"template":{"spec":{"containers":[{"name":"redis","$patch":"delete"}]}}}}`,
			func(t *testing.T, ds, cur *appsv1.DaemonSet) {
				if len(ds.Spec.Template.Spec.Containers) != 0 {
					t.Errorf("containers %+v", ds.Spec.Template.Spec.Containers)
				}
			}},
		{"rollout restart", types.StrategicMergePatchType,
			`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-11-22T03:39:09Z"}}}}}`,
			func(t *testing.T, ds, cur *appsv1.DaemonSet) {
				if ds.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] != "2026-11-22T03:39:09Z" {
					t.Errorf("template annotations %v", ds.Spec.Template.Annotations)
				}
				PrepareForUpdate(resources.DaemonSets, ds, cur)
				if ds.Generation != 2 || ds.Annotations[TemplateGenerationAnnotation] != "2" {
					t.Errorf("generation %d templateGeneration %s", ds.Generation, ds.Annotations[TemplateGenerationAnnotation])
				}
			}},
		{"rollout undo replaces the template", types.StrategicMergePatchType,
			`{"spec":{"template":{"$patch":"replace","metadata":{"labels":{"name":"redis-ds"}},"spec":{"containers":[{"name":"redis","image":"redis:4"}]}}}}`,
			func(t *testing.T, ds, cur *appsv1.DaemonSet) {
				image(t, ds, "redis:4")
				if ds.Spec.Template.Spec.Containers[0].Ports != nil || len(ds.Spec.Template.Spec.Tolerations) != 0 {
					t.Errorf("template not replaced: %+v", ds.Spec.Template.Spec)
				}
				Default(resources.DaemonSets, ds)
				if errs := ValidateUpdate(resources.DaemonSets, ds, cur); len(errs) > 0 {
					t.Errorf("invalid after undo: %v", errs)
				}
			}},
		{"retainKeys on update strategy", types.StrategicMergePatchType,
			`{"spec":{"updateStrategy":{"$retainKeys":["type"],"type":"OnDelete"}}}`,
			func(t *testing.T, ds, cur *appsv1.DaemonSet) {
				if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType || ds.Spec.UpdateStrategy.RollingUpdate != nil {
					t.Errorf("updateStrategy %+v", ds.Spec.UpdateStrategy)
				}
			}},
		{"kubectl patch merge", types.MergePatchType, `{"spec":{"minReadySeconds":5}}`,
			func(t *testing.T, ds, cur *appsv1.DaemonSet) {
				if ds.Spec.MinReadySeconds != 5 {
					t.Errorf("minReadySeconds %d", ds.Spec.MinReadySeconds)
				}
			}},
		{"merge patch replaces lists", types.MergePatchType, `{"spec":{"template":{"spec":{"containers":[{"name":"x","image":"y"}]}}}}`,
			func(t *testing.T, ds, cur *appsv1.DaemonSet) { image(t, ds, "y") }},
		{"json patch replace image", types.JSONPatchType,
			`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"busybox:1.40"}]`,
			func(t *testing.T, ds, cur *appsv1.DaemonSet) { image(t, ds, "busybox:1.40") }},
		{"json patch test and add", types.JSONPatchType,
			`[{"op":"test","path":"/metadata/name","value":"redis-ds"},{"op":"add","path":"/metadata/labels/tier","value":"cache"}]`,
			func(t *testing.T, ds, cur *appsv1.DaemonSet) {
				if ds.Labels["tier"] != "cache" {
					t.Errorf("labels %v", ds.Labels)
				}
			}},
		{"json patch copy", types.JSONPatchType,
			`[{"op":"copy","from":"/metadata/labels/app","path":"/metadata/labels/copy"}]`,
			func(t *testing.T, ds, cur *appsv1.DaemonSet) {
				if ds.Labels["copy"] != "redis-ds" {
					t.Errorf("labels %v", ds.Labels)
				}
			}},
		{"unknown field dropped without strict", types.MergePatchType, `{"spec":{"bogus":1}}`,
			func(t *testing.T, ds, cur *appsv1.DaemonSet) {
				if !apiequality.Semantic.DeepEqual(ds, cur) {
					t.Errorf("object changed")
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cur := stored(t, resources.DaemonSets, createDS(t, manifests[0]), "30").(*appsv1.DaemonSet)
			before := cur.DeepCopy()
			obj, err := ApplyPatch(resources.DaemonSets, cur, tc.pt, []byte(tc.patch))
			if err != nil {
				t.Fatalf("ApplyPatch: %v", err)
			}
			if !reflect.DeepEqual(cur, before) {
				t.Errorf("ApplyPatch modified cur")
			}
			tc.check(t, obj.(*appsv1.DaemonSet), cur)
		})
	}
}

// TestPatchNoOp: kubectl prints "patched (no change)" only if the result is
// deep-equal to the stored object (so the store writes nothing).
func TestPatchNoOp(t *testing.T) {
	for _, path := range manifests {
		cur := stored(t, resources.DaemonSets, createDS(t, path), "40")
		for _, tc := range []struct {
			pt    types.PatchType
			patch string
		}{
			{types.StrategicMergePatchType, `{}`},
			{types.StrategicMergePatchType, `{"metadata":{"labels":{}}}`},
			{types.MergePatchType, `{}`},
			{types.JSONPatchType, `[]`},
			{types.JSONPatchType, `[{"op":"test","path":"/kind","value":"DaemonSet"}]`},
		} {
			obj, err := ApplyPatch(resources.DaemonSets, cur, tc.pt, []byte(tc.patch))
			if err != nil {
				t.Fatalf("%s %s: %v", tc.pt, tc.patch, err)
			}
			if !reflect.DeepEqual(obj, cur) {
				t.Errorf("%s %s %s: result differs from cur:\n%+v\n%+v", path, tc.pt, tc.patch, obj, cur)
			}
			// The rest of the update pipeline keeps it equal too, down to the
			// bytes the store compares.
			Default(resources.DaemonSets, obj)
			PrepareForUpdate(resources.DaemonSets, obj, cur)
			if !reflect.DeepEqual(obj, cur) {
				t.Errorf("%s %s: update pipeline changed a no-op patch", tc.pt, tc.patch)
			}
			a, _ := json.Marshal(obj)
			b, _ := json.Marshal(cur)
			if string(a) != string(b) {
				t.Errorf("%s %s: encodings differ:\n%s\n%s", tc.pt, tc.patch, a, b)
			}
		}
	}
}

// TestPatchNodeNoOp: re-tainting with the same taints or re-cordoning changes nothing.
func TestPatchNodeNoOp(t *testing.T) {
	cur := storedNode(t, corev1.Taint{Key: "key", Value: "val", Effect: corev1.TaintEffectNoSchedule})
	cur.Spec.Unschedulable = true
	for _, patch := range []string{
		`{"spec":{"taints":[{"effect":"NoSchedule","key":"key","value":"val"}]}}`,
		`{"spec":{"unschedulable":true}}`,
		`{"metadata":{"labels":{"zone":"a"}}}`,
	} {
		obj, err := ApplyPatch(resources.Nodes, cur, types.StrategicMergePatchType, []byte(patch))
		if err != nil {
			t.Fatal(err)
		}
		Default(resources.Nodes, obj)
		PrepareForUpdate(resources.Nodes, obj, cur)
		if !reflect.DeepEqual(obj, cur) {
			t.Errorf("%s: not a no-op:\n%+v\n%+v", patch, obj, cur)
		}
	}
}

func TestPatchErrors(t *testing.T) {
	tests := []struct {
		name     string
		pt       types.PatchType
		patch    string
		strict   bool
		wantCode int32
		wantMsg  string
	}{
		{"unknown patch type", "application/apply-patch+yaml", `{}`, false, http.StatusUnsupportedMediaType, "application/strategic-merge-patch+json"},
		{"empty patch type", "", `{}`, false, http.StatusUnsupportedMediaType, "unknown format"},
		{"malformed strategic", types.StrategicMergePatchType, `{"spec":`, false, http.StatusBadRequest, "invalid JSON document"},
		{"strategic non-object", types.StrategicMergePatchType, `[1]`, false, http.StatusBadRequest, ""},
		{"strategic bad directive", types.StrategicMergePatchType, `{"spec":{"template":{"$patch":"explode"}}}`, false, http.StatusBadRequest, ""},
		{"malformed merge", types.MergePatchType, `{"spec":`, false, http.StatusBadRequest, ""},
		{"merge null document", types.MergePatchType, `null`, false, http.StatusBadRequest, ""},
		{"malformed json patch", types.JSONPatchType, `[{"op":`, false, http.StatusBadRequest, ""},
		{"json patch not a list", types.JSONPatchType, `{"op":"add"}`, false, http.StatusBadRequest, ""},
		{"json patch missing path", types.JSONPatchType, `[{"op":"remove","path":"/spec/nothing/here"}]`, false, http.StatusUnprocessableEntity, ""},
		{"json patch failed test", types.JSONPatchType, `[{"op":"test","path":"/metadata/name","value":"other"}]`, false, http.StatusUnprocessableEntity, "test"},
		{"json patch replace without value", types.JSONPatchType, `[{"op":"replace","path":""}]`, false, http.StatusBadRequest, "has no value"},
		{"json patch unknown op", types.JSONPatchType, `[{"op":"explode","path":"/a"}]`, false, http.StatusUnprocessableEntity, ""},
		{"merge changes kind", types.MergePatchType, `{"kind":"Pod"}`, false, http.StatusBadRequest, "the kind in the data (Pod) does not match the expected kind (DaemonSet)"},
		{"strategic changes apiVersion", types.StrategicMergePatchType, `{"apiVersion":"apps/v1beta2"}`, false, http.StatusBadRequest,
			"the API version in the data (apps/v1beta2) does not match the expected API version (apps/v1)"},
		{"json patch changes kind", types.JSONPatchType, `[{"op":"replace","path":"/kind","value":"Deployment"}]`, false, http.StatusBadRequest, "Deployment"},
		{"string where int belongs", types.MergePatchType, `{"spec":{"minReadySeconds":"ten"}}`, false, http.StatusBadRequest, "cannot unmarshal string"},
		{"strategic type error", types.StrategicMergePatchType, `{"spec":{"revisionHistoryLimit":{"a":1}}}`, false, http.StatusBadRequest, ""},
		{"object where list belongs", types.MergePatchType, `{"spec":{"template":{"spec":{"containers":{"name":"x"}}}}}`, false, http.StatusBadRequest, "cannot unmarshal object"},
		{"strict unknown field", types.MergePatchType, `{"spec":{"bogus":1}}`, true, http.StatusBadRequest, `strict decoding error: unknown field "spec.bogus"`},
		{"too many operations", types.JSONPatchType, tooManyOps(), false, http.StatusRequestEntityTooLarge, "10000"},
		{"copy bomb", types.JSONPatchType, copyBomb(), false, http.StatusRequestEntityTooLarge, "grows the object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cur := stored(t, resources.DaemonSets, createDS(t, manifests[0]), "50")
			apply := ApplyPatch
			if tc.strict {
				apply = ApplyPatchStrict
			}
			obj, err := apply(resources.DaemonSets, cur, tc.pt, []byte(tc.patch))
			if obj != nil {
				t.Errorf("got an object with the error")
			}
			wantStatus(t, err, tc.wantCode, tc.wantMsg)
		})
	}
}

func tooManyOps() string {
	b := []byte("[")
	for i := 0; i <= MaxJSONPatchOperations; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"op":"test","path":"/kind","value":"DaemonSet"}`...)
	}
	return string(append(b, ']'))
}

// copyBomb doubles /metadata/annotations/a until it exceeds any sane size.
func copyBomb() string {
	b := []byte(`[{"op":"add","path":"/metadata/annotations/a","value":["` + strings.Repeat("x", 8000) + `"]}`)
	for i := 0; i < 40; i++ {
		b = append(b, `,{"op":"copy","from":"/metadata/annotations/a","path":"/metadata/annotations/a/-"}`...)
	}
	return string(append(b, ']'))
}

func TestSafelyRecoversLibraryPanics(t *testing.T) {
	out, err := safely(func() ([]byte, error) { panic("boom") })
	if out != nil {
		t.Errorf("output %q", out)
	}
	wantStatus(t, err, http.StatusUnprocessableEntity, "the patch cannot be applied: boom")
}
