package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/everynode/everynode/resources"
)

// Issue 15 item 7: "everynode plan -f" says node by node what applying a
// manifest does, changing nothing, and then the controller does exactly
// that; "kubectl apply --dry-run=server" writes nothing.

// planManifest is the DaemonSet "logs" selecting nodes by selector, with
// image.
func planManifest(selector, image string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: logs
  namespace: default
spec:
  selector:
    matchLabels: {app: logs}
  template:
    metadata:
      labels: {app: logs}
    spec:
      terminationGracePeriodSeconds: 1
      nodeSelector: {%s}
      containers:
      - name: logs
        image: %s
`, selector, image)
}

// planRow is one parsed row of a plan's table.
type planRow struct {
	action, revisions, reason string
}

var planCells = regexp.MustCompile(`\s{2,}`)

// parsePlan reads the NODE ACTION REVISION REASON table of "everynode plan".
func parsePlan(t *testing.T, out string) map[string]planRow {
	t.Helper()
	rows := map[string]planRow{}
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "NODE "):
			in = true
		case strings.HasPrefix(line, "Plan: ") || line == "":
			in = false
		case in:
			cells := planCells.Split(line, 4)
			if len(cells) != 4 {
				t.Fatalf("plan row %q: %d cells", line, len(cells))
			}
			rows[cells[0]] = planRow{action: cells[1], revisions: cells[2], reason: cells[3]}
		}
	}
	return rows
}

// planTarget is the revision a gain or update moves a node to.
func (r planRow) target() string {
	_, to, _ := strings.Cut(r.revisions, "-> ")
	return to
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPlanMatchesApply: on a fleet with node labels, a NoSchedule taint
// added under a running pod and a cordoned node, the plan of a new node
// selector and image is printed, changes nothing, and is what the
// controller then does after "kubectl apply", node for node.
func TestPlanMatchesApply(t *testing.T) {
	kubectl := requireKubectl(t)
	bin := buildEverynode(t)
	c := newCluster(t, 0)
	fleet := map[string]map[string]string{
		"node-a": {"fleet": "edge", "disk": "ssd"}, // updates
		"node-b": {"fleet": "edge", "disk": "ssd"}, // tainted gpu:NoSchedule: loses its pod
		"node-c": {"fleet": "edge", "disk": "ssd"}, // cordoned: updates (daemon pods tolerate it)
		"node-d": {"fleet": "edge", "disk": "hdd"}, // no longer selected: loses its pod
		"node-e": {"disk": "ssd"},                  // newly selected: gains a pod
		"node-f": {"disk": "hdd"},                  // never selected
	}
	for name, labels := range fleet {
		c.startNode(name, labels)
	}
	for name := range fleet {
		c.waitNode(name)
	}
	kc := kfKubeconfig(t, c)
	cache := filepath.Join(t.TempDir(), "kube-cache")
	k := &kfTool{t: t, name: "kubectl", bin: kubectl, pre: []string{"--kubeconfig", kc, "--cache-dir", cache}}
	e := &kfTool{t: t, name: "everynode", bin: bin, env: []string{"KUBECONFIG=" + kc}}

	k.ok("apply", "-f", writeFile(t, "v1.yaml", planManifest("fleet: edge", imageV1)))
	c.waitStatus("logs", counts{desired: 4, current: 4, ready: 4, updated: 4, available: 4})
	c.setTaints("node-b", corev1.Taint{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule})
	e.ok("cordon", "node-c")
	before, err := c.pods("app=logs")
	if err != nil {
		t.Fatal(err)
	}
	dsBefore := c.getDS("logs")

	v2 := writeFile(t, "v2.yaml", planManifest("disk: ssd", imageV2))
	out := e.ok("plan", "-f", v2)
	if !strings.HasPrefix(out, "daemonset.apps/logs configured (server dry run)\n") {
		t.Errorf("plan's first line:\n%s", out)
	}
	plan := parsePlan(t, out)
	wantActions := map[string]string{"node-a": "update", "node-b": "lose", "node-c": "update", "node-d": "lose", "node-e": "gain", "node-f": "none"}
	for node, want := range wantActions {
		if plan[node].action != want {
			t.Errorf("plan for %s: %+v, want %s", node, plan[node], want)
		}
	}
	if r := plan["node-b"].reason; !strings.Contains(r, "taint gpu=true:NoSchedule not tolerated") {
		t.Errorf("node-b's reason: %q", r)
	}
	if r := plan["node-c"].reason; r != "template changed; cordoned, which daemon pods tolerate" {
		t.Errorf("node-c's reason: %q", r)
	}
	if r := plan["node-e"].reason; !strings.Contains(r, "node selector matches") {
		t.Errorf("node-e's reason: %q", r)
	}
	if now := c.getDS("logs"); now.ResourceVersion != dsBefore.ResourceVersion {
		t.Fatalf("plan changed the DaemonSet: resourceVersion %s -> %s", dsBefore.ResourceVersion, now.ResourceVersion)
	}

	// Apply it with kubectl; the controller must do what the plan said.
	k.ok("apply", "-f", v2)
	c.waitStatus("logs", counts{desired: 3, current: 3, ready: 3, updated: 3, available: 3})
	uids := map[string]string{}
	for _, p := range before {
		uids[p.Spec.NodeName] = string(p.UID)
	}
	eventually(t, waitLong, func() error {
		pods, err := c.pods("app=logs")
		if err != nil {
			return err
		}
		on := byNode(pods)
		for node, row := range plan {
			ps := on[node]
			switch row.action {
			case "gain", "update":
				if len(ps) != 1 || ps[0].Labels[hashLabel] != row.target() || !runningReady(ps[0]) {
					return fmt.Errorf("%s (%s to %s): pods %s", node, row.action, row.target(), podNames(ps))
				}
				if row.action == "update" && string(ps[0].UID) == uids[node] {
					return fmt.Errorf("%s: pod %s was not replaced", node, ps[0].Name)
				}
			case "keep":
				if len(ps) != 1 || string(ps[0].UID) != uids[node] {
					return fmt.Errorf("%s (keep): pods %s", node, podNames(ps))
				}
			case "lose", "none":
				if len(ps) != 0 {
					return fmt.Errorf("%s (%s): pods %s", node, row.action, podNames(ps))
				}
			}
		}
		return nil
	})

	// Planned again, the same manifest changes nothing: every node keeps
	// what it has.
	again := parsePlan(t, e.ok("plan", "-f", v2))
	for node, want := range map[string]string{"node-a": "keep", "node-b": "none", "node-c": "keep", "node-d": "none", "node-e": "keep", "node-f": "none"} {
		if again[node].action != want {
			t.Errorf("second plan for %s: %+v, want %s", node, again[node], want)
		}
	}

	// The per-node table (issue 15 item 6) of the finished rollout.
	status := e.ok("rollout", "status", "ds/logs", "--nodes")
	if !strings.Contains(status, "daemon set \"logs\" successfully rolled out\n") || strings.Count(status, " updated ") != 3 {
		t.Errorf("rollout status --nodes:\n%s", status)
	}
	if d := e.ok("describe", "ds", "logs"); !strings.Contains(d, "Nodes (update revision "+plan["node-a"].target()+"):") {
		t.Errorf("describe lacks the Nodes table:\n%s", d)
	}

	t.Run("kubectl dry-run=server writes nothing", func(t *testing.T) {
		c := c.sub(t)
		k.t, e.t = t, t
		// The objects' etcd keys (package store's layout, as Kubernetes').
		keys := []string{"/registry/daemonsets/default/logs", "/registry/namespaces/dry-ns", "/registry/configmaps/default/dry-cm"}
		modRevisions := func() []int64 {
			var out []int64
			for _, k := range keys {
				res, err := c.srv.Etcd().Get(c.ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				rev := int64(0)
				if len(res.Kvs) > 0 {
					rev = res.Kvs[0].ModRevision
				}
				out = append(out, rev)
			}
			return out
		}
		dsBefore, etcdBefore := c.getDS("logs"), modRevisions()
		if etcdBefore[0] == 0 || etcdBefore[1] != 0 || etcdBefore[2] != 0 {
			t.Fatalf("etcd keys %v: mod revisions %v", keys, etcdBefore)
		}
		manifests := planManifest("disk: ssd", imageV1) + `---
apiVersion: v1
kind: Namespace
metadata: {name: dry-ns}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: dry-cm, namespace: default}
data: {k: v}
`
		out := k.ok("apply", "--dry-run=server", "-f", writeFile(t, "all.yaml", manifests))
		want := "daemonset.apps/logs configured (server dry run)\nnamespace/dry-ns created (server dry run)\nconfigmap/dry-cm created (server dry run)\n"
		if out != want {
			t.Errorf("kubectl apply --dry-run=server:\n%s\nwant\n%s", out, want)
		}
		out = k.ok("create", "--dry-run=server", "-f", writeFile(t, "new.yaml", strings.SplitN(manifests, "---\n", 2)[1]))
		if want := "namespace/dry-ns created (server dry run)\nconfigmap/dry-cm created (server dry run)\n"; out != want {
			t.Errorf("kubectl create --dry-run=server:\n%s\nwant\n%s", out, want)
		}
		if got := modRevisions(); fmt.Sprint(got) != fmt.Sprint(etcdBefore) {
			t.Errorf("etcd changed: mod revisions %v -> %v", etcdBefore, got)
		}
		if now := c.getDS("logs"); now.ResourceVersion != dsBefore.ResourceVersion || now.Spec.Template.Spec.Containers[0].Image != imageV2 {
			t.Errorf("DaemonSet changed: resourceVersion %s -> %s, image %s", dsBefore.ResourceVersion, now.ResourceVersion, now.Spec.Template.Spec.Containers[0].Image)
		}
		for _, r := range []struct {
			r         *resources.Resource
			namespace string
			name      string
		}{{resources.Namespaces, "", "dry-ns"}, {resources.ConfigMaps, "default", "dry-cm"}} {
			if _, err := c.admin.Get(c.ctx, r.r, r.namespace, r.name); !apierrors.IsNotFound(err) {
				t.Errorf("%s %s after a dry run: %v, want NotFound", r.r.Name, r.name, err)
			}
		}
	})
}

// requireKubectl is the kubectl on PATH; without one the test is skipped
// loudly (EVERYNODE_REQUIRE_KUBECTL=1 makes that a failure).
func requireKubectl(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("EVERYNODE_REQUIRE_KUBECTL") == "1" {
			t.Fatalf("kubectl is required (EVERYNODE_REQUIRE_KUBECTL=1) but not on PATH: %v", err)
		}
		t.Skipf("SKIPPING: kubectl not on PATH (%v); set EVERYNODE_REQUIRE_KUBECTL=1 to fail instead", err)
	}
	return bin
}

// TestRolloutStatusNodes (issue 15 item 6): during a rollout of an image
// that cannot be pulled, with one node unreachable, "rollout status
// --nodes" lists the failing node and the unreachable one first, the
// others after, and keeps its exit codes.
func TestRolloutStatusNodes(t *testing.T) {
	const n = 4
	bin := buildEverynode(t)
	c := newCluster(t, n)
	ds := newDaemonSet("logs")
	ds.Spec.UpdateStrategy.RollingUpdate = maxUnavailable(2)
	c.startDS(ds, n)
	c.stopNode("node-3")
	c.members.SetAlive("node-3", false)
	eventually(t, waitLong, func() error {
		node, err := c.admin.Get(c.ctx, resources.Nodes, "", "node-3")
		if err != nil {
			return err
		}
		if ready := nodeReady(node.(*corev1.Node)); ready != corev1.ConditionUnknown {
			return fmt.Errorf("node-3 Ready=%s", ready)
		}
		return nil
	})
	c.updateDS("logs", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = brokenImage })

	e := &kfTool{t: t, name: "everynode", bin: bin, env: []string{"KUBECONFIG=" + kfKubeconfig(t, c)}}
	stateOf := func(out string) map[string]string {
		states := map[string]string{}
		var order []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 5 && strings.HasPrefix(f[0], "node-") {
				states[f[0]] = f[4]
				order = append(order, f[4])
			}
		}
		states["order"] = strings.Join(order, ",")
		return states
	}
	var last string
	eventually(t, waitLong, func() error {
		last = e.ok("rollout", "status", "ds/logs", "--nodes", "-w=false")
		s := stateOf(last)
		// Until each updated node's new pod has failed, its row may read
		// "updating" (pod created, waiting for the node).
		if !regexp.MustCompile(`^(failing,)+unreachable(,waiting)*$`).MatchString(s["order"]) || s["node-3"] != "unreachable" {
			return fmt.Errorf("want failing rows first, node-3 unreachable, then waiting:\n%s", last)
		}
		return nil
	})
	if !strings.Contains(last, "node unreachable since ") || !regexp.MustCompile(`container daemon: (ErrImagePull|ImagePullBackOff)`).MatchString(last) {
		t.Errorf("reasons:\n%s", last)
	}
	// Watching: blocks until the timeout, exit 1 as without --nodes; no
	// ANSI redraw on a pipe.
	r := e.run("rollout", "status", "ds/logs", "--nodes", "--timeout", "2s")
	if r.code != 1 || !strings.Contains(r.err, "timed out waiting for the condition") || !strings.Contains(r.out, "NODE ") || strings.Contains(r.out, "\x1b[") {
		t.Errorf("watch with --timeout: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.err)
	}
}
