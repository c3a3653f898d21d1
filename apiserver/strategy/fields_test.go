package strategy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/everynode/everynode/resources"
)

// trackPod is a pod as the DaemonSet controller creates it.
func trackPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: "agent-x7k2p", GenerateName: "agent-",
			Labels: map[string]string{"app": "agent", "controller-revision-hash": "5d8f7c9b4", "pod-template-generation": "1"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "u1",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Containers: []corev1.Container{{
				Name: "agent", Image: "example/agent:1", ImagePullPolicy: corev1.PullIfNotPresent,
				Env:                    []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}}},
				Ports:                  []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100, Protocol: corev1.ProtocolTCP}},
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst, SchedulerName: "default-scheduler",
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
	}
}

// trackEvent is an Event as an agent records a container start.
func trackEvent() *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "default", Name: "agent-x7k2p.1800a1b2c3d4e5f6"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "agent-x7k2p", UID: "u2", APIVersion: "v1", FieldPath: "spec.containers{agent}"},
		Reason:         "Started", Message: "Started container agent", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "kubelet", Host: "node-1"}, Count: 1,
		FirstTimestamp: metav1.Unix(1700000000, 0), LastTimestamp: metav1.Unix(1700000000, 0),
		ReportingController: "kubelet", ReportingInstance: "node-1",
	}
}

// BenchmarkTrackCreate: managedFields of a created pod and Event, the field
// manager's share of a create (go test -run '^$' -bench TrackCreate
// -benchmem ./apiserver/strategy). Each op builds the object too, as a
// decoded request body would be: its allocations are in the figures.
func BenchmarkTrackCreate(b *testing.B) {
	fm, err := NewFieldManagers(nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		r   *resources.Resource
		obj func() resources.Object
	}{
		{resources.Pods, func() resources.Object { return trackPod() }},
		{resources.Events, func() resources.Object { return trackEvent() }},
	} {
		b.Run(c.r.Name, func(b *testing.B) {
			op := Op{Resource: c.r, Manager: "bench"}
			b.ReportAllocs()
			for b.Loop() {
				obj := c.obj()
				c.r.SetTypeMeta(obj)
				if out := fm.track(op, nil, obj, nil); len(out.GetManagedFields()) != 1 {
					b.Fatalf("managedFields %v", out.GetManagedFields())
				}
			}
		})
	}
}
