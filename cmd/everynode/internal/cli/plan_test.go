package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/controller/daemonset"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// planNodes seeds c with four nodes: two with disk=ssd (one of them
// cordoned), one with disk=ssd and an untolerated NoSchedule taint, one
// with disk=hdd.
func planNodes(t *testing.T, c *fake.Client) {
	t.Helper()
	node := func(name, disk string, mod func(*corev1.Node)) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"disk": disk}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		if mod != nil {
			mod(n)
		}
		resources.Nodes.SetTypeMeta(n)
		if err := c.Seed(n); err != nil {
			t.Fatal(err)
		}
	}
	node("node-a", "ssd", nil)
	node("node-b", "ssd", func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	})
	node("node-c", "hdd", nil)
	node("node-d", "ssd", func(n *corev1.Node) { n.Spec.Unschedulable = true })
}

const planManifest = `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: default}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      nodeSelector: {disk: ssd}
      containers: [{name: agent, image: IMAGE}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: default}
data: {k: v}
`

func planCommandOutput(t *testing.T, c *fake.Client, image string) string {
	t.Helper()
	ms, err := decodeManifests("ds.yaml", strings.NewReader(strings.ReplaceAll(planManifest, "IMAGE", image)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := &PlanCommand{main: NewMain()}
	for _, m := range ms {
		if err := cmd.planOne(context.Background(), c, m, &out); err != nil {
			t.Fatalf("plan: %v", err)
		}
	}
	return out.String()
}

// TestPlanCommand: a plan prints each node's action and reason and writes
// nothing; after the DaemonSet exists, a new image is an update.
func TestPlanCommand(t *testing.T) {
	c := fake.New()
	planNodes(t, c)
	out := planCommandOutput(t, c, "busybox:1")
	for _, want := range []string{
		"daemonset.apps/agent created (server dry run)\n",
		"NODE    ACTION  REVISION",
		"node-a  gain    -> ",
		"node-b  none    -  ",
		"taint gpu=true:NoSchedule not tolerated",
		"node-c  none", "node selector disk=ssd does not match the node's labels",
		"node-d  gain", "cordoned, which daemon pods tolerate",
		"Plan: 2 to gain a pod, 2 without a pod.\n",
		"configmap/settings created (server dry run)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	for _, r := range []*resources.Resource{resources.DaemonSets, resources.ConfigMaps} {
		if objs, _, _ := c.List(context.Background(), r, "default", client.ListOptions{}); len(objs) > 0 {
			t.Errorf("plan stored %d %s", len(objs), r.Name)
		}
	}

	// The DaemonSet exists and runs v1 on node-a and node-b (tainted
	// after its pod started): v2 updates node-a, node-b loses its pod.
	ms, _ := decodeManifests("ds.yaml", strings.NewReader(strings.ReplaceAll(planManifest, "IMAGE", "busybox:1")))
	if _, _, err := applyManifest(context.Background(), c, ms[0], clientFlags{}, false); err != nil {
		t.Fatal(err)
	}
	obj, _ := c.Get(context.Background(), resources.DaemonSets, "default", "agent")
	ds := obj.(*appsv1.DaemonSet)
	v1 := daemonset.ComputeHash(&ds.Spec.Template, nil)
	for _, node := range []string{"node-a", "node-b"} {
		seedDaemonPod(t, c, ds, node, v1)
	}
	out = planCommandOutput(t, c, "busybox:1")
	for _, want := range []string{"daemonset.apps/agent unchanged (server dry run)", "node-a  keep    " + v1, "already at revision " + v1,
		"node-d  gain", "configmap/settings created"} {
		if !strings.Contains(out, want) {
			t.Errorf("unchanged plan lacks %q:\n%s", want, out)
		}
	}
	out = planCommandOutput(t, c, "busybox:2")
	for _, want := range []string{"daemonset.apps/agent configured (server dry run)", "node-a  update  " + v1 + " -> ", "template changed",
		"node-b  lose    " + v1 + " ->", "the update deletes the old pod and creates none",
		"Plan: 1 to gain a pod, 1 to update, 1 to lose their pod, 1 without a pod."} {
		if !strings.Contains(out, want) {
			t.Errorf("update plan lacks %q:\n%s", want, out)
		}
	}
	if obj, _ := c.Get(context.Background(), resources.DaemonSets, "default", "agent"); obj.(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0].Image != "busybox:1" {
		t.Error("plan changed the stored DaemonSet")
	}
}

// TestPlanCommandInvalid: a manifest the server refuses fails the plan.
func TestPlanCommandInvalid(t *testing.T) {
	c := fake.New()
	ms, err := decodeManifests("ds.yaml", strings.NewReader(strings.ReplaceAll(planManifest, "IMAGE", `""`)))
	if err != nil {
		t.Fatal(err)
	}
	err = (&PlanCommand{main: NewMain()}).planOne(context.Background(), c, ms[0], &bytes.Buffer{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("plan of an invalid DaemonSet: %v, want 422 Invalid", err)
	}
}

func seedDaemonPod(t *testing.T, c *fake.Client, ds *appsv1.DaemonSet, node, hash string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-" + node, Namespace: ds.Namespace,
			Labels:          map[string]string{"app": ds.Name, appsv1.DefaultDaemonSetUniqueLabelKey: hash},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	resources.Pods.SetTypeMeta(p)
	if err := c.Seed(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRolloutStatusNodes: --nodes prints the table, problems first, under
// the status line and a progress bar; watching, a block per change until
// the rollout is done.
func TestRolloutStatusNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := fake.New()
	planNodes(t, c)
	ms, _ := decodeManifests("ds.yaml", strings.NewReader(strings.ReplaceAll(planManifest, "IMAGE", "busybox:2")))
	if _, _, err := applyManifest(ctx, c, ms[0], clientFlags{}, false); err != nil {
		t.Fatal(err)
	}
	obj, _ := c.Get(ctx, resources.DaemonSets, "default", "agent")
	ds := obj.(*appsv1.DaemonSet)
	v2 := daemonset.ComputeHash(&ds.Spec.Template, nil)
	seedDaemonPod(t, c, ds, "node-a", v2)
	crash := seedDaemonPod(t, c, ds, "node-d", v2)
	crash.Status.Conditions[0].Status = corev1.ConditionFalse
	crash.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent", RestartCount: 3,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
	if _, err := c.UpdateStatus(ctx, crash, clientWriteOptions()); err != nil {
		t.Fatal(err)
	}
	ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: 2, CurrentNumberScheduled: 2,
		UpdatedNumberScheduled: 2, NumberAvailable: 1, NumberReady: 1}
	if _, err := c.UpdateStatus(ctx, ds, clientWriteOptions()); err != nil {
		t.Fatal(err)
	}

	var once bytes.Buffer
	if err := (&RolloutStatusCommand{main: NewMain(), name: "agent", table: true, progress: true}).run(ctx, c, &once); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("Waiting for daemon set \"agent\" rollout to finish: 1 of 2 updated pods are available...\n"+
		"[##############################] 2/2 updated, 1/2 available   update revision %[1]s\n"+
		"NODE    POD           REVISION         STATE    REASON\n"+
		"node-d  agent-node-d  %[1]s (new)  failing  container agent: CrashLoopBackOff (3 restarts)\n"+
		"node-a  agent-node-a  %[1]s (new)  updated  available\n", v2)
	if squeeze(once.String()) != squeeze(want) {
		t.Errorf("-w=false --nodes:\n%s\nwant\n%s", once.String(), want)
	}

	var out testkit.Buffer
	done := make(chan error, 1)
	go func() {
		done <- (&RolloutStatusCommand{main: NewMain(), name: "agent", table: true, progress: true, watch: true}).run(ctx, c, &out)
	}()
	testkit.Eventually(t, 5*time.Second, func() error {
		if !out.Contains("failing") {
			return fmt.Errorf("no table yet:\n%s", out.String())
		}
		return nil
	})
	crash.Status.Conditions[0].Status = corev1.ConditionTrue
	crash.Status.ContainerStatuses = nil
	if _, err := c.UpdateStatus(ctx, crash, clientWriteOptions()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if strings.Count(out.String(), "NODE ") < 2 {
			return fmt.Errorf("no second block:\n%s", out.String())
		}
		return nil
	})
	obj, _ = c.Get(ctx, resources.DaemonSets, "default", "agent")
	ds = obj.(*appsv1.DaemonSet)
	ds.Status.NumberAvailable, ds.Status.NumberReady = 2, 2
	if _, err := c.UpdateStatus(ctx, ds, clientWriteOptions()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.HasSuffix(squeeze(got), squeeze("daemon set \"agent\" successfully rolled out\n"+
		"[##############################] 2/2 updated, 2/2 available   update revision "+v2+"\n"+
		"NODE    POD           REVISION         STATE    REASON\n"+
		"node-a  agent-node-a  "+v2+" (new)  updated  available\n"+
		"node-d  agent-node-d  "+v2+" (new)  updated  available\n")) {
		t.Errorf("last block:\n%s", got)
	}
	if strings.Contains(got, "\x1b[") {
		t.Error("ANSI sequences on a non-terminal")
	}
}

// TestBlockPrinter: on a terminal a block is drawn over the previous one;
// elsewhere blocks follow each other; an unchanged block is not drawn.
func TestBlockPrinter(t *testing.T) {
	var tty, plain bytes.Buffer
	pt, pp := &blockPrinter{out: &tty, tty: true}, &blockPrinter{out: &plain}
	for _, b := range []string{"a\nb\n", "a\nb\n", "c\n"} {
		pt.draw(b)
		pp.draw(b)
	}
	if got, want := tty.String(), "a\nb\n\x1b[2A\x1b[Jc\n"; got != want {
		t.Errorf("terminal: %q, want %q", got, want)
	}
	if got, want := plain.String(), "a\nb\n\nc\n"; got != want {
		t.Errorf("plain: %q, want %q", got, want)
	}
}

// TestDescribeNodes: describe ds has the per-node table.
func TestDescribeNodes(t *testing.T) {
	ds := rolloutDS(nil)
	ds.UID = "ds-uid"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	var buf bytes.Buffer
	if err := describeWithNodes(&buf, ds, nil, &planSnapshot{nodes: []*corev1.Node{n}}, nil, testNow); err != nil {
		t.Fatal(err)
	}
	hash := daemonset.ComputeHash(&ds.Spec.Template, nil)
	for _, want := range []string{"Nodes (update revision " + hash + "):\n", "  NODE    POD  REVISION  STATE    REASON\n",
		"  node-1  -    -         pending  no pod yet\n", "Events:"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("describe lacks %q:\n%s", want, buf.String())
		}
	}
}

// squeeze collapses runs of spaces, so that tables compare whatever the
// width of a hash.
func squeeze(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == ' ' }), " ")
}

// TestProgressReason: "since" is a UTC time of day, with the date beyond a
// day, never an age (a block must not change by itself).
func TestProgressReason(t *testing.T) {
	r := daemonset.NodeProgress{Reason: "node unreachable"}
	if got := progressReason(r, testNow); got != "node unreachable" {
		t.Errorf("no since: %q", got)
	}
	r.Since = ago(3 * time.Minute)
	if got := progressReason(r, testNow); got != "node unreachable since 11:57:00Z" {
		t.Errorf("3m ago: %q", got)
	}
	r.Since = ago(50 * time.Hour)
	if got := progressReason(r, testNow); got != "node unreachable since 2025-12-31 10:00:00Z" {
		t.Errorf("50h ago: %q", got)
	}
}
