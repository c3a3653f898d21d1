package daemonset

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/resources"
)

// Fixtures ported from Kubernetes' daemon_controller_test.go
// (docs/controller-rules.md §9).

var (
	simpleDaemonSetLabel  = map[string]string{"name": "simple-daemon", "type": "production"}
	simpleDaemonSetLabel2 = map[string]string{"name": "simple-daemon", "type": "test"}
	simpleNodeLabel       = map[string]string{"color": "blue", "speed": "fast"}
	simpleNodeLabel2      = map[string]string{"color": "red", "speed": "fast"}

	noScheduleTolerations = []corev1.Toleration{{Key: "dedicated", Value: "user1", Effect: "NoSchedule"}}
	noScheduleTaints      = []corev1.Taint{{Key: "dedicated", Value: "user1", Effect: "NoSchedule"}}
	noExecuteTaints       = []corev1.Taint{{Key: "dedicated", Value: "user1", Effect: "NoExecute"}}
)

// testStart is the fake clock's initial time.
var testStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var uidSeq struct {
	sync.Mutex
	n int
}

func newUID() types.UID {
	uidSeq.Lock()
	defer uidSeq.Unlock()
	uidSeq.n++
	return types.UID(fmt.Sprintf("11111111-0000-4000-8000-%012d", uidSeq.n))
}

func newDaemonSet(name string) *appsv1.DaemonSet {
	two := int32(2)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{UID: newUID(), Name: name, Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DaemonSetSpec{
			RevisionHistoryLimit: &two,
			UpdateStrategy:       appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
			Selector:             &metav1.LabelSelector{MatchLabels: simpleDaemonSetLabel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: simpleDaemonSetLabel},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:                   "foo",
						Image:                  "foo/bar",
						TerminationMessagePath: corev1.TerminationMessagePathDefault,
						ImagePullPolicy:        corev1.PullIfNotPresent,
					}},
					DNSPolicy: corev1.DNSDefault,
				},
			},
		},
	}
}

func newRollingUpdateStrategy() *appsv1.DaemonSetUpdateStrategy {
	one := intstr.FromInt32(1)
	return &appsv1.DaemonSetUpdateStrategy{
		Type:          appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &one},
	}
}

func newOnDeleteStrategy() *appsv1.DaemonSetUpdateStrategy {
	return &appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
}

func updateStrategies() []*appsv1.DaemonSetUpdateStrategy {
	return []*appsv1.DaemonSetUpdateStrategy{newOnDeleteStrategy(), newRollingUpdateStrategy()}
}

func newUpdateSurge(value intstr.IntOrString) appsv1.DaemonSetUpdateStrategy {
	zero := intstr.FromInt32(0)
	return appsv1.DaemonSetUpdateStrategy{
		Type:          appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &zero, MaxSurge: &value},
	}
}

func newUpdateUnavailable(value intstr.IntOrString) appsv1.DaemonSetUpdateStrategy {
	return appsv1.DaemonSetUpdateStrategy{
		Type:          appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &value},
	}
}

func newNode(name string, label map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: label},
		Status: corev1.NodeStatus{
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("100")},
		},
	}
}

func addNodes(store cache.Store, start, n int, label map[string]string) {
	for i := start; i < start+n; i++ {
		store.Add(newNode(fmt.Sprintf("node-%d", i), label))
	}
}

var podSeq struct {
	sync.Mutex
	n int
}

func genName(prefix string) string {
	podSeq.Lock()
	defer podSeq.Unlock()
	podSeq.n++
	return fmt.Sprintf("%s%05d", prefix, podSeq.n)
}

// newPod is Kubernetes' newPod: with ds, the pod carries ds's controllerRef
// and the hash label of ds's current template.
func newPod(prefix, nodeName string, label map[string]string, ds *appsv1.DaemonSet) *corev1.Pod {
	lbls := map[string]string{}
	for k, v := range label {
		lbls[k] = v
	}
	var spec corev1.PodSpec
	if ds != nil {
		lbls[RevisionHashLabel] = ComputeHash(&ds.Spec.Template, ds.Status.CollisionCount)
		spec = *ds.Spec.Template.Spec.DeepCopy()
	} else {
		spec = corev1.PodSpec{Containers: []corev1.Container{{Name: "foo", Image: "foo/bar"}}}
	}
	if nodeName != "" {
		spec.NodeName = nodeName
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: genName(prefix), GenerateName: prefix, Labels: lbls, Namespace: metav1.NamespaceDefault, UID: newUID()},
		Spec:       spec,
	}
	if ds != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)}
	}
	return pod
}

func addPods(store cache.Store, nodeName string, label map[string]string, ds *appsv1.DaemonSet, n int) {
	for i := 0; i < n; i++ {
		store.Add(newPod(nodeName+"-", nodeName, label, ds))
	}
}

func addFailedPods(store cache.Store, nodeName string, label map[string]string, ds *appsv1.DaemonSet, n int) {
	for i := 0; i < n; i++ {
		p := newPod(nodeName+"-", nodeName, label, ds)
		p.Status = corev1.PodStatus{Phase: corev1.PodFailed}
		store.Add(p)
	}
}

func setNodeTaint(node *corev1.Node, taints []corev1.Taint) { node.Spec.Taints = taints }

func setDaemonSetToleration(ds *appsv1.DaemonSet, t []corev1.Toleration) {
	ds.Spec.Template.Spec.Tolerations = t
}

func markPodReady(pod *corev1.Pod, at time.Time) {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			if pod.Status.Conditions[i].Status != corev1.ConditionTrue {
				pod.Status.Conditions[i].Status = corev1.ConditionTrue
				pod.Status.Conditions[i].LastTransitionTime = metav1.NewTime(at)
			}
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
		Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)})
}

// fakePodControl is Kubernetes' test fakePodControl: it records creates,
// deletes and patches, adds created pods to the pod cache and observes the
// expectations at once; deleting a pod it did not create fails (as upstream),
// a created one is removed from the cache.
type fakePodControl struct {
	mu           sync.Mutex
	podStore     cache.Store
	expectations *expectations

	Templates       []*corev1.Pod
	DeletePodName   []string
	Patches         [][]byte
	CreateLimit     int
	CreateCallCount int
	Err             error
	created         map[string]*corev1.Pod
}

func (f *fakePodControl) CreatePod(ctx context.Context, pod *corev1.Pod, ds *appsv1.DaemonSet) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.CreateCallCount++
	if f.CreateLimit != 0 && f.CreateCallCount > f.CreateLimit {
		return fmt.Errorf("not creating pod, limit %d already reached (create call %d)", f.CreateLimit, f.CreateCallCount)
	}
	f.Templates = append(f.Templates, pod.DeepCopy())
	if f.Err != nil {
		return f.Err
	}
	p := pod.DeepCopy()
	p.Name = genName(pod.GenerateName)
	p.UID = newUID()
	f.podStore.Update(p)
	f.created[p.Name] = p
	f.expectations.CreationObserved(dsKey(ds))
	return nil
}

func (f *fakePodControl) DeletePod(ctx context.Context, namespace, name string, ds *appsv1.DaemonSet) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.DeletePodName = append(f.DeletePodName, name)
	if f.Err != nil {
		return f.Err
	}
	p, ok := f.created[name]
	if !ok {
		return fmt.Errorf("pod %q does not exist", name)
	}
	f.podStore.Delete(p)
	delete(f.created, name)
	f.expectations.DeletionObserved(dsKey(ds))
	return nil
}

// PatchPod records the patch and applies it to the cached pod (a new object).
func (f *fakePodControl) PatchPod(ctx context.Context, namespace, name string, patch []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Patches = append(f.Patches, patch)
	if f.Err != nil {
		return f.Err
	}
	obj, ok, _ := f.podStore.GetByKey(namespace + "/" + name)
	if !ok {
		return nil
	}
	orig, _ := json.Marshal(obj)
	out, err := strategicpatch.StrategicMergePatch(orig, patch, &corev1.Pod{})
	if err != nil {
		return err
	}
	p := &corev1.Pod{}
	if err := json.Unmarshal(out, p); err != nil {
		return err
	}
	f.podStore.Update(p)
	return nil
}

func (f *fakePodControl) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Templates, f.DeletePodName, f.Patches = nil, nil, nil
	f.CreateCallCount = 0
}

// fakeRecorder counts events.
type fakeRecorder struct {
	mu     sync.Mutex
	Events []string
}

func (r *fakeRecorder) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Events = append(r.Events, eventType+" "+reason+" "+fmt.Sprintf(format, args...))
}

func (r *fakeRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.Events)
}

// testController bundles a Controller with its fakes and caches.
type testController struct {
	*Controller
	client       *fake.Client
	podControl   *fakePodControl
	recorder     *fakeRecorder
	clock        *testingclock.FakeClock
	dsStore      cache.Store
	podStore     cache.Store
	nodeStore    cache.Store
	historyStore cache.Store
}

// newTestController builds a controller whose API is a fake.Client seeded
// with objs, whose caches are filled by the test, and whose pod control and
// recorder are fakes. Nothing runs in the background.
func newTestController(t testing.TB, objs ...*appsv1.DaemonSet) *testController {
	t.Helper()
	fc := fake.New()
	for _, o := range objs {
		if err := fc.Seed(o); err != nil {
			t.Fatal(err)
		}
	}
	clk := testingclock.NewFakeClock(testStart)
	fc.SetClock(clk)
	c, err := New(Config{Client: fc, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	// The informers' caches, which the listers read and the test fills:
	// New adds daemonsets, pods, nodes and controllerrevisions in that order.
	infs := c.informers.Informers()
	dsStore, podStore, nodeStore, crStore := infs[0].GetStore(), infs[1].GetStore(), infs[2].GetStore(), infs[3].GetStore()
	pc := &fakePodControl{podStore: podStore, expectations: c.expectations, created: map[string]*corev1.Pod{}}
	rec := &fakeRecorder{}
	c.podControl = pc
	c.recorder = rec
	c.rolloutRecorder = rec
	t.Cleanup(c.queue.ShutDown)
	return &testController{
		Controller: c, client: fc, podControl: pc, recorder: rec, clock: clk,
		dsStore: dsStore, podStore: podStore, nodeStore: nodeStore, historyStore: crStore,
	}
}

func (tc *testController) resetCounters() {
	tc.podControl.Clear()
	tc.recorder.mu.Lock()
	tc.recorder.Events = nil
	tc.recorder.mu.Unlock()
}

func validateSyncDaemonSets(tc *testController, creates, deletes, events int) error {
	pc := tc.podControl
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if len(pc.Templates) != creates {
		return fmt.Errorf("unexpected number of creates: expected %d, saw %d", creates, len(pc.Templates))
	}
	if len(pc.DeletePodName) != deletes {
		return fmt.Errorf("unexpected number of deletes: expected %d, got %v", deletes, pc.DeletePodName)
	}
	if n := tc.recorder.count(); n != events {
		return fmt.Errorf("unexpected number of events: expected %d, saw %d: %v", events, n, tc.recorder.Events)
	}
	for _, p := range pc.Templates {
		ref := metav1.GetControllerOfNoCopy(p)
		if ref == nil || ref.APIVersion != "apps/v1" || ref.Kind != "DaemonSet" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			return fmt.Errorf("created pod has controllerRef %+v", ref)
		}
	}
	return nil
}

func expectSyncDaemonSets(t *testing.T, tc *testController, ds *appsv1.DaemonSet, creates, deletes, events int) {
	t.Helper()
	expectSyncDaemonSetsWithError(t, tc, ds, creates, deletes, events, nil)
}

func expectSyncDaemonSetsWithError(t *testing.T, tc *testController, ds *appsv1.DaemonSet, creates, deletes, events int, wantErr error) {
	t.Helper()
	err := tc.sync(context.Background(), dsKey(ds))
	if wantErr != nil && !errorsIs(err, wantErr) {
		t.Fatalf("sync error %v, want %v", err, wantErr)
	}
	if wantErr == nil && err != nil {
		t.Log(err)
	}
	if err := validateSyncDaemonSets(tc, creates, deletes, events); err != nil {
		t.Fatal(err)
	}
}

// clearExpectations is Kubernetes' helper: forget counters and expectations;
// pods without a creation time get "now".
func clearExpectations(t testing.TB, tc *testController, ds *appsv1.DaemonSet) {
	t.Helper()
	tc.podControl.Clear()
	tc.expectations.Delete(dsKey(ds))
	for _, obj := range tc.podStore.List() {
		pod := obj.(*corev1.Pod)
		if pod.CreationTimestamp.IsZero() {
			pod.CreationTimestamp = metav1.NewTime(tc.clock.Now())
		}
	}
}

func markPodsReady(tc *testController) {
	for _, obj := range tc.podStore.List() {
		markPodReady(obj.(*corev1.Pod), tc.clock.Now())
	}
}

// lastStatusUpdate returns the DaemonSet as last written through UpdateStatus, or nil.
func lastStatusUpdate(t testing.TB, tc *testController, ds *appsv1.DaemonSet) *appsv1.DaemonSet {
	t.Helper()
	written := false
	for _, a := range tc.client.Actions() {
		if a.Verb == fake.VerbUpdate && a.Resource == "daemonsets" && a.Subresource == "status" && a.Name == ds.Name {
			written = true
		}
	}
	if !written {
		return nil
	}
	o, err := tc.client.Get(context.Background(), resources.DaemonSets, ds.Namespace, ds.Name)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*appsv1.DaemonSet)
}

func queuedKeys(tc *testController) []string {
	var keys []string
	for n := tc.queue.Len(); n > 0; n-- {
		k, done := tc.queue.Get()
		if done {
			break
		}
		keys = append(keys, k)
		tc.queue.Done(k)
	}
	sort.Strings(keys)
	return keys
}
