package strategy

import (
	"fmt"
	"testing"
	"time"

	"github.com/everynode/everynode/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestPrepareForCreate(t *testing.T) {
	obj, err := Decode(resources.DaemonSets, ContentTypeJSON, []byte(`{"metadata":{"name":"a","namespace":"default",
		"uid":"client-uid","resourceVersion":"42","generation":7,"creationTimestamp":"2000-01-01T00:00:00Z",
		"deletionTimestamp":"2000-01-01T00:00:00Z","deletionGracePeriodSeconds":3,
		"managedFields":[{"manager":"m","operation":"Update"}],
		"annotations":{"deprecated.daemonset.template.generation":"4"}},
		"status":{"numberReady":3,"observedGeneration":9}}`), true)
	if err != nil {
		t.Fatal(err)
	}
	PrepareForCreate(resources.DaemonSets, obj, testNow, testUID)
	ds := obj.(*appsv1.DaemonSet)
	if ds.UID != testUID() || ds.ResourceVersion != "" || ds.Generation != 1 || ds.DeletionTimestamp != nil ||
		ds.DeletionGracePeriodSeconds != nil || ds.ManagedFields != nil {
		t.Errorf("server metadata not reset: %+v", ds.ObjectMeta)
	}
	if !ds.CreationTimestamp.Time.Equal(testNow.Truncate(time.Second)) {
		t.Errorf("creationTimestamp %v", ds.CreationTimestamp)
	}
	if !apiequality.Semantic.DeepEqual(ds.Status, appsv1.DaemonSetStatus{}) {
		t.Errorf("status not cleared: %+v", ds.Status)
	}
	// A client-sent templateGeneration is honoured (docs/controller-rules.md
	// §6.2); below 1 is raised to 1.
	if got := ds.Annotations[TemplateGenerationAnnotation]; got != "4" {
		t.Errorf("templateGeneration %q, want 4", got)
	}
	ds.Annotations[TemplateGenerationAnnotation] = "0"
	PrepareForCreate(resources.DaemonSets, ds, testNow, testUID)
	if got := ds.Annotations[TemplateGenerationAnnotation]; got != "1" {
		t.Errorf("templateGeneration %q, want 1", got)
	}

	// generateName, cluster-scoped namespace cleared.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "edge-", Namespace: "oops"}}
	PrepareForCreate(resources.Nodes, node, testNow, testUID)
	if len(node.Name) != len("edge-")+5 || node.Name[:5] != "edge-" || node.Namespace != "" {
		t.Errorf("node name %q namespace %q", node.Name, node.Namespace)
	}
	if errs := ValidateCreate(resources.Nodes, node); len(errs) > 0 {
		t.Errorf("generated node invalid: %v", errs)
	}

	// Pods start Pending with their QoS class.
	for _, tc := range []struct {
		res  corev1.ResourceRequirements
		want corev1.PodQOSClass
	}{
		{corev1.ResourceRequirements{}, corev1.PodQOSBestEffort},
		{corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}, corev1.PodQOSBurstable},
		{corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}, corev1.PodQOSGuaranteed},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i", Resources: tc.res}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		Default(resources.Pods, pod)
		PrepareForCreate(resources.Pods, pod, testNow, testUID)
		if pod.Status.Phase != corev1.PodPending || pod.Status.QOSClass != tc.want {
			t.Errorf("pod status %+v, want Pending/%s", pod.Status, tc.want)
		}
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"},
		Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"example.com/x"}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}}
	PrepareForCreate(resources.Namespaces, ns, testNow, func() types.UID { return "ns-uid" })
	if ns.Status.Phase != corev1.NamespaceActive || ns.UID != "ns-uid" || ns.Spec.Finalizers != nil {
		t.Errorf("namespace %+v", ns)
	}
	next := ns.DeepCopy()
	next.Spec.Finalizers = []corev1.FinalizerName{"example.com/y"}
	next.Status.Phase = corev1.NamespaceTerminating
	PrepareForUpdate(resources.Namespaces, next, ns)
	if next.Spec.Finalizers != nil || next.Status.Phase != corev1.NamespaceActive {
		t.Errorf("namespace update changed spec or status: %+v", next)
	}
}

// TestGeneration covers docs/controller-rules.md §6.3: metadata-only no bump,
// other spec change bumps generation only, template change bumps generation
// and templateGeneration.
func TestGeneration(t *testing.T) {
	tests := []struct {
		name           string
		mutate         func(*appsv1.DaemonSet)
		wantGeneration int64
		wantTemplate   string
	}{
		{"no change", func(*appsv1.DaemonSet) {}, 1, "1"},
		{"labels only", func(ds *appsv1.DaemonSet) { ds.Labels["extra"] = "x" }, 1, "1"},
		{"annotations only", func(ds *appsv1.DaemonSet) { ds.Annotations["note"] = "x" }, 1, "1"},
		{"minReadySeconds", func(ds *appsv1.DaemonSet) { ds.Spec.MinReadySeconds = 5 }, 2, "1"},
		{"update strategy", func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = intPtr(2) }, 2, "1"},
		{"revisionHistoryLimit", func(ds *appsv1.DaemonSet) { ds.Spec.RevisionHistoryLimit = ptr.To[int32](3) }, 2, "1"},
		{"image", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "redis:6" }, 2, "2"},
		{"template annotation (rollout restart)", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-22T03:39:09Z"}
		}, 2, "2"},
		{"template and other spec", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Containers[0].Image = "redis:6"
			ds.Spec.MinReadySeconds = 5
		}, 2, "2"},
		{"client cannot set templateGeneration", func(ds *appsv1.DaemonSet) { ds.Annotations[TemplateGenerationAnnotation] = "9" }, 1, "1"},
		{"client cannot set generation", func(ds *appsv1.DaemonSet) { ds.Generation = 40 }, 1, "1"},
		{"client cannot remove templateGeneration", func(ds *appsv1.DaemonSet) { delete(ds.Annotations, TemplateGenerationAnnotation) }, 1, "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old := stored(t, resources.DaemonSets, createDS(t, manifests[0]), "10").(*appsv1.DaemonSet)
			old.Status.NumberReady = 2
			ds := old.DeepCopy()
			ds.Status = appsv1.DaemonSetStatus{NumberReady: 99}
			tc.mutate(ds)
			Default(resources.DaemonSets, ds)
			PrepareForUpdate(resources.DaemonSets, ds, old)
			if errs := ValidateUpdate(resources.DaemonSets, ds, old); len(errs) > 0 {
				t.Fatalf("invalid: %v", errs)
			}
			if ds.Generation != tc.wantGeneration {
				t.Errorf("generation %d, want %d", ds.Generation, tc.wantGeneration)
			}
			if got := ds.Annotations[TemplateGenerationAnnotation]; got != tc.wantTemplate {
				t.Errorf("templateGeneration %q, want %q", got, tc.wantTemplate)
			}
			if ds.Status.NumberReady != 2 {
				t.Errorf("status changed by spec update: %+v", ds.Status)
			}
			if ds.UID != old.UID || !ds.CreationTimestamp.Equal(&old.CreationTimestamp) || ds.ResourceVersion != "10" {
				t.Errorf("server metadata changed: %+v", ds.ObjectMeta)
			}
			// A second template change counts up again.
			if tc.wantTemplate == "2" {
				next := ds.DeepCopy()
				next.Spec.Template.Spec.Containers[0].Image = "redis:7"
				PrepareForUpdate(resources.DaemonSets, next, ds)
				if next.Generation != 3 || next.Annotations[TemplateGenerationAnnotation] != "3" {
					t.Errorf("second template change: generation %d templateGeneration %s", next.Generation, next.Annotations[TemplateGenerationAnnotation])
				}
			}
		})
	}
}

func TestPrepareForUpdateOtherKinds(t *testing.T) {
	oldPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u", Generation: 1, ResourceVersion: "3"},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	Default(resources.Pods, oldPod)
	pod := oldPod.DeepCopy()
	pod.Status.Phase = corev1.PodFailed
	pod.Spec.Containers[0].Image = "i:2"
	PrepareForUpdate(resources.Pods, pod, oldPod)
	if pod.Status.Phase != corev1.PodRunning || pod.Generation != 2 {
		t.Errorf("pod update: phase %s generation %d", pod.Status.Phase, pod.Generation)
	}
	if errs := ValidateUpdate(resources.Pods, pod, oldPod); len(errs) > 0 {
		t.Errorf("image update invalid: %v", errs)
	}

	oldNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u", Generation: 1, ResourceVersion: "3"},
		Status: corev1.NodeStatus{Phase: corev1.NodeRunning}}
	node := oldNode.DeepCopy()
	node.Labels = map[string]string{"zone": "a"}
	node.Status = corev1.NodeStatus{}
	PrepareForUpdate(resources.Nodes, node, oldNode)
	if node.Status.Phase != corev1.NodeRunning || node.Generation != 1 {
		t.Errorf("node update: %+v", node)
	}
	node.Spec.Unschedulable = true
	PrepareForUpdate(resources.Nodes, node, oldNode)
	if node.Generation != 2 {
		t.Errorf("node spec change: generation %d", node.Generation)
	}
}

// TestStatusUpdate: a /status write changes only status.
func TestStatusUpdate(t *testing.T) {
	old := stored(t, resources.DaemonSets, createDS(t, manifests[0]), "10").(*appsv1.DaemonSet)
	ds := old.DeepCopy()
	ds.ResourceVersion = "10"
	ds.Spec.Template.Spec.Containers[0].Image = "evil:1"
	ds.Spec.MinReadySeconds = 100
	ds.Labels = map[string]string{"hijacked": "yes"}
	ds.Generation = 50
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, NumberReady: 2, ObservedGeneration: 1}
	PrepareForStatusUpdate(resources.DaemonSets, ds, old)
	if !apiequality.Semantic.DeepEqual(ds.Spec, old.Spec) {
		t.Errorf("status update changed spec")
	}
	if !apiequality.Semantic.DeepEqual(ds.ObjectMeta, old.ObjectMeta) {
		t.Errorf("status update changed metadata: %+v", ds.ObjectMeta)
	}
	if ds.Status.DesiredNumberScheduled != 3 || ds.Status.NumberReady != 2 {
		t.Errorf("status not taken: %+v", ds.Status)
	}
	if errs := ValidateUpdate(resources.DaemonSets, ds, old); len(errs) > 0 {
		t.Errorf("status update invalid: %v", errs)
	}

	ds.ResourceVersion = "9"
	PrepareForStatusUpdate(resources.DaemonSets, ds, old)
	if ds.ResourceVersion != "9" {
		t.Errorf("resourceVersion %q, want the client's 9 for the CAS", ds.ResourceVersion)
	}

	oldPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	pod := oldPod.DeepCopy()
	pod.Spec.NodeName = "n2"
	pod.Status.Phase = corev1.PodRunning
	PrepareForStatusUpdate(resources.Pods, pod, oldPod)
	if pod.Spec.NodeName != "n1" || pod.Status.Phase != corev1.PodRunning {
		t.Errorf("pod status update: node %s phase %s", pod.Spec.NodeName, pod.Status.Phase)
	}
	// A uid in a status write is a precondition: the same uid passes, another
	// is refused as immutable (a status meant for a pod since re-created).
	curPod := validPod()
	Default(resources.Pods, curPod)
	PrepareForCreate(resources.Pods, curPod, testNow, func() types.UID { return "uid-1" })
	curPod.ResourceVersion = "8"
	for uid, ok := range map[types.UID]bool{"": true, "uid-1": true, "uid-2": false} {
		pod := curPod.DeepCopy()
		pod.UID = uid
		pod.Status.Phase = corev1.PodFailed
		PrepareForStatusUpdate(resources.Pods, pod, curPod)
		errs := ValidateUpdate(resources.Pods, pod, curPod)
		if got := len(errs) == 0; got != ok || (!ok && errs[0].Field != "metadata.uid") {
			t.Errorf("status update with uid %q: %v", uid, errs)
		}
	}

	oldNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	node := oldNode.DeepCopy()
	node.Spec.Unschedulable = false
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	PrepareForStatusUpdate(resources.Nodes, node, oldNode)
	if !node.Spec.Unschedulable || len(node.Status.Conditions) != 1 {
		t.Errorf("node status update: %+v", node)
	}
}

// TestUpdateServerMetadata: uid in a patch is a precondition, timestamps are kept.
func TestUpdateServerMetadata(t *testing.T) {
	cur := stored(t, resources.Pods, func() resources.Object {
		p := validPod()
		PrepareForCreate(resources.Pods, p, testNow, testUID)
		return p
	}(), "8").(*corev1.Pod)

	// The DaemonSet controller's adoption patch carries the pod's uid.
	adopt := `{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"ds","uid":"ds-uid","controller":true,"blockOwnerDeletion":true}],"uid":%q}}`
	obj, err := ApplyPatch(resources.Pods, cur, types.StrategicMergePatchType, []byte(fmt.Sprintf(adopt, cur.UID)))
	if err != nil {
		t.Fatal(err)
	}
	Default(resources.Pods, obj)
	PrepareForUpdate(resources.Pods, obj, cur)
	if errs := ValidateUpdate(resources.Pods, obj, cur); len(errs) > 0 {
		t.Errorf("adoption with matching uid invalid: %v", errs)
	}
	obj, err = ApplyPatch(resources.Pods, cur, types.StrategicMergePatchType, []byte(fmt.Sprintf(adopt, "someone-else")))
	if err != nil {
		t.Fatal(err)
	}
	PrepareForUpdate(resources.Pods, obj, cur)
	wantFieldError(t, ValidateUpdate(resources.Pods, obj, cur), `metadata.uid: Invalid value: "someone-else": field is immutable`)

	// Without uid, creationTimestamp or deletion fields the stored ones are kept.
	next := cur.DeepCopy()
	next.UID, next.CreationTimestamp = "", metav1.Time{}
	PrepareForUpdate(resources.Pods, next, cur)
	if next.UID != cur.UID || !next.CreationTimestamp.Equal(&cur.CreationTimestamp) {
		t.Errorf("uid %q creationTimestamp %v not kept", next.UID, next.CreationTimestamp)
	}
	// An update cannot start a deletion.
	next = cur.DeepCopy()
	now := metav1.NewTime(testNow)
	next.DeletionTimestamp = &now
	PrepareForUpdate(resources.Pods, next, cur)
	wantFieldError(t, ValidateUpdate(resources.Pods, next, cur), "metadata.deletionTimestamp")
	// Nor remove one.
	deleting := cur.DeepCopy()
	deleting.DeletionTimestamp = &now
	deleting.DeletionGracePeriodSeconds = ptr.To[int64](30)
	next = deleting.DeepCopy()
	next.DeletionTimestamp, next.DeletionGracePeriodSeconds = nil, nil
	next.Finalizers = nil
	PrepareForUpdate(resources.Pods, next, deleting)
	if next.DeletionTimestamp == nil || next.DeletionGracePeriodSeconds == nil {
		t.Errorf("deletion fields dropped by an update")
	}
	if errs := ValidateUpdate(resources.Pods, next, deleting); len(errs) > 0 {
		t.Errorf("update of a deleting pod invalid: %v", errs)
	}
}
