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

// TestRolloutAnnotationAdmission: through the API on the real store, a
// create, update or patch carrying a malformed or unknown
// rollout.everynode.io/ annotation (docs/rollouts.md) is a 422 Invalid
// Status naming the key and the valid values, and nothing stored changes.
func TestRolloutAnnotationAdmission(t *testing.T) {
	e := newEnv(t)
	c := NewLocalClient(e.s, "test", mastersGroup)
	ctx := testCtx(t)

	bad := newDS("bad")
	bad.Annotations = map[string]string{"rollout.everynode.io/paused": "yes"}
	r := e.do(req{method: "POST", path: "/apis/apps/v1/namespaces/default/daemonsets", body: toJSON(t, bad)})
	st := r.must(t, http.StatusUnprocessableEntity, nil).status(t)
	if st.Reason != metav1.StatusReasonInvalid || !strings.Contains(st.Message,
		`metadata.annotations[rollout.everynode.io/paused]: Unsupported value: "yes": supported values: "true", "false"`) {
		t.Fatalf("status %+v", st)
	}
	if _, err := c.Get(ctx, resources.DaemonSets, "default", "bad"); !apierrors.IsNotFound(err) {
		t.Fatalf("refused DaemonSet was stored: %v", err)
	}

	ds := e.createDS(newDS("agent"))
	for _, tc := range []struct{ patch, want string }{
		{`{"metadata":{"annotations":{"rollout.everynode.io/partition":"120%"}}}`,
			`metadata.annotations[rollout.everynode.io/partition]: Invalid value: "120%": a percentage must be from 0% to 100%`},
		{`{"metadata":{"annotations":{"rollout.everynode.io/pause":"true"}}}`,
			`metadata.annotations: Unsupported value: "rollout.everynode.io/pause": supported values: "rollout.everynode.io/auto-rollback", "rollout.everynode.io/bad-revision", "rollout.everynode.io/canary-selector", "rollout.everynode.io/partition", "rollout.everynode.io/paused", "rollout.everynode.io/progress-deadline-seconds", "rollout.everynode.io/unreachable-blocks"`},
		{`{"metadata":{"annotations":{"rollout.everynode.io/bad-revision":"my-image:v2"}}}`,
			`metadata.annotations[rollout.everynode.io/bad-revision]: Invalid value: "my-image:v2": must be a controller-revision-hash as the controller writes it`},
		{`{"metadata":{"annotations":{"rollout.everynode.io/canary-selector":"zone in lab"}}}`,
			`metadata.annotations[rollout.everynode.io/canary-selector]: Invalid value: "zone in lab": must be a label selector`},
	} {
		_, err := c.Patch(ctx, resources.DaemonSets, "default", "agent", types.MergePatchType, []byte(tc.patch), client.WriteOptions{}, "")
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("patch %s: %v\nwant 422 Invalid containing %q", tc.patch, err, tc.want)
		}
	}
	upd := ds.DeepCopy()
	upd.Annotations = map[string]string{"rollout.everynode.io/auto-rollback": "sometimes"}
	if _, err := c.Update(ctx, upd, client.WriteOptions{}); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), `rollout.everynode.io/auto-rollback]: Unsupported value: "sometimes"`) {
		t.Errorf("update: %v", err)
	}
	if got := getDS(t, c, "agent"); got.ResourceVersion != ds.ResourceVersion {
		t.Fatalf("a refused write changed the DaemonSet: resourceVersion %s → %s, annotations %v", ds.ResourceVersion, got.ResourceVersion, got.Annotations)
	}

	// Valid values are stored as sent.
	valid := `{"metadata":{"annotations":{"rollout.everynode.io/paused":"true","rollout.everynode.io/partition":"25%","rollout.everynode.io/canary-selector":"zone in (lab),!gpu","rollout.everynode.io/progress-deadline-seconds":"600","rollout.everynode.io/auto-rollback":"false","rollout.everynode.io/unreachable-blocks":"true"}}}`
	if _, err := c.Patch(ctx, resources.DaemonSets, "default", "agent", types.MergePatchType, []byte(valid), client.WriteOptions{}, ""); err != nil {
		t.Fatalf("valid annotations refused: %v", err)
	}
	if got := getDS(t, c, "agent"); got.Annotations["rollout.everynode.io/partition"] != "25%" || got.Generation != ds.Generation {
		t.Fatalf("stored %v, generation %d (was %d)", got.Annotations, got.Generation, ds.Generation)
	}
}

func getDS(t *testing.T, c client.Interface, name string) *appsv1.DaemonSet {
	t.Helper()
	o, err := c.Get(testCtx(t), resources.DaemonSets, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*appsv1.DaemonSet)
}

// TestKubectlRolloutAnnotations: real kubectl apply and annotate of a bad
// rollout.everynode.io/ annotation fail with the server's message, and the
// stored DaemonSet stays as it was.
func TestKubectlRolloutAnnotations(t *testing.T) {
	k := newKubectlEnv(t)
	manifest := dsManifest("logs", "busybox:1")
	k.okIn(manifest, "apply", "-f", "-")
	before := k.ds("default", "logs")

	badManifest := strings.Replace(manifest, "  labels:\n", "  annotations:\n    rollout.everynode.io/partition: \"lots\"\n  labels:\n", 1)
	stderr := k.fails(badManifest, "apply", "-f", "-")
	wantContains(t, stderr, `The DaemonSet "logs" is invalid`,
		`metadata.annotations[rollout.everynode.io/partition]: Invalid value: "lots"`, `e.g. "3" or "10%"`)

	stderr = k.fails("", "annotate", "ds/logs", "rollout.everynode.io/paused=please")
	wantContains(t, stderr, `metadata.annotations[rollout.everynode.io/paused]: Unsupported value: "please": supported values: "true", "false"`)
	stderr = k.fails("", "annotate", "ds/logs", "rollout.everynode.io/canary=true")
	wantContains(t, stderr, `Unsupported value: "rollout.everynode.io/canary": supported values:`, `"rollout.everynode.io/canary-selector"`)

	if after := k.ds("default", "logs"); after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("refused kubectl writes changed the DaemonSet: %v", after.Annotations)
	}
	k.ok("annotate", "ds/logs", "rollout.everynode.io/paused=true")
	if got := k.ds("default", "logs").Annotations["rollout.everynode.io/paused"]; got != "true" {
		t.Fatalf("paused annotation %q after kubectl annotate", got)
	}
}
