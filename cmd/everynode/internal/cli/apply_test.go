package cli

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

const twoDocs = `# leading comment
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      tolerations:
      - {key: a, operator: Exists}
      - {key: b, operator: Exists}
      containers:
      - name: agent
        image: busybox:1.36
---
# only a comment
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata: {name: edge}
`

func TestDecodeManifests(t *testing.T) {
	ms, err := decodeManifests("in.yaml", strings.NewReader(twoDocs))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].r != resources.DaemonSets || ms[1].r != resources.Namespaces || ms[1].obj.GetName() != "edge" {
		t.Fatalf("decoded %d manifests", len(ms))
	}
	if ds := ms[0].obj.(*appsv1.DaemonSet); ds.Spec.Template.Spec.Containers[0].Image != "busybox:1.36" {
		t.Fatalf("decoded %+v", ds.Spec)
	}
	for doc, want := range map[string]string{
		"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec: {selectr: {}}\n": `unknown field "selectr"`,
		"apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\n":                           `resource mapping not found for kind "Job"`,
		"kind: DaemonSet\n": "apiVersion or kind not set",
		"a: [b\n":           "error parsing",
	} {
		if _, err := decodeManifests("bad.yaml", strings.NewReader(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", doc, err, want)
		}
	}
}

// fakeAPI is a minimal in-memory client.Interface for apply's logic: one
// DaemonSet slot, resourceVersions counting writes.
type fakeAPI struct {
	client.Interface
	ds     *appsv1.DaemonSet
	writes int
}

func (f *fakeAPI) Get(_ context.Context, r *resources.Resource, ns, name string) (client.Object, error) {
	if f.ds == nil || f.ds.Name != name {
		return nil, apierrors.NewNotFound(r.GroupResource(), name)
	}
	return f.ds.DeepCopy(), nil
}

func (f *fakeAPI) Create(_ context.Context, obj client.Object, _ client.WriteOptions) (client.Object, error) {
	f.writes++
	f.ds = obj.(*appsv1.DaemonSet).DeepCopy()
	f.ds.ResourceVersion = "1"
	// A server default the manifest does not mention must survive applies.
	f.ds.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	return f.ds.DeepCopy(), nil
}

func (f *fakeAPI) Update(_ context.Context, obj client.Object, _ client.WriteOptions) (client.Object, error) {
	if obj.GetResourceVersion() != f.ds.ResourceVersion {
		return nil, apierrors.NewConflict(resources.DaemonSets.GroupResource(), obj.GetName(), nil)
	}
	f.writes++
	f.ds = obj.(*appsv1.DaemonSet).DeepCopy()
	f.ds.ResourceVersion = f.ds.ResourceVersion + "+"
	return f.ds.DeepCopy(), nil
}

func (f *fakeAPI) Watch(context.Context, *resources.Resource, string, client.ListOptions) (watch.Interface, error) {
	return nil, apierrors.NewMethodNotSupported(resources.DaemonSets.GroupResource(), "watch")
}

func (f *fakeAPI) Patch(context.Context, *resources.Resource, string, string, types.PatchType, []byte, client.WriteOptions, string) (client.Object, error) {
	return nil, apierrors.NewMethodNotSupported(resources.DaemonSets.GroupResource(), "patch")
}

func TestApplyCreateUpdateUnchanged(t *testing.T) {
	api := &fakeAPI{}
	c := &ApplyCommand{main: NewMain()}
	apply := func(doc string) string {
		t.Helper()
		ms, err := decodeManifests("x.yaml", strings.NewReader(doc))
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.applyOne(context.Background(), api, ms[0])
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := strings.SplitN(twoDocs, "---\n# only", 2)[0]
	if got := apply(first); got != "created" {
		t.Fatalf("first apply: %s", got)
	}
	if api.ds.Namespace != "default" || api.ds.Annotations[LastAppliedAnnotation] == "" {
		t.Fatalf("created without namespace or last-applied annotation: %+v", api.ds.ObjectMeta)
	}
	if got := apply(first); got != "unchanged" || api.writes != 1 {
		t.Fatalf("second apply: %s after %d writes", got, api.writes)
	}
	// Change the image and drop a toleration: the toleration must go (three-way
	// merge), the server-defaulted imagePullPolicy must stay.
	changed := strings.Replace(strings.Replace(first, "busybox:1.36", "busybox:1.37", 1), "      - {key: b, operator: Exists}\n", "", 1)
	if got := apply(changed); got != "configured" {
		t.Fatalf("changed apply: %s", got)
	}
	spec := api.ds.Spec.Template.Spec
	if spec.Containers[0].Image != "busybox:1.37" || len(spec.Tolerations) != 1 || spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
		t.Fatalf("after update: image %s, tolerations %v, pull policy %q", spec.Containers[0].Image, spec.Tolerations, spec.Containers[0].ImagePullPolicy)
	}
	if got := apply(changed); got != "unchanged" {
		t.Fatalf("re-apply: %s", got)
	}
	ms, _ := decodeManifests("x.yaml", strings.NewReader(first))
	c.namespace = "other"
	if _, err := c.applyOne(context.Background(), api, ms[0]); err != nil {
		t.Fatal(err) // no namespace in the manifest: -n decides
	}
	ms[0].raw["metadata"].(map[string]any)["namespace"] = "kube-system"
	if _, err := c.applyOne(context.Background(), api, ms[0]); err == nil || !strings.Contains(err.Error(), "does not match the namespace") {
		t.Fatalf("namespace mismatch: err = %v", err)
	}
}
