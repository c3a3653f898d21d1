package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/everynode/everynode/rollout"
)

// TestAutoRollbackCanary is issue 15's "a bad image on 1 canary node of 20
// is rolled back automatically with 19 nodes never touched"
// (docs/rollouts.md §6): partition 1 and auto-rollback; the new image
// cannot be pulled on the canary node, so the controller rewrites the
// template to the last fully available revision, marks the failed one bad,
// says why in the condition and a Warning event, and restores the canary;
// the other 19 nodes keep their pods (same UIDs) throughout; `everynode
// rollout status` exits 1 naming the rollback and the fix.
func TestAutoRollbackCanary(t *testing.T) {
	const n = 20
	c := newCluster(t, n)
	ds := newDaemonSet("agent")
	ds.Annotations = map[string]string{rollout.AutoRollback: "true", rollout.Partition: "1", rollout.ProgressDeadlineSeconds: "300"}
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: maxUnavailable(1)}
	before, goodHash := c.startDS(ds, n)
	// The controller marks revision 1 fully available once the rollout completes.
	eventually(t, waitLong, func() error {
		revs := c.revisions("app=agent")
		if len(revs) != 1 || revs[0].Annotations[rollout.FullyAvailable] == "" {
			return fmt.Errorf("revision 1 not marked %s yet", rollout.FullyAvailable)
		}
		return nil
	})

	c.updateDS("agent", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = brokenImage })
	c.waitCondition("agent", rollout.ReasonRolledBack, "rolled back to revision 1 (agent-"+goodHash+")")
	cond := c.progressing("agent")
	if cond.Status != "False" || !strings.Contains(cond.Message, "ErrImagePull") && !strings.Contains(cond.Message, "ImagePullBackOff") {
		t.Fatalf("condition %+v: want False naming the pull failure", cond)
	}
	got := c.getDS("agent")
	if img := got.Spec.Template.Spec.Containers[0].Image; img != imageV1 {
		t.Fatalf("template image after the rollback: %s, want %s", img, imageV1)
	}
	bad := got.Annotations[rollout.BadRevision]
	if bad == "" || bad == goodHash || !strings.Contains(cond.Message, "(agent-"+bad+") failed") {
		t.Fatalf("bad-revision %q; condition %q", bad, cond.Message)
	}
	c.waitEvents("agent", rollout.ReasonRolledBack, 1)

	// `everynode rollout status` fails with the reason and the fix, on one line.
	k := &kfTool{t: t, name: "everynode", bin: buildEverynode(t), env: []string{"KUBECONFIG=" + kfKubeconfig(t, c)}}
	stderr := k.fails("rollout", "status", "ds/agent", "--nodes=false", "--timeout=60s")
	kfWant(t, stderr, `error: daemon set "agent" rollout failed and was rolled back automatically (RolledBack): rolled back to revision 1 (agent-`+goodHash+`)`)
	kfWant(t, stderr, "; fix the template and apply it again")
	if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 {
		t.Fatalf("rollout status printed %d lines on stderr:\n%s", n+1, stderr)
	}

	// Every node back on revision 1; only the canary's pod was ever replaced.
	after := c.waitRolledOut("agent", n, goodHash)
	var replaced []string
	for node, p := range after {
		if before[node].UID != p.UID {
			replaced = append(replaced, node)
		}
	}
	if len(replaced) != 1 {
		t.Fatalf("pods replaced on %v, want only the canary node's", replaced)
	}
	// The failed revision is not retried: the controller writes nothing more.
	consistently(t, 3*time.Second, func() error {
		d := c.getDS("agent")
		if img := d.Spec.Template.Spec.Containers[0].Image; img != imageV1 {
			return fmt.Errorf("template image %s", img)
		}
		if cur := c.progressing("agent"); cur.Reason != rollout.ReasonRolledBack {
			return fmt.Errorf("condition %+v", cur)
		}
		return c.wantRevisions("agent", allOn(goodHash, nodeNames(n)...))
	})
}
