package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

var testNow = time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(testNow.Add(-d)) }

func testDaemonSet(name, ns string, created time.Duration) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: ago(created), UID: "ds-uid"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "busybox:1.36"}}}},
		},
		Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberReady: 2, UpdatedNumberScheduled: 2, NumberAvailable: 2},
	}
}

func TestTablePrinter(t *testing.T) {
	edge := testDaemonSet("edge-exporter", "monitoring", 3*time.Hour)
	edge.Spec.Template.Spec.NodeSelector = map[string]string{"tier": "edge"}
	edge.Status.NumberReady = 1

	running := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-abc", Namespace: "default", CreationTimestamp: ago(90 * time.Second)},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "a"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.0.0.7"}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "a", Ready: true, RestartCount: 2,
				State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: ago(5 * time.Minute)}}}}},
	}
	crashing := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-def", Namespace: "default", CreationTimestamp: ago(10 * time.Minute)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}, {Name: "b"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "a", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
			{Name: "b", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		}},
	}
	terminating := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-ghi", Namespace: "default", CreationTimestamp: ago(48 * time.Hour), DeletionTimestamp: ptr.To(ago(time.Second))},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", CreationTimestamp: ago(4 * time.Second),
			Labels: map[string]string{"node-role.kubernetes.io/edge": "", "kubernetes.io/role": "worker"}},
		Spec: corev1.NodeSpec{Unschedulable: true},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.10"}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.32.0", OSImage: "Alpine", KernelVersion: "6.1", ContainerRuntimeVersion: "docker://28.5"},
		},
	}
	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2", CreationTimestamp: ago(26 * time.Hour)}}
	rev := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-5d8f", Namespace: "default", CreationTimestamp: ago(time.Minute),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", Controller: ptr.To(true)}}},
		Revision: 3,
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", CreationTimestamp: ago(time.Hour)}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "agent.1", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "DaemonSet", Name: "agent"},
		Reason:         "SuccessfulCreate", Type: "Normal", Message: "Created pod: agent-abc ",
		FirstTimestamp: ago(10 * time.Minute), LastTimestamp: ago(2 * time.Minute), Count: 3,
		Source: corev1.EventSource{Component: "daemonset-controller"},
	}

	tests := []struct {
		name   string
		r      *resources.Resource
		objs   []client.Object
		wide   bool
		withNS bool
		want   string
	}{
		{name: "daemonsets", r: resources.DaemonSets, objs: []client.Object{testDaemonSet("agent", "default", 2*time.Second)}, want: `
NAME    DESIRED   CURRENT   READY   UP-TO-DATE   AVAILABLE   NODE SELECTOR   AGE
agent   2         2         2       2            2           <none>          2s
`},
		{name: "daemonsets wide", r: resources.DaemonSets, wide: true, objs: []client.Object{testDaemonSet("agent", "default", 2*time.Second)}, want: `
NAME    DESIRED   CURRENT   READY   UP-TO-DATE   AVAILABLE   NODE SELECTOR   AGE   CONTAINERS   IMAGES         SELECTOR
agent   2         2         2       2            2           <none>          2s    agent        busybox:1.36   app=agent
`},
		{name: "daemonsets all namespaces", r: resources.DaemonSets, withNS: true, objs: []client.Object{testDaemonSet("agent", "default", 2*time.Second), edge}, want: `
NAMESPACE    NAME            DESIRED   CURRENT   READY   UP-TO-DATE   AVAILABLE   NODE SELECTOR   AGE
default      agent           2         2         2       2            2           <none>          2s
monitoring   edge-exporter   2         2         1       2            2           tier=edge       3h
`},
		{name: "pods wide", r: resources.Pods, wide: true, objs: []client.Object{running, crashing, terminating}, want: `
NAME        READY   STATUS             RESTARTS     AGE   IP         NODE     NOMINATED NODE   READINESS GATES
agent-abc   1/1     Running            2 (5m ago)   90s   10.0.0.7   node-1   <none>           <none>
agent-def   1/2     CrashLoopBackOff   0            10m   <none>     <none>   <none>           <none>
agent-ghi   0/1     Terminating        0            2d    <none>     <none>   <none>           <none>
`},
		{name: "nodes", r: resources.Nodes, objs: []client.Object{node, bare}, want: `
NAME     STATUS                     ROLES         AGE   VERSION
node-1   Ready,SchedulingDisabled   edge,worker   4s    v1.32.0
node-2   Unknown                    <none>        26h   
`},
		{name: "nodes wide", r: resources.Nodes, wide: true, objs: []client.Object{node}, want: `
NAME     STATUS                     ROLES         AGE   VERSION   INTERNAL-IP    EXTERNAL-IP   OS-IMAGE   KERNEL-VERSION   CONTAINER-RUNTIME
node-1   Ready,SchedulingDisabled   edge,worker   4s    v1.32.0   192.168.1.10   <none>        Alpine     6.1              docker://28.5
`},
		{name: "controllerrevisions", r: resources.ControllerRevisions, objs: []client.Object{rev}, want: `
NAME         CONTROLLER             REVISION   AGE
agent-5d8f   daemonset.apps/agent   3          60s
`},
		{name: "namespaces", r: resources.Namespaces, objs: []client.Object{ns}, want: `
NAME      STATUS   AGE
default   Active   60m
`},
		{name: "events", r: resources.Events, objs: []client.Object{ev}, want: `
LAST SEEN   TYPE     REASON             OBJECT            MESSAGE
2m          Normal   SuccessfulCreate   daemonset/agent   Created pod: agent-abc
`},
		{name: "events wide", r: resources.Events, wide: true, objs: []client.Object{ev}, want: `
LAST SEEN   TYPE     REASON             OBJECT            SUBOBJECT   SOURCE                 MESSAGE                  FIRST SEEN   COUNT   NAME
2m          Normal   SuccessfulCreate   daemonset/agent               daemonset-controller   Created pod: agent-abc   10m          3       agent.1
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := newTablePrinter(&buf, tt.r, tt.wide, tt.withNS)
			if err := p.print(tt.objs, testNow); err != nil {
				t.Fatal(err)
			}
			if got, want := buf.String(), strings.TrimPrefix(tt.want, "\n"); got != want {
				t.Fatalf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestObjectRef(t *testing.T) {
	for r, want := range map[*resources.Resource]string{
		resources.DaemonSets: "daemonset.apps/x", resources.Pods: "pod/x", resources.Nodes: "node/x",
		resources.ControllerRevisions: "controllerrevision.apps/x",
	} {
		if got := objectRef(r, "x"); got != want {
			t.Errorf("objectRef(%s) = %q, want %q", r.Name, got, want)
		}
	}
}

func TestDescribeDaemonSet(t *testing.T) {
	ds := testDaemonSet("agent", "default", time.Minute)
	ds.Labels = map[string]string{"b": "2", "a": "1"}
	ds.Annotations = map[string]string{LastAppliedAnnotation: "{}", "deprecated.daemonset.template.generation": "1"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", OwnerReferences: []metav1.OwnerReference{{UID: "ds-uid", Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	stray := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	ev := &corev1.Event{Type: "Normal", Reason: "SuccessfulCreate", Message: "Created pod: p", LastTimestamp: ago(time.Minute), FirstTimestamp: ago(time.Minute),
		Source: corev1.EventSource{Component: "daemonset-controller"}}
	var buf bytes.Buffer
	if err := describe(&buf, ds, []client.Object{pod, stray}, []*corev1.Event{ev}, testNow); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"Name:", "agent", "Selector:", "app=agent", "a=1\n", "b=2\n",
		"deprecated.daemonset.template.generation: 1",
		"Desired Number of Nodes Scheduled: 2",
		"1 Running / 0 Waiting / 0 Succeeded / 0 Failed",
		"Image:", "busybox:1.36",
		"Normal  SuccessfulCreate  60s   daemonset-controller  Created pod: p",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("describe output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, LastAppliedAnnotation) {
		t.Errorf("describe shows the last-applied annotation:\n%s", out)
	}
}

func TestDescribeOtherKinds(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"tier": "edge"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "edge", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "AgentReady"}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.32.0"},
		},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-x", Namespace: "default",
			OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "a", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "a", RestartCount: 3, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}},
	}
	tests := []struct {
		obj  client.Object
		want []string
	}{
		{node, []string{"Taints:", "dedicated=edge:NoSchedule", "AgentReady", "InternalIP:", "10.0.0.1", "Kubelet Version:", "Events:"}},
		{pod, []string{"Node:", "node-1", "Controlled By:", "DaemonSet/agent", "Waiting (CrashLoopBackOff)", "Restart Count: 3"}},
		{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}, []string{"Status:", "Active"}},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		if err := describe(&buf, tt.obj, nil, nil, testNow); err != nil {
			t.Fatal(err)
		}
		for _, w := range tt.want {
			if !strings.Contains(buf.String(), w) {
				t.Errorf("describe %s lacks %q:\n%s", tt.obj.GetName(), w, buf.String())
			}
		}
	}
}
