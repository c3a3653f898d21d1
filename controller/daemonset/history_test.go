package daemonset

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/resources"
)

// History tests (docs/controller-rules.md §4): names, hashes, data, revision
// numbers, dedup, collisions and cleanup.

// syncHistoryStore makes the revision cache equal the fake API's revisions.
func syncHistoryStore(t testing.TB, tc *testController) []*appsv1.ControllerRevision {
	t.Helper()
	items, _, err := tc.client.List(context.Background(), resources.ControllerRevisions, "", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs := make([]any, len(items))
	out := make([]*appsv1.ControllerRevision, len(items))
	for i, o := range items {
		objs[i] = o
		out[i] = o.(*appsv1.ControllerRevision)
	}
	if err := tc.historyStore.Replace(objs, ""); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestComputeHash(t *testing.T) {
	ds := newDaemonSet("foo")
	h1 := ComputeHash(&ds.Spec.Template, nil)
	if h1 != ComputeHash(&ds.Spec.Template, nil) {
		t.Fatal("hash not deterministic")
	}
	if len(h1) == 0 || len(h1) > 10 || strings.Trim(h1, "bcdfghjklmnpqrstvwxz2456789") != "" {
		t.Errorf("hash %q is not a SafeEncodeString of a uint32", h1)
	}
	zero, one := int32(0), int32(1)
	if ComputeHash(&ds.Spec.Template, &zero) == h1 || ComputeHash(&ds.Spec.Template, &one) == ComputeHash(&ds.Spec.Template, &zero) {
		t.Error("collisionCount does not change the hash")
	}
	ds2 := ds.DeepCopy()
	ds2.Spec.Template.Spec.Containers[0].Image = "other"
	if ComputeHash(&ds2.Spec.Template, nil) == h1 {
		t.Error("template change does not change the hash")
	}
	ds3 := ds.DeepCopy()
	ds3.Spec.MinReadySeconds = 10
	ds3.Labels = map[string]string{"x": "y"}
	if ComputeHash(&ds3.Spec.Template, nil) != h1 {
		t.Error("non-template change changed the hash")
	}
}

func TestRevisionData(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Spec.Template.Annotations = map[string]string{"note": "<b>&"}
	data, err := RevisionData(ds)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if !strings.HasPrefix(s, `{"spec":{"template":{"$patch":"replace","metadata":{`) {
		t.Errorf("data %s", s)
	}
	if !strings.Contains(s, `\u003cb\u003e\u0026`) {
		t.Errorf("data not HTML-escaped as Go's encoder does: %s", s)
	}
	var m map[string]map[string]any
	if err := json.Unmarshal(data, &m); err != nil || len(m) != 1 || len(m["spec"]) != 1 {
		t.Fatalf("data is not {spec:{template:...}}: %s (%v)", s, err)
	}
	// It is a strategic merge patch restoring the template onto a changed DaemonSet.
	changed := ds.DeepCopy()
	changed.Spec.Template.Spec.Containers[0].Image = "changed"
	changed.Spec.Template.Labels = map[string]string{"extra": "x"}
	changed.Spec.MinReadySeconds = 7
	orig, _ := json.Marshal(changed)
	out, err := strategicpatch.StrategicMergePatch(orig, data, &appsv1.DaemonSet{})
	if err != nil {
		t.Fatal(err)
	}
	var restored appsv1.DaemonSet
	if err := json.Unmarshal(out, &restored); err != nil {
		t.Fatal(err)
	}
	if ok, _ := Match(&restored, &appsv1.ControllerRevision{Data: runtime.RawExtension{Raw: data}}); !ok {
		t.Errorf("patched template %+v does not match", restored.Spec.Template)
	}
	if restored.Spec.MinReadySeconds != 7 {
		t.Error("patch touched more than the template")
	}
}

func TestNewRevision(t *testing.T) {
	ds := newDaemonSet("foo")
	ds.Annotations = map[string]string{"kubernetes.io/change-cause": "v2", TemplateGenerationAnnotation: "2"}
	cr, err := NewRevision(ds, 4)
	if err != nil {
		t.Fatal(err)
	}
	hash := ComputeHash(&ds.Spec.Template, nil)
	if cr.Name != "foo-"+hash || cr.Namespace != "default" || cr.Revision != 4 {
		t.Errorf("name %s namespace %s revision %d", cr.Name, cr.Namespace, cr.Revision)
	}
	if cr.Labels[RevisionHashLabel] != hash || cr.Labels["name"] != "simple-daemon" || cr.Labels["type"] != "production" {
		t.Errorf("labels %v", cr.Labels)
	}
	if cr.Annotations["kubernetes.io/change-cause"] != "v2" || cr.Annotations[TemplateGenerationAnnotation] != "2" {
		t.Errorf("annotations %v", cr.Annotations)
	}
	ref := metav1.GetControllerOf(cr)
	if ref == nil || ref.UID != ds.UID || ref.Kind != "DaemonSet" || !*ref.BlockOwnerDeletion {
		t.Errorf("ownerReference %+v", ref)
	}
	if ok, _ := Match(ds, cr); !ok {
		t.Error("revision does not match its DaemonSet")
	}
	if cr.Kind != "ControllerRevision" || cr.APIVersion != "apps/v1" {
		t.Errorf("type meta %v", cr.TypeMeta)
	}
	// Template labels of the DaemonSet are not modified.
	if _, ok := ds.Spec.Template.Labels[RevisionHashLabel]; ok {
		t.Error("NewRevision modified the template labels")
	}
}

func TestConstructHistoryRollsForward(t *testing.T) {
	ctx := context.Background()
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	tc.dsStore.Add(ds)

	cur, old, err := tc.constructHistory(ctx, ds)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Revision != 1 || len(old) != 0 || cur.Name != "foo-"+ComputeHash(&ds.Spec.Template, nil) {
		t.Fatalf("first revision %s #%d, old %d", cur.Name, cur.Revision, len(old))
	}
	rev1 := cur.Name
	syncHistoryStore(t, tc)

	v1 := ds.Spec.Template.DeepCopy()
	ds.Spec.Template.Spec.Containers[0].Image = "v2"
	cur, old, err = tc.constructHistory(ctx, ds)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Revision != 2 || len(old) != 1 || old[0].Name != rev1 {
		t.Fatalf("second revision %s #%d, old %v", cur.Name, cur.Revision, old)
	}
	syncHistoryStore(t, tc)

	// Rolling back to the first template re-uses its revision, numbered 3.
	ds.Spec.Template = *v1
	cur, old, err = tc.constructHistory(ctx, ds)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Name != rev1 || cur.Revision != 3 || len(old) != 1 {
		t.Fatalf("rollback: %s #%d, old %d", cur.Name, cur.Revision, len(old))
	}
	if all := syncHistoryStore(t, tc); len(all) != 2 {
		t.Errorf("%d revisions after rollback, want 2", len(all))
	}
	// Steady state: no writes.
	tc.client.ClearActions()
	if _, _, err := tc.constructHistory(ctx, ds); err != nil {
		t.Fatal(err)
	}
	for _, a := range tc.client.Actions() {
		if a.Verb != fake.VerbGet {
			t.Errorf("steady state wrote: %v", a)
		}
	}
}

func TestConstructHistoryDedupAndLegacyLabel(t *testing.T) {
	ctx := context.Background()
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	tc.dsStore.Add(ds)
	a, _ := NewRevision(ds, 2)
	a.Name, a.Labels[RevisionHashLabel] = "foo-aaa", "aaa"
	b, _ := NewRevision(ds, 5)
	b.Name, b.Labels[RevisionHashLabel] = "foo-bbb", "bbb"
	legacy, _ := NewRevision(ds, 1)
	legacy.Name = "foo-legacy"
	delete(legacy.Labels, RevisionHashLabel)
	legacy.Data.Raw = []byte(`{"spec":{"template":{"$patch":"replace"}}}`)
	for _, cr := range []*appsv1.ControllerRevision{a, b, legacy} {
		if err := tc.client.Seed(cr); err != nil {
			t.Fatal(err)
		}
	}
	syncHistoryStore(t, tc)
	onA := newPod("p-", "node-0", simpleDaemonSetLabel, ds)
	onA.Labels[RevisionHashLabel] = "aaa"
	tc.podStore.Add(onA)
	onB := newPod("p-", "node-1", simpleDaemonSetLabel, ds)
	onB.Labels[RevisionHashLabel] = "bbb"
	tc.podStore.Add(onB)

	cur, old, err := tc.constructHistory(ctx, ds)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Name != "foo-bbb" || cur.Revision != 5 {
		t.Errorf("kept %s #%d, want foo-bbb #5", cur.Name, cur.Revision)
	}
	if len(old) != 1 || old[0].Name != "foo-legacy" || old[0].Labels[RevisionHashLabel] != "foo-legacy" {
		t.Errorf("old %v", old)
	}
	if _, err := tc.client.Get(ctx, resources.ControllerRevisions, "default", "foo-aaa"); !apierrors.IsNotFound(err) {
		t.Errorf("duplicate revision not deleted: %v", err)
	}
	if len(tc.podControl.Patches) != 1 || !strings.Contains(string(tc.podControl.Patches[0]), `"controller-revision-hash":"bbb"`) {
		t.Errorf("pod relabel patches %s", tc.podControl.Patches)
	}
	o, _, _ := tc.podStore.GetByKey("default/" + onA.Name)
	if o.(*corev1.Pod).Labels[RevisionHashLabel] != "bbb" {
		t.Error("pod not relabelled")
	}
}

func TestSnapshotHashCollision(t *testing.T) {
	ctx := context.Background()
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	tc.dsStore.Add(ds)
	// Another template already owns the name this template hashes to.
	squatter, _ := NewRevision(ds, 1)
	squatter.Data.Raw = []byte(`{"spec":{"template":{"$patch":"replace","spec":{}}}}`)
	tc.client.Seed(squatter)

	_, _, err := tc.constructHistory(ctx, ds)
	if !apierrors.IsAlreadyExists(err) {
		t.Fatalf("err %v, want AlreadyExists", err)
	}
	o, _ := tc.client.Get(ctx, resources.DaemonSets, "default", "foo")
	live := o.(*appsv1.DaemonSet)
	if live.Status.CollisionCount == nil || *live.Status.CollisionCount != 1 {
		t.Fatalf("collisionCount %v, want 1", live.Status.CollisionCount)
	}
	// A sync with the stale cached count retries without bumping again.
	if _, _, err := tc.constructHistory(ctx, ds); err == nil || !strings.Contains(err.Error(), "stale collision count") {
		t.Fatalf("stale count: %v", err)
	}
	// Once the cache has the new count, the revision gets a new name.
	ds.Status.CollisionCount = live.Status.CollisionCount
	cur, _, err := tc.constructHistory(ctx, ds)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Name == squatter.Name || cur.Name != "foo-"+ComputeHash(&ds.Spec.Template, ds.Status.CollisionCount) {
		t.Errorf("revision name %s", cur.Name)
	}
}

func TestCleanupHistory(t *testing.T) {
	cases := []struct {
		name    string
		limit   int32
		podHash string
		deleted []string
	}{
		{"limit 2, oldest used by a pod", 2, "h1", []string{"h2", "h3", "h4"}},
		{"limit 2, none used", 2, "", []string{"h1", "h2", "h3"}},
		{"limit 0 keeps only used", 0, "h3", []string{"h1", "h2", "h4", "h5"}},
		{"limit above count", 10, "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			ds := newDaemonSet("foo")
			ds.Spec.RevisionHistoryLimit = &c.limit
			tc := newTestController(t, ds)
			tc.dsStore.Add(ds)
			var old []*appsv1.ControllerRevision
			for i, h := range []string{"h3", "h1", "h5", "h2", "h4"} {
				cr, _ := NewRevision(ds, int64(h[1]-'0'))
				cr.Name, cr.Labels[RevisionHashLabel] = "foo-"+h, h
				cr.Data.Raw = []byte(`{"n":` + string(rune('0'+i)) + `}`)
				tc.client.Seed(cr)
				old = append(old, cr)
			}
			if c.podHash != "" {
				p := newPod("p-", "node-0", simpleDaemonSetLabel, ds)
				p.Labels[RevisionHashLabel] = c.podHash
				// Terminal pods being deleted still protect their revision.
				p.Status.Phase = corev1.PodSucceeded
				now := metav1.Now()
				p.DeletionTimestamp = &now
				tc.podStore.Add(p)
			}
			tc.client.ClearActions()
			if err := tc.cleanupHistory(ctx, ds, old); err != nil {
				t.Fatal(err)
			}
			var deleted []string
			for _, a := range tc.client.Actions() {
				if a.Verb == fake.VerbDelete {
					deleted = append(deleted, strings.TrimPrefix(a.Name, "foo-"))
				}
			}
			if strings.Join(deleted, ",") != strings.Join(c.deleted, ",") {
				t.Errorf("deleted %v, want %v", deleted, c.deleted)
			}
		})
	}
}

func TestSyncCleansHistoryKeepingCurrent(t *testing.T) {
	// Through sync: after 4 template changes with revisionHistoryLimit 2,
	// the current revision and 2 old ones remain.
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	tc.dsStore.Add(ds)
	for i := 0; i < 5; i++ {
		ds.Spec.Template.Spec.Containers[0].Image = "img:" + string(rune('a'+i))
		tc.dsStore.Update(ds)
		if err := tc.sync(context.Background(), dsKey(ds)); err != nil {
			t.Fatal(err)
		}
		syncHistoryStore(t, tc)
	}
	all := syncHistoryStore(t, tc)
	if len(all) != 3 {
		t.Fatalf("%d revisions, want 3", len(all))
	}
	var maxRev int64
	found := false
	for _, cr := range all {
		maxRev = max(maxRev, cr.Revision)
		if ok, _ := Match(ds, cr); ok {
			found = true
			if cr.Revision != 5 {
				t.Errorf("current revision #%d, want 5", cr.Revision)
			}
		}
	}
	if !found || maxRev != 5 {
		t.Errorf("current revision missing (max %d)", maxRev)
	}
}
