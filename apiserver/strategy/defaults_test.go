package strategy

import (
	"testing"

	"github.com/everynode/everynode/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestManifestsCreate runs both shared manifests through Decode, Default,
// PrepareForCreate and ValidateCreate and compares with what Kubernetes stores.
func TestManifestsCreate(t *testing.T) {
	defaultStrategy := appsv1.DaemonSetUpdateStrategy{
		Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			MaxSurge:       ptr.To(intstr.FromInt32(0)),
		},
	}
	wantMeta := func(name, ns string, labels map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name: name, Namespace: ns, Labels: labels, UID: testUID(), Generation: 1,
			CreationTimestamp: metav1.NewTime(testNow.Truncate(1e9)),
			Annotations:       map[string]string{TemplateGenerationAnnotation: "1"},
		}
	}
	podDefaults := func(s corev1.PodSpec) corev1.PodSpec {
		s.RestartPolicy = corev1.RestartPolicyAlways
		s.DNSPolicy = corev1.DNSClusterFirst
		s.SchedulerName = corev1.DefaultSchedulerName
		s.SecurityContext = &corev1.PodSecurityContext{}
		s.TerminationGracePeriodSeconds = ptr.To[int64](30)
		return s
	}
	ctrDefaults := func(c corev1.Container) corev1.Container {
		c.ImagePullPolicy = corev1.PullIfNotPresent
		c.TerminationMessagePath = "/dev/termination-log"
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
		return c
	}
	unset := corev1.HostPathUnset
	want := map[string]*appsv1.DaemonSet{
		"testdata/redis-ds.yaml": {
			ObjectMeta: wantMeta("redis-ds", "default", map[string]string{"app": "redis-ds"}),
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"name": "redis-ds"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"name": "redis-ds"}},
					Spec: podDefaults(corev1.PodSpec{
						Containers: []corev1.Container{ctrDefaults(corev1.Container{
							Name: "redis", Image: "redis:5-alpine",
							Ports: []corev1.ContainerPort{{ContainerPort: 6379, Protocol: corev1.ProtocolTCP}},
						})},
						Tolerations: []corev1.Toleration{{Key: "node-role.kubernetes.io/master", Effect: corev1.TaintEffectNoSchedule, Operator: corev1.TolerationOpExists}},
					}),
				},
				UpdateStrategy:       defaultStrategy,
				RevisionHistoryLimit: ptr.To[int32](10),
			},
		},
		"testdata/fluentd-elasticsearch.yaml": {
			ObjectMeta: wantMeta("fluentd-elasticsearch", "kube-system", map[string]string{"k8s-app": "fluentd-logging"}),
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"name": "fluentd-elasticsearch"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"name": "fluentd-elasticsearch"}},
					Spec: podDefaults(corev1.PodSpec{
						Tolerations: []corev1.Toleration{{Key: "node-role.kubernetes.io/master", Effect: corev1.TaintEffectNoSchedule}},
						Containers: []corev1.Container{ctrDefaults(corev1.Container{
							Name: "fluentd-elasticsearch", Image: "fluent/fluentd-kubernetes-daemonset:v1.7.1-debian-syslog-1.0",
							Resources: corev1.ResourceRequirements{
								Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("200Mi")},
								Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("200Mi")},
							},
							VolumeMounts: []corev1.VolumeMount{
								{Name: "varlog", MountPath: "/var/log"},
								{Name: "varlibdockercontainers", MountPath: "/var/lib/docker/containers", ReadOnly: true},
							},
						})},
						Volumes: []corev1.Volume{
							{Name: "varlog", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log", Type: &unset}}},
							{Name: "varlibdockercontainers", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/docker/containers", Type: &unset}}},
						},
					}),
				},
				UpdateStrategy:       defaultStrategy,
				RevisionHistoryLimit: ptr.To[int32](10),
			},
		},
	}
	for _, path := range manifests {
		t.Run(path, func(t *testing.T) {
			got := createDS(t, path)
			w := want[path]
			resources.DaemonSets.SetTypeMeta(w)
			if !apiequality.Semantic.DeepEqual(got, w) {
				t.Errorf("created object differs from Kubernetes':\n got %+v\nwant %+v", got, w)
			}
			// Defaulting is idempotent, and a stored copy reads back equal.
			again := got.DeepCopy()
			Default(resources.DaemonSets, again)
			if !apiequality.Semantic.DeepEqual(got, again) {
				t.Errorf("second Default changed the object")
			}
			back := stored(t, resources.DaemonSets, got, "")
			if !apiequality.Semantic.DeepEqual(got, back) {
				t.Errorf("JSON round trip changed the object")
			}
		})
	}
}

func TestDefaultDaemonSetStrategy(t *testing.T) {
	tests := []struct {
		name string
		in   appsv1.DaemonSetUpdateStrategy
		want appsv1.DaemonSetUpdateStrategy
	}{
		{"empty", appsv1.DaemonSetUpdateStrategy{}, appsv1.DaemonSetUpdateStrategy{Type: "RollingUpdate",
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1)), MaxSurge: ptr.To(intstr.FromInt32(0))}}},
		{"surge only keeps maxUnavailable default", appsv1.DaemonSetUpdateStrategy{
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxSurge: ptr.To(intstr.FromString("10%"))}},
			appsv1.DaemonSetUpdateStrategy{Type: "RollingUpdate",
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1)), MaxSurge: ptr.To(intstr.FromString("10%"))}}},
		{"OnDelete untouched", appsv1.DaemonSetUpdateStrategy{Type: "OnDelete"}, appsv1.DaemonSetUpdateStrategy{Type: "OnDelete"}},
		{"OnDelete keeps rollingUpdate as given", appsv1.DaemonSetUpdateStrategy{Type: "OnDelete", RollingUpdate: &appsv1.RollingUpdateDaemonSet{}},
			appsv1.DaemonSetUpdateStrategy{Type: "OnDelete", RollingUpdate: &appsv1.RollingUpdateDaemonSet{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ds := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{UpdateStrategy: tc.in, RevisionHistoryLimit: ptr.To[int32](0)}}
			Default(resources.DaemonSets, ds)
			if !apiequality.Semantic.DeepEqual(ds.Spec.UpdateStrategy, tc.want) {
				t.Errorf("got %+v, want %+v", ds.Spec.UpdateStrategy, tc.want)
			}
			if *ds.Spec.RevisionHistoryLimit != 0 {
				t.Errorf("revisionHistoryLimit 0 was overwritten: %d", *ds.Spec.RevisionHistoryLimit)
			}
		})
	}
}

func TestImagePullPolicyDefault(t *testing.T) {
	tests := []struct {
		image string
		want  corev1.PullPolicy
	}{
		{"busybox", corev1.PullAlways},
		{"busybox:latest", corev1.PullAlways},
		{"busybox:1.36", corev1.PullIfNotPresent},
		{"localhost:5000/busybox", corev1.PullAlways},
		{"localhost:5000/busybox:1.0", corev1.PullIfNotPresent},
		{"busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", corev1.PullIfNotPresent},
		{"busybox:latest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", corev1.PullAlways},
	}
	for _, tc := range tests {
		c := corev1.Container{Image: tc.image}
		defaultContainer(&c)
		if c.ImagePullPolicy != tc.want {
			t.Errorf("%s: %s, want %s", tc.image, c.ImagePullPolicy, tc.want)
		}
	}
}

func TestDefaultPod(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		HostNetwork: true,
		Containers: []corev1.Container{{
			Name: "c", Image: "img:1",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("0.0001")},
			},
			LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 3},
			Env:            []corev1.EnvVar{{Name: "N", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
		}},
		Volumes: []corev1.Volume{{Name: "scratch"}},
	}}
	Default(resources.Pods, pod)
	c := pod.Spec.Containers[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"hostPort", c.Ports[0].HostPort, int32(8080)},
		{"protocol", c.Ports[0].Protocol, corev1.ProtocolTCP},
		{"requests from limits", c.Resources.Requests.Cpu().String(), "1"},
		{"quantities rounded up to milli", c.Resources.Requests.Memory().String(), "1m"},
		{"enableServiceLinks", *pod.Spec.EnableServiceLinks, true},
		{"liveness timeout", c.LivenessProbe.TimeoutSeconds, int32(1)},
		{"liveness period", c.LivenessProbe.PeriodSeconds, int32(10)},
		{"liveness success", c.LivenessProbe.SuccessThreshold, int32(1)},
		{"liveness failure", c.LivenessProbe.FailureThreshold, int32(3)},
		{"httpGet path", c.LivenessProbe.HTTPGet.Path, "/"},
		{"httpGet scheme", c.LivenessProbe.HTTPGet.Scheme, corev1.URISchemeHTTP},
		{"readiness period kept", c.ReadinessProbe.PeriodSeconds, int32(3)},
		{"fieldRef apiVersion", c.Env[0].ValueFrom.FieldRef.APIVersion, "v1"},
		{"empty volume is emptyDir", pod.Spec.Volumes[0].EmptyDir != nil, true},
		{"restartPolicy", pod.Spec.RestartPolicy, corev1.RestartPolicyAlways},
		{"dnsPolicy", pod.Spec.DNSPolicy, corev1.DNSClusterFirst},
		{"schedulerName", pod.Spec.SchedulerName, "default-scheduler"},
		{"terminationGracePeriodSeconds", *pod.Spec.TerminationGracePeriodSeconds, int64(30)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}

	// Templates do not get the Pod-only defaults.
	ds := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		HostNetwork: true, Containers: []corev1.Container{{Name: "c", Image: "i", Ports: []corev1.ContainerPort{{ContainerPort: 80}}}},
	}}}}
	Default(resources.DaemonSets, ds)
	if ds.Spec.Template.Spec.EnableServiceLinks != nil || ds.Spec.Template.Spec.Containers[0].Ports[0].HostPort != 0 {
		t.Errorf("template got Pod-only defaults: %+v", ds.Spec.Template.Spec)
	}
}

func TestDefaultNamespaceAndNode(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}
	Default(resources.Namespaces, ns)
	if ns.Status.Phase != corev1.NamespaceActive || ns.Labels[corev1.LabelMetadataName] != "team-a" {
		t.Errorf("namespace defaults: %+v", ns)
	}
	node := &corev1.Node{Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}}
	Default(resources.Nodes, node)
	if node.Status.Allocatable.Cpu().String() != "4" {
		t.Errorf("allocatable %v", node.Status.Allocatable)
	}
}
