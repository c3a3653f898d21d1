package strategy

import (
	"strconv"
	"time"

	"github.com/everynode/everynode/internal/apiequal"
	"github.com/everynode/everynode/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
)

// TemplateGenerationAnnotation is the apps/v1 face of the DaemonSet's internal
// spec.templateGeneration (docs/controller-rules.md §6.2, §6.3).
const TemplateGenerationAnnotation = "deprecated.daemonset.template.generation"

// Name generation as Kubernetes' names.SimpleNameGenerator does it.
const (
	randomNameLength       = 5
	maxGeneratedNameLength = 63 - randomNameLength
)

// PrepareForCreate sets the server-owned metadata of a new object and applies
// the resource's create-time rules (Kubernetes' rest.BeforeCreate plus the
// registry strategies' PrepareForCreate):
//   - name from generateName (plus 5 random characters) when the name is empty;
//   - uid = newUID(), creationTimestamp = now to the second, generation = 1;
//   - resourceVersion, deletionTimestamp, deletionGracePeriodSeconds and
//     managedFields cleared; namespace cleared for cluster-scoped resources;
//   - DaemonSet: status cleared, templateGeneration annotation
//     (docs/controller-rules.md §6.2);
//   - Pod: status reset to phase Pending with its QoS class;
//   - Namespace: status reset to phase Active, spec.finalizers cleared;
//   - Node: status kept (the agent registers with it);
//   - ServiceAccount: secret references keep only their name.
func PrepareForCreate(r *resources.Resource, obj resources.Object, now time.Time, newUID func() types.UID) {
	if obj.GetName() == "" && obj.GetGenerateName() != "" {
		obj.SetName(generateName(obj.GetGenerateName()))
	}
	if r != nil && !r.Namespaced {
		obj.SetNamespace("")
	}
	obj.SetUID(newUID())
	obj.SetCreationTimestamp(metav1.NewTime(now.Truncate(time.Second).Local()))
	obj.SetGeneration(1)
	obj.SetResourceVersion("")
	obj.SetDeletionTimestamp(nil)
	obj.SetDeletionGracePeriodSeconds(nil)
	obj.SetManagedFields(nil)
	if r != nil {
		r.SetTypeMeta(obj)
	}

	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		o.Status = appsv1.DaemonSetStatus{}
		tg := templateGeneration(o)
		if tg < 1 {
			tg = 1
		}
		setTemplateGeneration(o, tg)
	case *corev1.Pod:
		o.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: podQOS(&o.Spec)}
	case *corev1.Namespace:
		// Kubernetes also puts the "kubernetes" finalizer into spec.finalizers
		// for its namespace controller; everynode has none, so spec.finalizers
		// stays empty and namespace deletion never waits on it.
		o.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
		o.Spec.Finalizers = nil
	case *corev1.ServiceAccount:
		cleanSecretReferences(o)
	default:
		prepareStoredCreate(o)
	}
}

// cleanSecretReferences keeps only the name of each secret reference of a
// ServiceAccount, as its registry strategy does
// (k8s.io/kubernetes pkg/registry/core/serviceaccount/strategy.go).
func cleanSecretReferences(sa *corev1.ServiceAccount) {
	for i, ref := range sa.Secrets {
		sa.Secrets[i] = corev1.ObjectReference{Name: ref.Name}
	}
}

// generateName appends 5 random characters to base, shortening base first so
// the result stays within 63 characters.
func generateName(base string) string {
	if len(base) > maxGeneratedNameLength {
		base = base[:maxGeneratedNameLength]
	}
	return base + utilrand.String(randomNameLength)
}

// templateGeneration reads the annotation; absent or unparsable → 0.
func templateGeneration(ds *appsv1.DaemonSet) int64 {
	v, ok := ds.Annotations[TemplateGenerationAnnotation]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func setTemplateGeneration(ds *appsv1.DaemonSet, tg int64) {
	if ds.Annotations == nil {
		ds.Annotations = map[string]string{}
	}
	ds.Annotations[TemplateGenerationAnnotation] = strconv.FormatInt(tg, 10)
}

// PrepareForUpdate applies the update-time rules to obj, the new state, given
// old, the stored state (Kubernetes' rest.BeforeUpdate plus PrepareForUpdate):
//   - generation comes from old; uid when obj has none (a different one fails
//     ValidateUpdate); creationTimestamp, deletionTimestamp and
//     deletionGracePeriodSeconds when old has them; managedFields are cleared;
//     resourceVersion is left as the client sent it (the HTTP layer uses it
//     for the CAS); namespace cleared for cluster-scoped resources;
//   - status comes from old (a spec update cannot change status);
//   - Pod, Node: generation++ when the spec changed (semantically);
//     Namespace: spec (finalizers) also comes from old;
//   - DaemonSet: the templateGeneration annotation comes from old and is
//     incremented, with generation, when spec.template changed
//     (docs/controller-rules.md §6.3);
//   - ServiceAccount: secret references keep only their name.
func PrepareForUpdate(r *resources.Resource, obj, old resources.Object) {
	keepServerMeta(obj, old)
	if r != nil {
		if !r.Namespaced {
			obj.SetNamespace("")
		}
		r.SetTypeMeta(obj)
	}
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		od, ok := old.(*appsv1.DaemonSet)
		if !ok {
			return
		}
		o.Status = *od.Status.DeepCopy()
		tg := templateGeneration(od)
		if tg < 1 {
			tg = 1
		}
		if !apiequality.Semantic.DeepEqual(o.Spec.Template, od.Spec.Template) {
			tg++
			o.Generation = od.Generation + 1
		} else if !apiequality.Semantic.DeepEqual(o.Spec, od.Spec) {
			o.Generation = od.Generation + 1
		}
		setTemplateGeneration(o, tg)
	case *corev1.Pod:
		if op, ok := old.(*corev1.Pod); ok {
			o.Status = *op.Status.DeepCopy()
			// Times in a spec (an ephemeral volume's claim template's
			// metadata) count to the second, as they are stored.
			if !apiequal.Equal(&o.Spec, &op.Spec) {
				o.SetGeneration(o.GetGeneration() + 1)
			}
		}
	case *corev1.Node:
		if on, ok := old.(*corev1.Node); ok {
			o.Status = *on.Status.DeepCopy()
			bumpIfChanged(o, o.Spec, on.Spec)
		}
	case *corev1.Namespace:
		// spec.finalizers change only through /finalize, which everynode does not serve.
		if ons, ok := old.(*corev1.Namespace); ok {
			o.Status = *ons.Status.DeepCopy()
			o.Spec = *ons.Spec.DeepCopy()
		}
	case *corev1.ServiceAccount:
		cleanSecretReferences(o)
	default:
		prepareStoredUpdate(o, old)
	}
}

// bumpIfChanged increments obj's generation when spec differs from oldSpec.
func bumpIfChanged(obj resources.Object, spec, oldSpec any) {
	if !apiequality.Semantic.DeepEqual(spec, oldSpec) {
		obj.SetGeneration(obj.GetGeneration() + 1)
	}
}

// keepServerMeta copies the server-set metadata from old to obj as
// Kubernetes' rest.BeforeUpdate does: generation always; uid only when obj has
// none (a different uid is a precondition that ValidateUpdate rejects as
// immutable, which the DaemonSet controller's adoption patches rely on);
// creationTimestamp, deletionTimestamp and deletionGracePeriodSeconds when old
// has them (an update can neither change nor remove them, and setting a
// deletionTimestamp is rejected as immutable).
func keepServerMeta(obj, old resources.Object) {
	obj.SetGeneration(old.GetGeneration())
	if obj.GetUID() == "" {
		obj.SetUID(old.GetUID())
	}
	if ct := old.GetCreationTimestamp(); !ct.IsZero() {
		obj.SetCreationTimestamp(ct)
	}
	if dt := old.GetDeletionTimestamp(); dt != nil && !dt.IsZero() {
		obj.SetDeletionTimestamp(dt)
	}
	if g := old.GetDeletionGracePeriodSeconds(); g != nil && obj.GetDeletionGracePeriodSeconds() == nil {
		obj.SetDeletionGracePeriodSeconds(g)
	}
	obj.SetManagedFields(nil)
}

// PrepareForStatusUpdate applies the rules of a /status write: only status
// may change, so spec and all metadata except resourceVersion come from old.
// A uid the write carries is kept too, as kube-apiserver keeps it: it is a
// precondition (a status patch for a pod that was since re-created under the
// same name), which ValidateUpdate rejects as immutable when it differs.
func PrepareForStatusUpdate(r *resources.Resource, obj, old resources.Object) {
	rv, uid := obj.GetResourceVersion(), obj.GetUID()
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		if od, ok := old.(*appsv1.DaemonSet); ok {
			o.ObjectMeta = *od.ObjectMeta.DeepCopy()
			o.Spec = *od.Spec.DeepCopy()
		}
	case *corev1.Pod:
		if op, ok := old.(*corev1.Pod); ok {
			o.ObjectMeta = *op.ObjectMeta.DeepCopy()
			o.Spec = *op.Spec.DeepCopy()
		}
	case *corev1.Node:
		if on, ok := old.(*corev1.Node); ok {
			o.ObjectMeta = *on.ObjectMeta.DeepCopy()
			o.Spec = *on.Spec.DeepCopy()
		}
	case *corev1.Namespace:
		if ons, ok := old.(*corev1.Namespace); ok {
			o.ObjectMeta = *ons.ObjectMeta.DeepCopy()
			o.Spec = *ons.Spec.DeepCopy()
		}
	default:
		if prepareStoredStatusUpdate(obj, old) {
			break
		}
		// Kinds without status: the write may change nothing at all.
		if m, om := objectMeta(obj), objectMeta(old); m != nil && om != nil {
			*m = *om.DeepCopy()
		}
	}
	obj.SetResourceVersion(rv)
	if uid != "" {
		obj.SetUID(uid)
	}
	if r != nil {
		r.SetTypeMeta(obj)
	}
}

// podQOS computes the pod's QoS class as Kubernetes' qos.GetPodQOS does for
// regular and init containers: BestEffort without any request or limit,
// Guaranteed when every container limits cpu and memory and requests equal
// limits, Burstable otherwise.
func podQOS(spec *corev1.PodSpec) corev1.PodQOSClass {
	requested, guaranteed := false, true
	all := append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...)
	for _, c := range all {
		req, lim := c.Resources.Requests, c.Resources.Limits
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			rq, hasReq := req[name]
			lq, hasLim := lim[name]
			if (hasReq && !rq.IsZero()) || (hasLim && !lq.IsZero()) {
				requested = true
			}
			if !hasLim || lq.IsZero() {
				guaranteed = false
				continue
			}
			if hasReq && rq.Cmp(lq) != 0 {
				guaranteed = false
			}
		}
	}
	switch {
	case !requested:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	default:
		return corev1.PodQOSBurstable
	}
}
