package nodeagent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clientfake "github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/controller/nodelifecycle"
	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
	"github.com/everynode/everynode/resources"
)

// reconfigure replaces e's agent with one built from the same API, runtime
// and clock and a config changed by edit.
func (e *env) reconfigure(edit func(*Config)) {
	e.t.Helper()
	cfg := Config{
		NodeName: testNode, NodeIP: "192.0.2.10", Client: e.api, Runtime: e.rt, Clock: e.clock,
		Logger: slog.New(slog.NewTextHandler(e.t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	edit(&cfg)
	a, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	a.scheme = rtfake.Name
	a.runtimeVersion = "fake://" + rtfake.Version
	a.facts = testFacts()
	e.agent = a
}

func testFacts() hostFacts {
	return hostFacts{
		capacity: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		},
		kernelVersion: "6.1.0-test",
		osImage:       "Test OS 1",
	}
}

func (e *env) node() *corev1.Node {
	e.t.Helper()
	o, err := e.api.Get(context.Background(), resources.Nodes, "", testNode)
	if err != nil {
		e.t.Fatal(err)
	}
	return o.(*corev1.Node)
}

func mustTaints(t *testing.T, s string) []corev1.Taint {
	t.Helper()
	taints, err := ParseTaints(s)
	if err != nil {
		t.Fatal(err)
	}
	return taints
}

func TestRegisterNode(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.reconfigure(func(c *Config) {
		c.Labels = map[string]string{"zone": "edge", "example.com/disk": "ssd"}
		c.Taints = mustTaints(t, "dedicated=edge:NoSchedule,gpu:NoExecute")
	})
	ctx := context.Background()
	if err := e.agent.syncNode(ctx); err != nil {
		t.Fatal(err)
	}
	n := e.node()
	for k, v := range map[string]string{
		"zone": "edge", "example.com/disk": "ssd",
		corev1.LabelHostname: testNode, corev1.LabelOSStable: goruntime.GOOS, corev1.LabelArchStable: goruntime.GOARCH,
	} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	wantTaints := []corev1.Taint{
		{Key: "dedicated", Value: "edge", Effect: corev1.TaintEffectNoSchedule},
		{Key: "gpu", Effect: corev1.TaintEffectNoExecute},
	}
	if len(n.Spec.Taints) != 2 || n.Spec.Taints[0] != wantTaints[0] || n.Spec.Taints[1] != wantTaints[1] {
		t.Errorf("taints %+v, want %+v", n.Spec.Taints, wantTaints)
	}
	if a := n.Annotations[AnnotationManagedLabels]; a != "example.com/disk,zone" {
		t.Errorf("managed labels %q", a)
	}
	if a := n.Annotations[AnnotationManagedTaints]; a != "dedicated:NoSchedule,gpu:NoExecute" {
		t.Errorf("managed taints %q", a)
	}
	for _, list := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
		if list.Cpu().Value() != 4 || list.Memory().Value() != 8<<30 || list.Pods().Value() != 110 {
			t.Errorf("resources %v", list)
		}
	}
	want := corev1.NodeSystemInfo{
		OperatingSystem: goruntime.GOOS, Architecture: goruntime.GOARCH, KernelVersion: "6.1.0-test",
		OSImage: "Test OS 1", ContainerRuntimeVersion: "fake://" + rtfake.Version, KubeletVersion: KubeletVersion,
	}
	if n.Status.NodeInfo != want {
		t.Errorf("nodeInfo %+v, want %+v", n.Status.NodeInfo, want)
	}
	wantAddr := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}, {Type: corev1.NodeHostName, Address: testNode}}
	if len(n.Status.Addresses) != 2 || n.Status.Addresses[0] != wantAddr[0] || n.Status.Addresses[1] != wantAddr[1] {
		t.Errorf("addresses %+v", n.Status.Addresses)
	}
	ready := nodeCondition(&n.Status, corev1.NodeReady)
	if ready == nil || ready.Status != corev1.ConditionTrue || ready.Reason != "AgentReady" || !ready.LastHeartbeatTime.Time.Equal(t0) {
		t.Fatalf("Ready condition %+v", ready)
	}

	// The next pass only posts a fresh heartbeat; the transition stays.
	e.api.ClearActions()
	e.clock.Step(DefaultNodeStatusPeriod)
	if err := e.agent.syncNode(ctx); err != nil {
		t.Fatal(err)
	}
	n = e.node()
	ready = nodeCondition(&n.Status, corev1.NodeReady)
	if !ready.LastHeartbeatTime.Time.Equal(t0.Add(DefaultNodeStatusPeriod)) || !ready.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("after a heartbeat: %+v", ready)
	}
	for _, a := range e.api.Actions() {
		if a.Verb == clientfake.VerbUpdate && a.Subresource == "" {
			t.Errorf("unchanged labels and taints written again: %s", a)
		}
	}

	// kubectl label --overwrite of a managed key is not fought while the
	// agent runs (as kubelet applies --node-labels at registration).
	n = e.node()
	n.Labels["zone"] = "west"
	if _, err := e.api.Update(ctx, n, clientWrite()); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(DefaultNodeStatusPeriod)
	if err := e.agent.syncNode(ctx); err != nil {
		t.Fatal(err)
	}
	if z := e.node().Labels["zone"]; z != "west" {
		t.Errorf("zone = %q after a heartbeat, want kubectl's west", z)
	}
}

// TestHeartbeatKeepsMembershipVerdict: over Ready=Unknown or Ready=False
// (MemberLeft), which node lifecycle set from gossip, the agent only
// refreshes the heartbeat; over any other Ready=False it reports True, as
// kubelet does.
func TestHeartbeatKeepsMembershipVerdict(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		status   corev1.ConditionStatus
		reason   string
		wantKept bool
	}{
		{corev1.ConditionUnknown, nodelifecycle.ReasonStatusUnknown, true},
		{corev1.ConditionFalse, nodelifecycle.ReasonMemberLeft, true},
		{corev1.ConditionFalse, "SetByHand", false},
		{corev1.ConditionTrue, nodelifecycle.ReasonMemberAlive, false},
	} {
		t.Run(string(tc.status)+"/"+tc.reason, func(t *testing.T) {
			e := newEnv(t, rtfake.Config{})
			if err := e.agent.syncNode(ctx); err != nil {
				t.Fatal(err)
			}
			n := e.node()
			verdict := *nodeCondition(&n.Status, corev1.NodeReady)
			verdict.Status, verdict.Reason, verdict.Message = tc.status, tc.reason, "set by the test"
			*nodeCondition(&n.Status, corev1.NodeReady) = verdict
			if _, err := e.api.UpdateStatus(ctx, n, clientWrite()); err != nil {
				t.Fatal(err)
			}
			e.clock.Step(DefaultNodeStatusPeriod)
			if err := e.agent.syncNode(ctx); err != nil {
				t.Fatal(err)
			}
			got := nodeCondition(&e.node().Status, corev1.NodeReady)
			if !got.LastHeartbeatTime.Time.Equal(e.clock.Now().Truncate(time.Second)) {
				t.Errorf("heartbeat %v not refreshed to %v", got.LastHeartbeatTime, e.clock.Now())
			}
			kept := got.Status == tc.status && got.Reason == tc.reason && got.Message == verdict.Message
			if kept != tc.wantKept {
				t.Errorf("Ready after a heartbeat: %s %s %q; want kept=%v", got.Status, got.Reason, got.Message, tc.wantKept)
			}
			if !kept && (got.Status != corev1.ConditionTrue || got.Reason != reasonAgentReady) {
				t.Errorf("Ready after a heartbeat: %s %s, want True %s", got.Status, got.Reason, reasonAgentReady)
			}
		})
	}
}

func TestRegisterCapacityOverride(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.reconfigure(func(c *Config) {
		c.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourcePods: resource.MustParse("500")}
	})
	if err := e.agent.syncNode(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := e.node().Status.Capacity
	if c.Cpu().Value() != 64 || c.Pods().Value() != 500 || c.Memory().Value() != 8<<30 {
		t.Errorf("capacity %v", c)
	}
}

// TestRegisterKeepsWhatOthersSet: a restart reconciles the labels of the
// flags and keeps the labels others set; taints stay as registered.
func TestRegisterKeepsWhatOthersSet(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.reconfigure(func(c *Config) {
		c.Labels = map[string]string{"zone": "edge", "tier": "a"}
		c.Taints = mustTaints(t, "old=x:NoSchedule,kept:NoExecute")
	})
	ctx := context.Background()
	if err := e.agent.syncNode(ctx); err != nil {
		t.Fatal(err)
	}
	// kubectl label, kubectl taint, and the node lifecycle controller.
	n := e.node()
	n.Labels["team"] = "ops"
	n.Spec.Taints = append(n.Spec.Taints,
		corev1.Taint{Key: "manual", Value: "1", Effect: corev1.TaintEffectNoSchedule},
		corev1.Taint{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute})
	if _, err := e.api.Update(ctx, n, clientWrite()); err != nil {
		t.Fatal(err)
	}

	// Restart with fewer flags: tier and old are no longer managed.
	e.reconfigure(func(c *Config) {
		c.Labels = map[string]string{"zone": "west"}
		c.Taints = mustTaints(t, "kept=now:NoExecute")
	})
	if err := e.agent.syncNode(ctx); err != nil {
		t.Fatal(err)
	}
	n = e.node()
	if n.Labels["zone"] != "west" || n.Labels["team"] != "ops" || n.Labels[corev1.LabelHostname] != testNode {
		t.Errorf("labels %v", n.Labels)
	}
	if _, ok := n.Labels["tier"]; ok {
		t.Errorf("formerly managed label tier kept: %v", n.Labels)
	}
	got := map[string]string{}
	for _, tt := range n.Spec.Taints {
		got[taintID(tt)] = tt.Value
	}
	// Taints are the registration's and others': a node may not change its
	// own taints once registered (NodeRestriction), so --taints is not
	// applied again.
	want := map[string]string{"old:NoSchedule": "x", "kept:NoExecute": "", "manual:NoSchedule": "1", "node.kubernetes.io/unreachable:NoExecute": ""}
	if len(got) != len(want) {
		t.Errorf("taints %v, want %v", got, want)
	}
	for k, v := range want {
		if gv, ok := got[k]; !ok || gv != v {
			t.Errorf("taint %s = %q (present %v), want %q", k, gv, ok, v)
		}
	}
	if n.Annotations[AnnotationManagedLabels] != "zone" || n.Annotations[AnnotationManagedTaints] != "kept:NoExecute,old:NoSchedule" {
		t.Errorf("annotations %v", n.Annotations)
	}

	// No flags at all: the managed annotations go too.
	e.reconfigure(func(c *Config) {})
	if err := e.agent.syncNode(ctx); err != nil {
		t.Fatal(err)
	}
	n = e.node()
	if _, ok := n.Labels["zone"]; ok || n.Labels["team"] != "ops" {
		t.Errorf("labels %v", n.Labels)
	}
	if _, ok := n.Annotations[AnnotationManagedLabels]; ok {
		t.Errorf("annotations %v", n.Annotations)
	}
	if len(n.Spec.Taints) != 4 {
		t.Errorf("taints %+v, want the registration's, manual and unreachable", n.Spec.Taints)
	}
}

func TestRunReregistersDeletedNode(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.reconfigure(func(c *Config) {
		c.Labels = map[string]string{"zone": "edge"}
		c.Taints = mustTaints(t, "edge:NoSchedule")
	})
	e.run()
	var first *corev1.Node
	eventually(t, "the node registered", func() bool {
		o, err := e.api.Get(context.Background(), resources.Nodes, "", testNode)
		if err != nil {
			return false
		}
		first = o.(*corev1.Node)
		return nodeCondition(&first.Status, corev1.NodeReady) != nil
	})
	if first.Status.Capacity.Cpu().Value() < 1 || first.Status.NodeInfo.ContainerRuntimeVersion != "fake://"+rtfake.Version {
		t.Errorf("status %+v", first.Status)
	}
	if _, err := e.api.Delete(context.Background(), resources.Nodes, "", testNode, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.stepUntil("the node registered again", time.Second, func() bool {
		o, err := e.api.Get(context.Background(), resources.Nodes, "", testNode)
		return err == nil && o.GetUID() != first.UID
	})
	if n := e.node(); n.Labels["zone"] != "edge" || n.Labels[corev1.LabelHostname] != testNode || len(n.Spec.Taints) != 1 {
		t.Errorf("re-registered node: labels %v taints %v", n.Labels, n.Spec.Taints)
	}
}

func TestRunRetriesRegistration(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.api.Fail("*", "nodes", errUnreachable)
	e.run()
	eventually(t, "a failed registration", func() bool {
		for _, a := range e.api.Actions() {
			if a.Resource == "nodes" {
				return true
			}
		}
		return false
	})
	e.api.Fail("*", "nodes", nil)
	e.stepUntil("the node registered after the API came back", 500*time.Millisecond, func() bool {
		_, err := e.api.Get(context.Background(), resources.Nodes, "", testNode)
		return err == nil
	})
}

func TestReadHostFacts(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f := readHostFacts(sysFiles{
		meminfo:   write("meminfo", "MemTotal:       2048 kB\nMemFree:  1 kB\n"),
		osrelease: write("osrelease", "6.9.1-edge\n"),
		osRelease: write("os-release", "NAME=Edge\nPRETTY_NAME=\"Edge Linux 3\"\nID=edge\n"),
	})
	if f.capacity.Memory().Value() != 2048*1024 || f.capacity.Cpu().Value() != int64(goruntime.NumCPU()) || f.capacity.Pods().Value() != 110 {
		t.Errorf("capacity %v", f.capacity)
	}
	if f.kernelVersion != "6.9.1-edge" || f.osImage != "Edge Linux 3" {
		t.Errorf("facts %+v", f)
	}
	missing := readHostFacts(sysFiles{meminfo: filepath.Join(dir, "none"), osrelease: filepath.Join(dir, "none"), osRelease: filepath.Join(dir, "none")})
	if _, ok := missing.capacity[corev1.ResourceMemory]; ok || missing.kernelVersion != "" || missing.osImage != "" {
		t.Errorf("facts from missing files %+v", missing)
	}
}
