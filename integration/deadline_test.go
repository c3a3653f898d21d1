package integration

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/everynode/everynode/rollout"
)

// TestRolloutProgressDeadline is issue 15 item 3 (docs/rollouts.md §5) with
// real kubectl: a DaemonSet given progress-deadline-seconds 5 (and no
// auto-rollback) is updated to an image no node can pull. No updated pod
// becomes available, so the condition turns Progressing=False
// ProgressDeadlineExceeded with a Warning event — `kubectl get -o yaml` and
// `kubectl describe` show them — and `everynode rollout status` exits 1
// naming the reason and the fix. Exceeding the deadline changes no pod and
// no template; fixing the image completes the rollout and the condition
// turns NewRevisionAvailable.
func TestRolloutProgressDeadline(t *testing.T) {
	kubectl := requireKubectl(t)
	bin := buildEverynode(t)
	const n = 3
	c := newCluster(t, n)
	kc := kfKubeconfig(t, c)
	kube := &kfTool{t: t, name: "kubectl", bin: kubectl, pre: []string{"--kubeconfig", kc, "--cache-dir", filepath.Join(t.TempDir(), "kube-cache")}, env: []string{"KUBECONFIG=" + kc}}
	ev := &kfTool{t: t, name: "everynode", bin: bin, env: []string{"KUBECONFIG=" + kc}}
	ds := newDaemonSet("agent")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: maxUnavailable(1)}
	_, oldHash := c.startDS(ds, n)
	// Set on a complete rollout, so that only the update below can miss it.
	kube.ok("annotate", "ds/agent", rollout.ProgressDeadlineSeconds+"=5")

	kube.ok("set", "image", "ds/agent", "daemon="+brokenImage)
	c.waitCondition("agent", rollout.ReasonProgressDeadlineExceeded, "no updated pod became available for 5s")
	badHash := c.currentRevision("agent", "app=agent").Labels[hashLabel]
	if cond := c.progressing("agent"); cond.Status != "False" || cond.Message != `rolling out ControllerRevision "agent-`+badHash+`": no updated pod became available for 5s` {
		t.Fatalf("condition %+v", cond)
	}
	c.waitEvents("agent", rollout.ReasonProgressDeadlineExceeded, 1)

	stderr := ev.fails("rollout", "status", "ds/agent", "--nodes=false", "--timeout=60s")
	kfWantLastLine(t, stderr, `error: daemon set "agent" rollout failed (ProgressDeadlineExceeded): rolling out ControllerRevision "agent-`+badHash+
		`": no updated pod became available for 5s; roll it back with "everynode rollout undo ds/agent", or fix the template and apply it again`)
	yaml := kube.ok("get", "ds", "agent", "-o", "yaml")
	for _, w := range []string{"type: Progressing", "reason: ProgressDeadlineExceeded", `status: "False"`, `rolling out ControllerRevision "agent-` + badHash + `"`} {
		kfWant(t, yaml, w)
	}
	kfWant(t, kube.ok("describe", "ds", "agent"), "Warning  ProgressDeadlineExceeded")

	// Without auto-rollback nothing is undone: the template keeps the
	// image, the one node the update reached keeps its new pod (not
	// ready), and the budget (maxUnavailable 1) holds the rest on the old
	// revision.
	consistently(t, 2*time.Second, func() error {
		if img := c.getDS("agent").Spec.Template.Spec.Containers[0].Image; img != brokenImage {
			return fmt.Errorf("template image %s, want %s kept", img, brokenImage)
		}
		pods, err := c.podsByNode("agent")
		if err != nil {
			return err
		}
		var onNew, onOld int
		for node, p := range pods {
			switch {
			case p.Labels[hashLabel] == badHash && !runningReady(p):
				onNew++
			case p.Labels[hashLabel] == oldHash && runningReady(p):
				onOld++
			default:
				return fmt.Errorf("node %s: pod %s revision %s ready %v", node, p.Name, p.Labels[hashLabel], runningReady(p))
			}
		}
		if onNew != 1 || onOld != n-1 {
			return fmt.Errorf("%d nodes on the new revision, %d on the old; want 1 and %d", onNew, onOld, n-1)
		}
		return nil
	})

	// Fixing the image is progress: the rollout completes.
	kube.ok("set", "image", "ds/agent", "daemon="+imageV2)
	c.waitRolledOut("agent", n, c.currentRevision("agent", "app=agent").Labels[hashLabel])
	c.waitCondition("agent", rollout.ReasonNewRevisionAvailable, "")
}
