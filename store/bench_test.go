package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/resources"
)

// benchPod is a DaemonSet pod as the controller creates it: labels, owner
// reference, tolerations, a container with env, resources and mounts, and
// status conditions (about 2.5 KB of JSON).
func benchPod(name, node string) *corev1.Pod {
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "kube-system", Name: name, UID: "6f1b1a2e-0d55-4f36-9a9b-6c9f1c3e2a11",
			GenerateName:      "node-exporter-",
			CreationTimestamp: metav1.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC),
			Labels: map[string]string{"app": "node-exporter", "controller-revision-hash": "7d9f8b6c5d",
				"pod-template-generation": "3"},
			Annotations: map[string]string{"deprecated.daemonset.template.generation": "3"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "node-exporter",
				UID: "0c8f6a9e-3d7e-4b7a-8f0e-5b2a9f6d1c33", Controller: &yes, BlockOwnerDeletion: &yes}},
		},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name: "exporter", Image: "quay.io/prometheus/node-exporter:v1.8.2",
				Args:  []string{"--path.rootfs=/host", "--web.listen-address=:9100"},
				Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100, Protocol: corev1.ProtocolTCP}},
				Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
				},
				VolumeMounts:             []corev1.VolumeMount{{Name: "root", MountPath: "/host", ReadOnly: true}},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ImagePullPolicy:          corev1.PullIfNotPresent,
			}},
			Volumes: []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
			RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst, SchedulerName: "default-scheduler",
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: "node.kubernetes.io/unschedulable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)}},
		},
	}
}

// BenchmarkCreate measures store.Create of a realistic pod; compare with
// BenchmarkRawPut, the same bytes put straight into etcd, in the same run.
func BenchmarkCreate(b *testing.B) {
	s := openTest(b, func(c *Config) { c.unsafeNoFsync = false })
	ctx := context.Background()
	// Warm up (first write, JSON encoder caches) so -benchtime=1x is meaningful.
	if _, err := s.Create(ctx, resources.Pods, benchPod("warm-up", "node-1")); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if _, err := s.Create(ctx, resources.Pods, benchPod(fmt.Sprintf("node-exporter-%07d", i), "node-1")); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkRawPut is the floor for BenchmarkCreate: an etcd Put of the same
// pod's JSON through the same client.
func BenchmarkRawPut(b *testing.B) {
	s := openTest(b, func(c *Config) { c.unsafeNoFsync = false })
	ctx := context.Background()
	pod := benchPod("node-exporter-0000000", "node-1")
	resources.Pods.SetTypeMeta(pod)
	data, err := json.Marshal(pod)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	if _, err := s.Client().Put(ctx, "/registry/pods/kube-system/warm-up", string(data)); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if _, err := s.Client().Put(ctx, fmt.Sprintf("/registry/pods/kube-system/node-exporter-%07d", i), string(data)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkWatchFanout has 1,000 watchers, one per node, and measures one pod
// write until the watcher of that pod's node has received it. "indexed"
// selects with spec.nodeName=node-i (the node index: each event is offered to
// one watcher); "unindexed" selects the same pods with a label, so every
// event is offered to all 1,000 watchers. The offered/op metric counts
// watchers the dispatcher considered per write.
func BenchmarkWatchFanout(b *testing.B) {
	const nodes = 1000
	for _, mode := range []string{"indexed", "unindexed"} {
		b.Run(mode, func(b *testing.B) {
			s := openTest(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			received := make([]chan struct{}, nodes)
			var delivered atomic.Int64
			for i := range nodes {
				sel := Selector{Field: mustField(b, fmt.Sprintf("spec.nodeName=node-%d", i))}
				if mode == "unindexed" {
					sel = Selector{Label: mustLabel(b, fmt.Sprintf("node=node-%d", i))}
				}
				w, err := s.Watch(ctx, resources.Pods, "", 0, sel)
				if err != nil {
					b.Fatal(err)
				}
				received[i] = make(chan struct{}, 1)
				go consume(w, received[i], &delivered)
			}
			c, _ := s.cacheFor(resources.Pods)
			c.mu.RLock()
			offered := len(c.watchers) + 1 // unindexed watchers plus the pod's node's watcher
			if mode == "unindexed" {
				offered = len(c.watchers)
			}
			c.mu.RUnlock()

			i := 0
			for b.Loop() {
				node := fmt.Sprintf("node-%d", i%nodes)
				p := benchPod(fmt.Sprintf("p-%07d", i), node)
				p.Labels["node"] = node
				if _, err := s.Create(ctx, resources.Pods, p); err != nil {
					b.Fatal(err)
				}
				<-received[i%nodes]
				i++
			}
			b.ReportMetric(float64(offered), "offered/op")
			if got := delivered.Load(); got != int64(i) {
				b.Fatalf("%d events delivered for %d writes", got, i)
			}
		})
	}
}

func consume(w watch.Interface, received chan<- struct{}, delivered *atomic.Int64) {
	for range w.ResultChan() {
		delivered.Add(1)
		received <- struct{}{}
	}
}
