package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/everynode/everynode/client"
	clientfake "github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
	"github.com/everynode/everynode/resources"
)

func ptr[T any](v T) *T { return &v }

func TestUnhonoured(t *testing.T) {
	tests := []struct {
		name string
		edit func(*corev1.Pod)
		want []string
	}{
		{"clean", func(*corev1.Pod) {}, nil},
		{"honoured and defaulted fields", func(p *corev1.Pod) {
			p.Spec.DNSPolicy = corev1.DNSClusterFirst
			p.Spec.HostNetwork, p.Spec.HostPID = true, true
			p.Spec.SchedulerName = corev1.DefaultSchedulerName
			p.Spec.ServiceAccountName = "robot"
			p.Spec.AutomountServiceAccountToken = ptr(true)
			p.Spec.EnableServiceLinks = ptr(true)
			p.Spec.TerminationGracePeriodSeconds = ptr(int64(5))
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(1000)), RunAsNonRoot: ptr(true)}
			p.Spec.NodeSelector = map[string]string{"a": "b"}
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
			p.Spec.Volumes = []corev1.Volume{
				{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/x", Type: ptr(corev1.HostPathUnset)}}},
				{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
				{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{}}},
				{Name: "d", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}},
				{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "t"}}}}}},
			}
			c := &p.Spec.Containers[0]
			c.TerminationMessagePath = corev1.TerminationMessagePathDefault
			c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
			c.ImagePullPolicy = corev1.PullIfNotPresent
			c.VolumeMounts = []corev1.VolumeMount{{Name: "h", MountPath: "/h", ReadOnly: true}, {Name: "e", MountPath: "/e", SubPath: "s"}}
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
			c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
			c.Env = []corev1.EnvVar{{Name: "N", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}}}
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
			c.SecurityContext = &corev1.SecurityContext{
				Privileged: ptr(false), ReadOnlyRootFilesystem: ptr(true), AllowPrivilegeEscalation: ptr(false),
				ProcMount: ptr(corev1.DefaultProcMount), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			}
		}, nil},
		{"pod fields", func(p *corev1.Pod) {
			p.Spec.HostIPC = true
			p.Spec.DNSPolicy = corev1.DNSNone
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}}
			p.Spec.PriorityClassName = "high"
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "x"}}
			p.Spec.ShareProcessNamespace = ptr(true)
			p.Spec.SecurityContext = &corev1.PodSecurityContext{
				Sysctls: []corev1.Sysctl{{Name: "net.x", Value: "1"}}, FSGroup: ptr(int64(2000)),
			}
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1}}
			p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
			p.Spec.ActiveDeadlineSeconds = ptr(int64(5))
			p.Spec.Volumes = []corev1.Volume{{Name: "nfs", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{}}}}
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{}}
		}, []string{
			"spec.volumes[0] (nfs: only hostPath, emptyDir, configMap, secret, downwardAPI and projected)", "spec.ephemeralContainers", "spec.activeDeadlineSeconds",
			"spec.dnsPolicy", "spec.dnsConfig", "spec.hostIPC", "spec.shareProcessNamespace",
			"spec.securityContext.fsGroup", "spec.securityContext.sysctls",
			"spec.readinessGates", "spec.overhead", "spec.topologySpreadConstraints",
		}},
		{"container fields", func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{}}}
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9}}}
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9}}}
			c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{}}}
			c.Env = []corev1.EnvVar{{Name: "S", ValueFrom: &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{}}}}
			c.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
			c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
			c.TTY = true
			c.SecurityContext = &corev1.SecurityContext{
				SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				SELinuxOptions:           &corev1.SELinuxOptions{Level: "s0"},
				AppArmorProfile:          &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault},
				RunAsNonRoot:             ptr(true),
				AllowPrivilegeEscalation: ptr(true),
			}
		}, []string{
			"spec.containers[0].env[0].valueFrom",
			"spec.containers[0].resources.limits[nvidia.com/gpu]",
			"spec.containers[0].livenessProbe.grpc", "spec.containers[0].startupProbe.grpc", "spec.containers[0].lifecycle",
			"spec.containers[0].terminationMessagePolicy", "spec.containers[0].tty",
			"spec.containers[0].securityContext.seLinuxOptions",
			"spec.containers[0].securityContext.appArmorProfile",
		}},
		{"init container, group without user", func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsGroup: ptr(int64(5))}
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox:1.36", RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways)}}
		}, []string{
			"spec.initContainers[0].restartPolicy",
		}},
		{"honoured: pod spec of published DaemonSets", func(p *corev1.Pod) {
			p.Spec.PriorityClassName = "system-node-critical"
			p.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
			p.Spec.HostNetwork, p.Spec.HostPID = true, true
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
			p.Spec.Volumes = []corev1.Volume{{Name: "dev", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev", Type: ptr(corev1.HostPathDirectory)}}}}
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox:1.36"}}
			c := &p.Spec.Containers[0]
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
			c.VolumeMounts = []corev1.VolumeMount{{Name: "dev", MountPath: "/dev", MountPropagation: ptr(corev1.MountPropagationBidirectional)}}
			c.SecurityContext = &corev1.SecurityContext{
				Privileged: ptr(true), RunAsNonRoot: ptr(true), RunAsGroup: ptr(int64(5)), ReadOnlyRootFilesystem: ptr(true),
				Capabilities:   &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr("p.json")},
			}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPod("u")
			tt.edit(p)
			if got := unhonoured(p); !slices.Equal(got, tt.want) {
				t.Errorf("unhonoured =\n  %q\nwant\n  %q", got, tt.want)
			}
		})
	}
}

// events waits for the events recorded so far to be written and returns
// those of the pod.
func (e *env) events(pod string) []*corev1.Event {
	e.t.Helper()
	// The recorder writes events in order: once a marker event about a
	// pod of its own is stored, every event recorded before it is
	// written or dropped.
	e.marks++
	marker := newPod(fmt.Sprint("marker-", e.marks))
	e.agent.event(marker, "", corev1.EventTypeNormal, "Marker", "m")
	testkit.EventuallyTrue(e.t, 10*time.Second, "marker event written", func() bool {
		l, _, _ := e.api.List(context.Background(), resources.Events, "default", client.ListOptions{})
		for _, o := range l {
			if o.(*corev1.Event).InvolvedObject.Name == marker.Name {
				return true
			}
		}
		return false
	})
	l, _, err := e.api.List(context.Background(), resources.Events, "default", client.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*corev1.Event
	for _, o := range l {
		if ev := o.(*corev1.Event); ev.InvolvedObject.Name == pod {
			out = append(out, ev)
		}
	}
	return out
}

func byReason(evs []*corev1.Event, reason string) []*corev1.Event {
	var out []*corev1.Event
	for _, ev := range evs {
		if ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

func TestUnsupportedFieldsEventOnce(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.seed(newPod("odd", func(p *corev1.Pod) {
		p.Spec.HostIPC = true
		p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	}))
	e.seed(newPod("clean"))
	for range 3 {
		e.sync("odd")
		e.sync("clean")
		e.events("odd")
	}
	if got := cstatus(t, e.get("odd")); got.State.Running == nil {
		t.Fatalf("odd pod not running: %+v", got.State)
	}
	evs := byReason(e.events("odd"), eventUnsupportedFields)
	if len(evs) != 1 {
		t.Fatalf("%d UnsupportedFields events, want 1: %+v", len(evs), evs)
	}
	ev := evs[0]
	pod := e.get("odd")
	if want := "everynode does not honour: spec.containers[0].lifecycle, spec.hostIPC"; ev.Message != want {
		t.Errorf("message %q, want %q", ev.Message, want)
	}
	io := ev.InvolvedObject
	if io.Kind != "Pod" || io.APIVersion != "v1" || io.Name != "odd" || io.Namespace != "default" || io.UID != pod.UID || io.FieldPath != "" {
		t.Errorf("involvedObject %+v", io)
	}
	if ev.Type != corev1.EventTypeWarning || ev.Source.Component != "everynode-agent" || ev.Source.Host != testNode ||
		ev.Count != 1 || ev.FirstTimestamp.IsZero() || !ev.LastTimestamp.Equal(&ev.FirstTimestamp) || ev.Namespace != "default" ||
		!strings.HasPrefix(ev.Name, "odd.") {
		t.Errorf("event %+v", ev)
	}
	if evs := byReason(e.events("clean"), eventUnsupportedFields); len(evs) != 0 {
		t.Errorf("clean pod got UnsupportedFields: %+v", evs)
	}
	// The clean pod's normal life is reported as kubelet does.
	for _, r := range []string{eventPulled, eventCreated, eventStarted} {
		evs := byReason(e.events("clean"), r)
		if len(evs) != 1 || evs[0].Type != corev1.EventTypeNormal || evs[0].InvolvedObject.FieldPath != "spec.containers{app}" {
			t.Errorf("%s events of the clean pod: %+v", r, evs)
		}
	}
}

func TestCreateContainerConfigErrorEvent(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.seed(newPod("root", withContainer(func(c *corev1.Container) {
		c.SecurityContext = &corev1.SecurityContext{RunAsUser: ptr(int64(0)), RunAsNonRoot: ptr(true)}
	})))
	for range 3 {
		p, _ := e.sync("root")
		if r := waitingReason(cstatus(t, p)); r != reasonCreateConfigError {
			t.Fatalf("waiting reason %q, want %s", r, reasonCreateConfigError)
		}
	}
	evs := byReason(e.events("root"), eventFailed)
	if len(evs) != 1 {
		t.Fatalf("%d Failed events, want 1 (a persistent error is reported once): %+v", len(evs), evs)
	}
	if ev := evs[0]; ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "non-root") ||
		ev.InvolvedObject.FieldPath != "spec.containers{app}" {
		t.Errorf("Failed event %+v", ev)
	}
	if n := len(e.containers(nil)); n != 0 {
		t.Errorf("%d containers created for a refused spec", n)
	}
}

func TestEventWriteFailureDoesNotFailSync(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	var tries atomic.Int32
	e.api.FailFunc("create", "events", func(clientfake.Action) error { tries.Add(1); return errors.New("boom") })
	e.seed(newPod("p", func(p *corev1.Pod) { p.Spec.HostIPC = true }))
	p, _ := e.sync("p")
	if cstatus(t, p).State.Running == nil {
		t.Fatalf("pod not running: %+v", p.Status)
	}
	testkit.EventuallyTrue(t, 10*time.Second, "an event write tried", func() bool { return tries.Load() > 0 })
}

// TestEventsNeverBlock: with the API hanging, recording many more events
// than client-go's queue holds does not block (the rest are dropped).
func TestEventsNeverBlock(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) }) // before the recorder's Shutdown
	e.api.FailFunc("create", "events", func(clientfake.Action) error { <-hang; return nil })
	done := make(chan struct{})
	go func() {
		defer close(done)
		pod := newPod("p")
		for i := range 3000 {
			e.agent.event(pod, "", corev1.EventTypeNormal, eventStarted, "x%d", i)
		}
	}()
	testkit.EventuallyTrue(t, 10*time.Second, "3000 events recorded", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
}

func TestSecurityContextMapped(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	pod := newPod("sec", func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(2000)), RunAsNonRoot: ptr(true)}
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
			RunAsUser: ptr(int64(1001)), ReadOnlyRootFilesystem: ptr(true), AllowPrivilegeEscalation: ptr(false),
		}
	})
	got, err := e.agent.containerSpec(t.Context(), pod, &pod.Spec.Containers[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.RunAsUser == nil || *got.RunAsUser != 1001 || got.RunAsGroup == nil || *got.RunAsGroup != 2000 ||
		!got.ReadOnlyRootFilesystem || !got.NoNewPrivileges {
		t.Errorf("spec user %v group %v rofs %v nnp %v", got.RunAsUser, got.RunAsGroup, got.ReadOnlyRootFilesystem, got.NoNewPrivileges)
	}
	// Group without user: the runtime keeps the image's user.
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsGroup: ptr(int64(5))}
	pod.Spec.Containers[0].SecurityContext = nil
	if got, err = e.agent.containerSpec(t.Context(), pod, &pod.Spec.Containers[0], 0); err != nil || got.RunAsUser != nil || got.RunAsGroup == nil || *got.RunAsGroup != 5 {
		t.Errorf("group without user: %v %v %v", got.RunAsUser, got.RunAsGroup, err)
	}
}

func TestBackOffAndKillingEvents(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.seed(newPod("crash", withAnnotations(rtfake.AnnotationExitAfter, "1s", rtfake.AnnotationExitCode, "2")))
	e.sync("crash")
	e.clock.Step(time.Second) // the container exits
	for range 3 {
		if s := cstatus(t, mustSync(e, "crash")); waitingReason(s) != reasonCrashLoopBackOff {
			t.Fatalf("not in back-off: %+v", s)
		}
	}
	evs := byReason(e.events("crash"), eventBackOff)
	if len(evs) != 1 || evs[0].Type != corev1.EventTypeWarning || !strings.Contains(evs[0].Message, "Back-off restarting failed container app") {
		t.Errorf("BackOff events (want one per crash): %+v", evs)
	}

	// Deleting a running pod records Killing for its container.
	e.seed(newPod("gone"))
	e.sync("gone")
	p := e.get("gone")
	now := metav1.NewTime(e.clock.Now())
	p.DeletionTimestamp = &now
	e.agent.pods.Update(p)
	if _, err := e.agent.syncPod(context.Background(), p.UID); err != nil {
		t.Fatal(err)
	}
	if evs := byReason(e.events("gone"), eventKilling); len(evs) != 1 || evs[0].Message != "Stopping container app" {
		t.Errorf("Killing events: %+v", evs)
	}
}

func mustSync(e *env, name string) *corev1.Pod {
	p, _ := e.sync(name)
	return p
}
