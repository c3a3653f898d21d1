package daemonset

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Label and annotation keys (docs/controller-rules.md §0).
const (
	// RevisionHashLabel carries the ControllerRevision hash on pods and revisions.
	RevisionHashLabel = appsv1.ControllerRevisionHashLabelKey
	// TemplateGenerationLabel carries the DaemonSet template generation on pods (deprecated upstream, still written).
	TemplateGenerationLabel = "pod-template-generation"
	// TemplateGenerationAnnotation is the apps/v1 view of the DaemonSet's template generation.
	TemplateGenerationAnnotation = appsv1.DeprecatedTemplateGeneration
)

// controllerKind is the ownerReference kind of daemon pods and revisions.
var controllerKind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

// templateGeneration returns the DaemonSet's template generation from its
// annotation, nil when absent, or an error when unparseable.
func templateGeneration(ds *appsv1.DaemonSet) (*int64, error) {
	s, ok := ds.Annotations[TemplateGenerationAnnotation]
	if !ok {
		return nil, nil
	}
	g, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("daemonset %s/%s: annotation %s=%q: %w", ds.Namespace, ds.Name, TemplateGenerationAnnotation, s, err)
	}
	return &g, nil
}

// isPodUpdated reports whether pod runs the current template
// (docs/controller-rules.md §3.1).
func isPodUpdated(pod *corev1.Pod, hash string, generation *int64) bool {
	if hash != "" && pod.Labels[RevisionHashLabel] == hash {
		return true
	}
	if generation == nil {
		return false
	}
	var buf [20]byte // the label compared with the generation's decimal form, without allocating it
	return pod.Labels[TemplateGenerationLabel] == string(strconv.AppendInt(buf[:0], *generation, 10))
}

func podReadyCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// IsPodReady reports whether the pod's Ready condition is True.
func IsPodReady(pod *corev1.Pod) bool {
	c := podReadyCondition(pod)
	return c != nil && c.Status == corev1.ConditionTrue
}

// IsPodAvailable reports whether the pod has been Ready for more than
// minReadySeconds at now (docs/controller-rules.md §3.2).
func IsPodAvailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	if !IsPodReady(pod) {
		return false
	}
	if minReadySeconds == 0 {
		return true
	}
	c := podReadyCondition(pod)
	return !c.LastTransitionTime.IsZero() &&
		c.LastTransitionTime.Add(time.Duration(minReadySeconds)*time.Second).Before(now)
}

func isPodTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

// targetNodeName is the node a daemon pod is for: spec.nodeName, else the
// single metadata.name value of its required node affinity
// (docs/controller-rules.md §2.4).
func targetNodeName(pod *corev1.Pod) (string, error) {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName, nil
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return "", fmt.Errorf("no spec.nodeName and no node affinity for pod %s/%s", pod.Namespace, pod.Name)
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == metav1.ObjectNameField && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0], nil
			}
		}
	}
	return "", fmt.Errorf("no node name found for pod %s/%s", pod.Namespace, pod.Name)
}

// sortPodsOldestFirst orders pods scheduled first, then by creationTimestamp,
// then by name (Kubernetes' podByCreationTimestampAndPhase).
func sortPodsOldestFirst(pods []*corev1.Pod) {
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if (a.Spec.NodeName != "") != (b.Spec.NodeName != "") {
			return a.Spec.NodeName != ""
		}
		if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.Name < b.Name
		}
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	})
}

// CreatePodTemplate is the template of every pod the controller creates for ds
// (docs/controller-rules.md §2.7): the DaemonSet's template plus the automatic
// tolerations, the pod-template-generation label (when generation is known) and
// the controller-revision-hash label.
func CreatePodTemplate(template corev1.PodTemplateSpec, generation *int64, hash string) corev1.PodTemplateSpec {
	t := *template.DeepCopy()
	AddOrUpdateDaemonPodTolerations(&t.Spec)
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	if generation != nil {
		t.Labels[TemplateGenerationLabel] = strconv.FormatInt(*generation, 10)
	}
	if hash != "" {
		t.Labels[RevisionHashLabel] = hash
	}
	return t
}

// ReplaceDaemonSetPodNodeNameNodeAffinity sets the required node affinity to
// the single term matchFields metadata.name In [nodeName], keeping preferred
// terms and other affinities (docs/controller-rules.md §2.7). It may modify and
// return affinity.
func ReplaceDaemonSetPodNodeNameNodeAffinity(affinity *corev1.Affinity, nodeName string) *corev1.Affinity {
	term := corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName},
	}}}
	sel := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}
	switch {
	case affinity == nil:
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: sel}}
	case affinity.NodeAffinity == nil:
		affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: sel}
	case affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil:
		affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = sel
	default:
		affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = sel.NodeSelectorTerms
	}
	return affinity
}

// NewDaemonPod builds the pod to create on nodeName from a template made by
// CreatePodTemplate: generateName "<ds>-", labels, annotations and finalizers
// from the template, the DaemonSet controller ownerReference, and — unlike
// Kubernetes, which leaves binding to the scheduler — spec.nodeName set, next to
// the matchFields node affinity Kubernetes writes.
func NewDaemonPod(template *corev1.PodTemplateSpec, ds *appsv1.DaemonSet, nodeName string) *corev1.Pod {
	t := template.DeepCopy()
	prefix := ds.Name + "-"
	if len(validation.NameIsDNSSubdomain(prefix, true)) != 0 {
		prefix = ds.Name
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    prefix,
			Namespace:       ds.Namespace,
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Spec: t.Spec,
	}
	pod.Spec.Affinity = ReplaceDaemonSetPodNodeNameNodeAffinity(pod.Spec.Affinity, nodeName)
	pod.Spec.NodeName = nodeName
	return pod
}
