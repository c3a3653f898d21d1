package strategy

import (
	"strings"

	"github.com/everynode/everynode/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Default values Kubernetes fills in (pkg/apis/core/v1/defaults.go,
// pkg/apis/apps/v1/defaults.go).
const (
	defaultRevisionHistoryLimit   int32 = 10
	defaultTerminationGracePeriod int64 = 30
	defaultVolumeMode             int32 = 0o644
	defaultProbeTimeout           int32 = 1
	defaultProbePeriod            int32 = 10
	defaultProbeSuccess           int32 = 1
	defaultProbeFailure           int32 = 3
	defaultTokenExpirationSeconds int64 = 3600
)

// Default applies the defaults Kubernetes applies on create and update:
// DaemonSet (docs/controller-rules.md §6.1) and the pod-spec defaults of its
// template, Pod (spec defaults plus the Pod-only ones: enableServiceLinks,
// requests from limits, hostPort from containerPort with hostNetwork),
// Namespace (phase Active, kubernetes.io/metadata.name label), Node
// (allocatable from capacity), Secret (stringData merged into data, type
// Opaque), and PriorityClass and the stored-only kinds (Kubernetes' own
// defaulters, see defaultStored). Other kinds have no defaults.
func Default(r *resources.Resource, obj resources.Object) {
	defaultRBAC(obj)
	switch o := obj.(type) {
	case *corev1.Secret:
		defaultSecret(o)
	case *appsv1.DaemonSet:
		defaultDaemonSet(o)
	case *corev1.Pod:
		defaultPod(o)
	case *corev1.Namespace:
		defaultNamespace(o)
	case *corev1.Node:
		defaultNode(o)
	default:
		defaultStored(o)
	}
	if r != nil && obj.GetObjectKind().GroupVersionKind().Empty() {
		r.SetTypeMeta(obj)
	}
}

func defaultDaemonSet(ds *appsv1.DaemonSet) {
	us := &ds.Spec.UpdateStrategy
	if us.Type == "" {
		us.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if us.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if us.RollingUpdate == nil {
			us.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		if us.RollingUpdate.MaxUnavailable == nil {
			v := intstr.FromInt32(1)
			us.RollingUpdate.MaxUnavailable = &v
		}
		if us.RollingUpdate.MaxSurge == nil {
			v := intstr.FromInt32(0)
			us.RollingUpdate.MaxSurge = &v
		}
	}
	if ds.Spec.RevisionHistoryLimit == nil {
		v := defaultRevisionHistoryLimit
		ds.Spec.RevisionHistoryLimit = &v
	}
	defaultPodSpec(&ds.Spec.Template.Spec)
}

func defaultPod(p *corev1.Pod) {
	defaultPodSpec(&p.Spec)
	// SetDefaults_Pod: only on Pods, not on templates.
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for i := range cs {
			requestsFromLimits(&cs[i].Resources)
		}
	}
	if p.Spec.EnableServiceLinks == nil {
		v := corev1.DefaultEnableServiceLinks
		p.Spec.EnableServiceLinks = &v
	}
	if p.Spec.HostNetwork {
		defaultHostNetworkPorts(p.Spec.Containers)
		defaultHostNetworkPorts(p.Spec.InitContainers)
	}
}

// requestsFromLimits sets each missing request to its limit.
func requestsFromLimits(rr *corev1.ResourceRequirements) {
	if rr.Limits == nil {
		return
	}
	if rr.Requests == nil {
		rr.Requests = corev1.ResourceList{}
	}
	for k, v := range rr.Limits {
		if _, ok := rr.Requests[k]; !ok {
			rr.Requests[k] = v.DeepCopy()
		}
	}
}

// defaultHostNetworkPorts sets hostPort = containerPort when unset.
func defaultHostNetworkPorts(cs []corev1.Container) {
	for i := range cs {
		for j := range cs[i].Ports {
			if cs[i].Ports[j].HostPort == 0 {
				cs[i].Ports[j].HostPort = cs[i].Ports[j].ContainerPort
			}
		}
	}
}

// defaultPodSpec applies SetDefaults_PodSpec and the defaults of everything a
// PodSpec contains (containers, ports, probes, volumes, env sources).
func defaultPodSpec(s *corev1.PodSpec) {
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	if s.TerminationGracePeriodSeconds == nil {
		v := defaultTerminationGracePeriod
		s.TerminationGracePeriodSeconds = &v
	}
	if s.SchedulerName == "" {
		s.SchedulerName = corev1.DefaultSchedulerName
	}
	for i := range s.InitContainers {
		defaultContainer(&s.InitContainers[i])
	}
	for i := range s.Containers {
		defaultContainer(&s.Containers[i])
	}
	for i := range s.Volumes {
		defaultVolume(&s.Volumes[i])
	}
}

func defaultContainer(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		if imageTag(c.Image) == "latest" {
			c.ImagePullPolicy = corev1.PullAlways
		} else {
			c.ImagePullPolicy = corev1.PullIfNotPresent
		}
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if vf := c.Env[i].ValueFrom; vf != nil && vf.FieldRef != nil && vf.FieldRef.APIVersion == "" {
			vf.FieldRef.APIVersion = "v1"
		}
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
	roundUpResources(c.Resources.Limits)
	roundUpResources(c.Resources.Requests)
	if c.Lifecycle != nil {
		defaultHandler(c.Lifecycle.PostStart)
		defaultHandler(c.Lifecycle.PreStop)
	}
}

// imageTag returns the tag Kubernetes' parsers.ParseImageName would find:
// the explicit tag, "" for a digest-only reference, "latest" otherwise.
func imageTag(image string) string {
	ref := image
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
		// A digest without a tag has no tag.
		if j := strings.LastIndexByte(ref, ':'); j < 0 || strings.ContainsRune(ref[j:], '/') {
			return ""
		}
	}
	j := strings.LastIndexByte(ref, ':')
	if j < 0 || strings.ContainsRune(ref[j:], '/') {
		return "latest"
	}
	return ref[j+1:]
}

func defaultProbe(p *corev1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = defaultProbeTimeout
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = defaultProbePeriod
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = defaultProbeSuccess
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = defaultProbeFailure
	}
	if h := p.HTTPGet; h != nil {
		defaultHTTPGet(h)
	}
	if g := p.GRPC; g != nil && g.Service == nil {
		g.Service = new(string)
	}
}

// roundUpResources is SetDefaults_ResourceList: quantities are rounded up to
// milli precision ("0.0001" CPU becomes "1m").
func roundUpResources(rl corev1.ResourceList) {
	for k, v := range rl {
		if v.RoundUp(-3) {
			continue
		}
		rl[k] = v
	}
}

func defaultHandler(h *corev1.LifecycleHandler) {
	if h != nil && h.HTTPGet != nil {
		defaultHTTPGet(h.HTTPGet)
	}
}

func defaultHTTPGet(h *corev1.HTTPGetAction) {
	if h.Path == "" {
		h.Path = "/"
	}
	if h.Scheme == "" {
		h.Scheme = corev1.URISchemeHTTP
	}
}

func defaultVolume(v *corev1.Volume) {
	vs := &v.VolumeSource
	if (*vs == corev1.VolumeSource{}) {
		vs.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	if vs.HostPath != nil && vs.HostPath.Type == nil {
		t := corev1.HostPathUnset
		vs.HostPath.Type = &t
	}
	if vs.Secret != nil && vs.Secret.DefaultMode == nil {
		m := defaultVolumeMode
		vs.Secret.DefaultMode = &m
	}
	if vs.ConfigMap != nil && vs.ConfigMap.DefaultMode == nil {
		m := defaultVolumeMode
		vs.ConfigMap.DefaultMode = &m
	}
	if vs.DownwardAPI != nil {
		if vs.DownwardAPI.DefaultMode == nil {
			m := defaultVolumeMode
			vs.DownwardAPI.DefaultMode = &m
		}
		for i := range vs.DownwardAPI.Items {
			if fr := vs.DownwardAPI.Items[i].FieldRef; fr != nil && fr.APIVersion == "" {
				fr.APIVersion = "v1"
			}
		}
	}
	if vs.Projected != nil {
		if vs.Projected.DefaultMode == nil {
			m := defaultVolumeMode
			vs.Projected.DefaultMode = &m
		}
		for i := range vs.Projected.Sources {
			if t := vs.Projected.Sources[i].ServiceAccountToken; t != nil && t.ExpirationSeconds == nil {
				v := defaultTokenExpirationSeconds
				t.ExpirationSeconds = &v
			}
		}
	}
}

func defaultNamespace(ns *corev1.Namespace) {
	if ns.Status.Phase == "" {
		ns.Status.Phase = corev1.NamespaceActive
	}
	if ns.Name != "" {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
	}
}

func defaultNode(n *corev1.Node) {
	if n.Status.Allocatable == nil && n.Status.Capacity != nil {
		n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	}
	roundUpResources(n.Status.Capacity)
	roundUpResources(n.Status.Allocatable)
}

// defaultSecret does what kube-apiserver's v1 → internal conversion and
// SetDefaults_Secret do (k8s.io/kubernetes pkg/apis/core/v1/conversion.go
// Convert_v1_Secret_To_core_Secret, pkg/apis/core/v1/defaults.go): each
// stringData entry overwrites the data entry of its key and stringData is
// dropped, so it is never stored nor returned; an empty type is Opaque.
func defaultSecret(s *corev1.Secret) {
	if len(s.StringData) > 0 {
		if s.Data == nil {
			s.Data = make(map[string][]byte, len(s.StringData))
		}
		for k, v := range s.StringData {
			s.Data[k] = []byte(v)
		}
	}
	s.StringData = nil
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
}
