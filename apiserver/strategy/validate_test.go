package strategy

import (
	"strings"
	"testing"

	"github.com/everynode/everynode/resources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func validPod() *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: "busybox:1.36",
				Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv"}}}},
		},
	}
	Default(resources.Pods, p)
	return p
}

// TestValidatePodSpec covers the PodSpec subset, on Pods (the DaemonSet
// template runs the same code under spec.template.spec).
func TestValidatePodSpec(t *testing.T) {
	c0 := "spec.containers[0]"
	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		want   string
	}{
		{"valid", func(*corev1.Pod) {}, ""},
		{"no containers", func(p *corev1.Pod) { p.Spec.Containers = nil }, "spec.containers: Required value"},
		{"container name missing", func(p *corev1.Pod) { p.Spec.Containers[0].Name = "" }, c0 + ".name: Required value"},
		{"container name not a DNS label", func(p *corev1.Pod) { p.Spec.Containers[0].Name = "App_1" }, c0 + ".name: Invalid value: \"App_1\""},
		{"duplicate container names", func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "app", Image: "x", ImagePullPolicy: "Always", TerminationMessagePolicy: "File"})
		}, "spec.containers[1].name: Duplicate value: \"app\""},
		{"init container name clashes", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "app", Image: "x", ImagePullPolicy: "Always", TerminationMessagePolicy: "File"}}
		}, c0 + ".name: Duplicate value: \"app\""},
		{"image missing", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, c0 + ".image: Required value"},
		{"image whitespace", func(p *corev1.Pod) { p.Spec.Containers[0].Image = " busybox" }, "must not have leading or trailing whitespace"},
		{"bad pull policy", func(p *corev1.Pod) { p.Spec.Containers[0].ImagePullPolicy = "Sometimes" }, c0 + ".imagePullPolicy: Unsupported value: \"Sometimes\""},
		{"container port zero", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 0 }, c0 + ".ports[0].containerPort: Required value"},
		{"container port too big", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 70000 },
			c0 + ".ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"},
		{"host port negative", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].HostPort = -1 }, c0 + ".ports[0].hostPort: Invalid value: -1"},
		{"bad protocol", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = "ICMP" }, c0 + ".ports[0].protocol: Unsupported value: \"ICMP\""},
		{"bad port name", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Name = "Not_A_Name" }, c0 + ".ports[0].name: Invalid value"},
		{"hostNetwork port mismatch", func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.Containers[0].Ports[0].HostPort = 9090
		}, "must match `hostPort` when `hostNetwork` is true"},
		{"mount of unknown volume", func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[0].Name = "nope" },
			c0 + ".volumeMounts[0].name: Not found: \"nope\""},
		{"mount path missing", func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[0].MountPath = "" }, c0 + ".volumeMounts[0].mountPath: Required value"},
		{"duplicate mount path", func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: "/data"})
		}, c0 + ".volumeMounts[1].mountPath: Invalid value: \"/data\": must be unique"},
		{"duplicate volume names", func(p *corev1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, p.Spec.Volumes[0]) },
			"spec.volumes[1].name: Duplicate value: \"data\""},
		{"volume name invalid", func(p *corev1.Pod) {
			p.Spec.Volumes[0].Name = "Data"
			p.Spec.Containers[0].VolumeMounts[0].Name = "Data"
		}, "spec.volumes[0].name: Invalid value: \"Data\""},
		{"hostPath path missing", func(p *corev1.Pod) { p.Spec.Volumes[0].HostPath.Path = "" }, "spec.volumes[0].hostPath.path: Required value"},
		{"hostPath bad type", func(p *corev1.Pod) { p.Spec.Volumes[0].HostPath.Type = ptr.To(corev1.HostPathType("Pipe")) },
			"spec.volumes[0].hostPath.type: Unsupported value: \"Pipe\""},
		{"two volume sources", func(p *corev1.Pod) { p.Spec.Volumes[0].EmptyDir = &corev1.EmptyDirVolumeSource{} },
			"spec.volumes[0]: Forbidden: may not specify more than 1 volume type"},
		{"no volume source", func(p *corev1.Pod) { p.Spec.Volumes[0].HostPath = nil }, "spec.volumes[0]: Required value: must specify a volume type"},
		{"bad restartPolicy", func(p *corev1.Pod) { p.Spec.RestartPolicy = "Sometimes" },
			"spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""},
		{"restartPolicy Never fine for pods", func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever }, ""},
		{"bad dnsPolicy", func(p *corev1.Pod) { p.Spec.DNSPolicy = "Google" }, "spec.dnsPolicy: Unsupported value: \"Google\""},
		{"nodeSelector bad key", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"bad key": "x"} },
			"spec.nodeSelector: Invalid value: \"bad key\""},
		{"nodeSelector bad value", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "ssd only"} },
			"spec.nodeSelector: Invalid value: \"ssd only\""},
		{"toleration bad operator", func(p *corev1.Pod) { p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: "Like"}} },
			"spec.tolerations[0].operator: Unsupported value: \"Like\": supported values: \"Equal\", \"Exists\""},
		{"toleration bad effect", func(p *corev1.Pod) { p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Effect: "NoRun"}} },
			"spec.tolerations[0].effect: Unsupported value: \"NoRun\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""},
		{"toleration empty key needs Exists", func(p *corev1.Pod) { p.Spec.Tolerations = []corev1.Toleration{{Operator: "Equal", Value: "v"}} },
			"operator must be Exists when `key` is empty"},
		{"toleration Exists with value", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: "Exists", Value: "v"}}
		},
			"value must be empty when `operator` is 'Exists'"},
		{"tolerationSeconds needs NoExecute", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: "Exists", Effect: "NoSchedule", TolerationSeconds: ptr.To[int64](5)}}
		}, "effect must be 'NoExecute' when `tolerationSeconds` is set"},
		{"toleration all keys", func(p *corev1.Pod) { p.Spec.Tolerations = []corev1.Toleration{{Operator: "Exists"}} }, ""},
		{"negative cpu", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}
		}, c0 + ".resources.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0"},
		{"request above limit", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
		}, c0 + ".resources.requests[memory]: Invalid value: \"2Gi\": must be less than or equal to memory limit of 1Gi"},
		{"unknown resource name", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"gpus": resource.MustParse("1")}
		}, "must be a standard resource type or fully qualified"},
		{"extended resource", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		}, ""},
		{"probe without handler", func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{TimeoutSeconds: 1, PeriodSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1}
		}, c0 + ".livenessProbe: Required value: must specify a handler type"},
		{"liveness successThreshold", func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}},
				TimeoutSeconds: 1, PeriodSeconds: 1, SuccessThreshold: 2, FailureThreshold: 1}
		}, c0 + ".livenessProbe.successThreshold: Invalid value: 2: must be 1"},
		{"probe named port", func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http")}}}
			Default(resources.Pods, p)
		}, ""},
		{"probe bad port", func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(0)}}}
			Default(resources.Pods, p)
		}, c0 + ".readinessProbe.httpGet.port: Invalid value: 0"},
		{"env valueFrom empty", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{}}}
		},
			c0 + ".env[0].valueFrom: Invalid value: \"\": must specify one of"},
		{"env fieldRef without path", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1"}}}}
		}, c0 + ".env[0].valueFrom.fieldRef.fieldPath: Required value"},
		{"duplicate host port", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports[0].HostPort = 8080
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "two", Image: "x", ImagePullPolicy: "Always", TerminationMessagePolicy: "File",
				Ports: []corev1.ContainerPort{{ContainerPort: 9090, HostPort: 8080, Protocol: "TCP"}}})
		}, "spec.containers[1].ports[0].hostPort: Duplicate value: \"TCP//8080\""},
		{"same host port other protocol", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports[0].HostPort = 8080
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: 8080, HostPort: 8080, Protocol: "UDP"})
		}, ""},
		{"env name missing", func(p *corev1.Pod) { p.Spec.Containers[0].Env = []corev1.EnvVar{{Value: "x"}} }, c0 + ".env[0].name: Required value"},
		{"activeDeadlineSeconds zero", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](0) },
			"spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive"},
		{"negative grace period", func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](-1) },
			"spec.terminationGracePeriodSeconds: Invalid value: -1: must be greater than or equal to 0"},
		{"bad nodeName", func(p *corev1.Pod) { p.Spec.NodeName = "Node_1" }, "spec.nodeName: Invalid value: \"Node_1\""},
		{"node affinity without terms", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{}}}
		}, "nodeSelectorTerms: Required value: must have at least one node selector term"},
		{"node affinity matchFields", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: "In", Values: []string{"n1"}}}}}}}}
		}, ""},
		{"node affinity bad operator", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: "Near"}}}}}}}
		}, "matchExpressions[0].operator: Unsupported value: \"Near\""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := validPod()
			tc.mutate(p)
			errs := ValidateCreate(resources.Pods, p)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			wantFieldError(t, errs, tc.want)
		})
	}
}

func TestValidatePodUpdate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		want   string
	}{
		{"image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "busybox:1.37" }, ""},
		{"bind to node", func(p *corev1.Pod) { p.Spec.NodeName = "n1" }, ""},
		{"add toleration", func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Operator: "Exists"})
		}, ""},
		{"labels", func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} }, ""},
		{"command", func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"sh"} }, "spec: Forbidden: pod updates may not change fields other than"},
		{"rebind", func(p *corev1.Pod) { p.Spec.NodeName = "n2" }, "spec: Forbidden: pod updates may not change fields other than"},
		{"remove toleration", func(p *corev1.Pod) { p.Spec.Tolerations = nil }, "spec.tolerations: Forbidden"},
		// The same quantity written another way is no change.
		{"memory limit 1Gi as bytes", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1073741824")}
		}, ""},
		{"memory limit raised", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1073741825")}
		}, "spec: Forbidden: pod updates may not change fields other than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old := validPod()
			old.ResourceVersion = "3"
			old.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
			if tc.name == "rebind" || tc.name == "remove toleration" {
				old.Spec.NodeName = "n1"
				old.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: "Exists"}}
			}
			p := old.DeepCopy()
			tc.mutate(p)
			PrepareForUpdate(resources.Pods, p, old)
			errs := ValidateUpdate(resources.Pods, p, old)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			wantFieldError(t, errs, tc.want)
		})
	}
}

func TestValidateOtherKinds(t *testing.T) {
	nodeWith := func(taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	tests := []struct {
		name string
		r    *resources.Resource
		obj  resources.Object
		want string
	}{
		{"namespace valid", resources.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, ""},
		{"namespace name is a DNS label", resources.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team.a"}},
			"metadata.name: Invalid value: \"team.a\": must not contain dots"},
		{"namespace has no namespace", resources.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "b"}},
			"metadata.namespace: Forbidden: not allowed on this type"},
		{"node valid", resources.Nodes, nodeWith(corev1.Taint{Key: "dedicated", Value: "edge", Effect: "NoSchedule"}), ""},
		{"node name subdomain", resources.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node.example.com"}}, ""},
		{"node bad name", resources.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "Node 1"}}, "metadata.name: Invalid value: \"Node 1\""},
		{"taint bad effect", resources.Nodes, nodeWith(corev1.Taint{Key: "k", Effect: "NoRun"}),
			"spec.taints[0].effect: Unsupported value: \"NoRun\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""},
		{"taint effect required", resources.Nodes, nodeWith(corev1.Taint{Key: "k"}), "spec.taints[0].effect: Required value"},
		{"taint bad key", resources.Nodes, nodeWith(corev1.Taint{Key: "bad key", Effect: "NoSchedule"}), "spec.taints[0].key: Invalid value: \"bad key\""},
		{"taint empty key", resources.Nodes, nodeWith(corev1.Taint{Effect: "NoSchedule"}), "spec.taints[0].key: Invalid value: \"\""},
		{"taint bad value", resources.Nodes, nodeWith(corev1.Taint{Key: "k", Value: "a b", Effect: "NoSchedule"}), "spec.taints[0].value: Invalid value: \"a b\""},
		{"taint duplicate", resources.Nodes, nodeWith(corev1.Taint{Key: "k", Effect: "NoSchedule"}, corev1.Taint{Key: "k", Value: "v", Effect: "NoSchedule"}),
			"taints must be unique by key and effect pair"},
		{"taint same key other effect", resources.Nodes, nodeWith(corev1.Taint{Key: "k", Effect: "NoSchedule"}, corev1.Taint{Key: "k", Effect: "NoExecute"}), ""},
		{"controllerrevision valid", resources.ControllerRevisions, &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "ds-abc", Namespace: "default"},
			Data: runtime.RawExtension{Raw: []byte(`{"spec":{}}`)}, Revision: 1}, ""},
		{"controllerrevision data required", resources.ControllerRevisions, &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "ds-abc", Namespace: "default"}},
			"data: Required value: data is mandatory"},
		{"controllerrevision negative revision", resources.ControllerRevisions, &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "ds-abc", Namespace: "default"},
			Data: runtime.RawExtension{Raw: []byte(`{}`)}, Revision: -1}, "revision: Invalid value: -1: must be greater than or equal to 0"},
		{"event valid", resources.Events, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "ds.1", Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: "DaemonSet", Namespace: "default", Name: "ds"}}, ""},
		{"event namespace mismatch", resources.Events, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "ds.1", Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: "DaemonSet", Namespace: "other", Name: "ds"}}, "involvedObject.namespace: Invalid value: \"other\": does not match event.namespace"},
		{"pod namespace required", resources.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, "metadata.namespace: Required value"},
		{"finalizers conflict", resources.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "d", Finalizers: []string{"orphan", "foregroundDeletion"}}},
			"cannot be both set"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateCreate(tc.r, tc.obj)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			wantFieldError(t, errs, tc.want)
		})
	}
}

func TestValidateControllerRevisionUpdate(t *testing.T) {
	old := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "ds-abc", Namespace: "default", ResourceVersion: "4"},
		Data: runtime.RawExtension{Raw: []byte(`{"spec":{"template":{}}}`)}, Revision: 1}
	cr := old.DeepCopy()
	cr.Revision = 3 // kubectl rollout undo renumbers revisions
	if errs := ValidateUpdate(resources.ControllerRevisions, cr, old); len(errs) > 0 {
		t.Errorf("revision change invalid: %v", errs)
	}
	cr.Data.Raw = []byte(`{"spec":{}}`)
	wantFieldError(t, ValidateUpdate(resources.ControllerRevisions, cr, old), "data: Invalid value: \"\": field is immutable")
}

func TestValidateUpdateWithoutResourceVersion(t *testing.T) {
	old := createDS(t, manifests[0])
	old.ResourceVersion = "3"
	ds := old.DeepCopy()
	ds.ResourceVersion = ""
	for _, e := range ValidateUpdate(resources.DaemonSets, ds, old) {
		if strings.Contains(e.Field, "resourceVersion") {
			t.Errorf("unexpected %v", e)
		}
	}
}

func TestValidateNodeUpdate(t *testing.T) {
	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "2"}, Spec: corev1.NodeSpec{PodCIDR: "10.0.0.0/24"}}
	n := old.DeepCopy()
	n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: "NoSchedule"}}
	n.Spec.Unschedulable = true
	if errs := ValidateUpdate(resources.Nodes, n, old); len(errs) > 0 {
		t.Errorf("taint and cordon invalid: %v", errs)
	}
	n.Spec.Taints[0].Effect = "Sometimes"
	wantFieldError(t, ValidateUpdate(resources.Nodes, n, old), "spec.taints[0].effect: Unsupported value")
	n.Spec.Taints = nil
	n.Spec.PodCIDR = "10.0.1.0/24"
	wantFieldError(t, ValidateUpdate(resources.Nodes, n, old), "spec.podCIDR: Forbidden")
}
