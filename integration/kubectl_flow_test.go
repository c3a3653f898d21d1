package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// The tutorial flow (issue 6), typed once with the real kubectl and once
// with the everynode CLI, against a server with three simulated nodes. Every
// step is checked on the objects through the API, not only on exit codes,
// and the outputs that do not depend on generated names must be the same
// for both tools.

const (
	kfMasterTaint = "node-role.kubernetes.io/master"
	kfRedis       = "name=redis-ds"
	kfFluentd     = "name=fluentd-elasticsearch"
	kfMonitor     = "name=monitor"
)

// The pod templates "rollout history --revision=1" prints, as kubectl 1.32
// prints them (tab-separated).
const (
	kfRedisRevision1 = "daemonset.apps/redis-ds with revision #1\nPod Template:\n" +
		"  Labels:\tname=redis-ds\n  Containers:\n   redis:\n    Image:\tredis:5-alpine\n    Port:\t6379/TCP\n" +
		"    Host Port:\t0/TCP\n    Environment:\t<none>\n    Mounts:\t<none>\n  Volumes:\t<none>\n" +
		"  Node-Selectors:\t<none>\n  Tolerations:\tnode-role.kubernetes.io/master:NoSchedule op=Exists\n\n"
	kfFluentdRevision1 = "daemonset.apps/fluentd-elasticsearch with revision #1\nPod Template:\n" +
		"  Labels:\tname=fluentd-elasticsearch\n  Containers:\n   fluentd-elasticsearch:\n" +
		"    Image:\tfluent/fluentd-kubernetes-daemonset:v1.7.1-debian-syslog-1.0\n    Port:\t<none>\n    Host Port:\t<none>\n" +
		"    Limits:\n      memory:\t200Mi\n    Requests:\n      cpu:\t100m\n      memory:\t200Mi\n    Environment:\t<none>\n" +
		"    Mounts:\n      /var/lib/docker/containers from varlibdockercontainers (ro)\n      /var/log from varlog (rw)\n" +
		"  Volumes:\n   varlog:\n    Type:\tHostPath (bare host directory volume)\n    Path:\t/var/log\n    HostPathType:\t\n" +
		"   varlibdockercontainers:\n    Type:\tHostPath (bare host directory volume)\n    Path:\t/var/lib/docker/containers\n" +
		"    HostPathType:\t\n  Node-Selectors:\t<none>\n  Tolerations:\tnode-role.kubernetes.io/master:NoSchedule\n\n"
)

// kfTool runs one command line tool against the cluster.
type kfTool struct {
	t    *testing.T
	name string   // "kubectl" or "everynode"
	bin  string   // executable
	pre  []string // arguments before the verb
	env  []string
}

// kfResult is one finished run.
type kfResult struct {
	out, err string
	code     int
}

func (k *kfTool) run(args ...string) kfResult {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.bin, append(append([]string{}, k.pre...), args...)...)
	cmd.Env = append(os.Environ(), k.env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := kfResult{out: out.String(), err: errb.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	case err != nil:
		k.t.Fatalf("%s %s: %v", k.name, strings.Join(args, " "), err)
	}
	// A transcript of the session (go test -v).
	k.t.Logf("$ %s %s   # exit %d\n%s%s", k.name, strings.Join(args, " "), res.code, res.out, res.err)
	return res
}

// ok runs the tool, fails the test unless it exits 0, and returns stdout.
func (k *kfTool) ok(args ...string) string {
	k.t.Helper()
	r := k.run(args...)
	if r.code != 0 {
		k.t.Fatalf("%s %s: exit %d\nstdout: %s\nstderr: %s", k.name, strings.Join(args, " "), r.code, r.out, r.err)
	}
	return r.out
}

// fails runs the tool, wants exit code 1, and returns stderr.
func (k *kfTool) fails(args ...string) string {
	k.t.Helper()
	r := k.run(args...)
	if r.code != 1 {
		k.t.Fatalf("%s %s: exit %d, want 1\nstdout: %s\nstderr: %s", k.name, strings.Join(args, " "), r.code, r.out, r.err)
	}
	return r.err
}

// kfKubeconfig writes an admin kubeconfig for the cluster.
func kfKubeconfig(t *testing.T, c *cluster) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := pki.WriteKubeconfig(path, c.url, c.caPEM, adminToken, "everynode"); err != nil {
		t.Fatalf("WriteKubeconfig: %v", err)
	}
	return path
}

// TestKubectlFlow is the tutorial flow with the kubectl on PATH (skipped
// loudly without it; EVERYNODE_REQUIRE_KUBECTL=1 makes that a failure).
func TestKubectlFlow(t *testing.T) {
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("EVERYNODE_REQUIRE_KUBECTL") == "1" {
			t.Fatalf("kubectl is required (EVERYNODE_REQUIRE_KUBECTL=1) but not on PATH: %v", err)
		}
		t.Skipf("SKIPPING real-kubectl flow: kubectl not on PATH (%v); set EVERYNODE_REQUIRE_KUBECTL=1 to fail instead", err)
	}
	c := newCluster(t, 3)
	kc := kfKubeconfig(t, c)
	cache := filepath.Join(t.TempDir(), "kube-cache") // fresh discovery per test
	k := &kfTool{t: t, name: "kubectl", bin: bin, pre: []string{"--kubeconfig", kc, "--cache-dir", cache}, env: []string{"KUBECONFIG=" + kc}}
	kfTutorial(t, c, k)
}

// TestCLIFlow is the same flow with the everynode binary.
func TestCLIFlow(t *testing.T) {
	bin := buildEverynode(t)
	c := newCluster(t, 3)
	kc := kfKubeconfig(t, c)
	k := &kfTool{t: t, name: "everynode", bin: bin, env: []string{"KUBECONFIG=" + kc}}
	kfTutorial(t, c, k)
}

func kfTestdata(name string) string { return filepath.Join("testdata", "kubectlflow", name) }

func kfWant(t *testing.T, out, want string) {
	t.Helper()
	if !strings.Contains(out, want) {
		t.Fatalf("output lacks %q:\n%s", want, out)
	}
}

// kfWantLastLine checks the last line of out exactly.
func kfWantLastLine(t *testing.T, out, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if got := lines[len(lines)-1]; got != want {
		t.Fatalf("last line %q, want %q; output:\n%s", got, want, out)
	}
}

func kfTutorial(t *testing.T, c *cluster, k *kfTool) {
	start := time.Now()
	defer func() { t.Logf("%s flow took %s", k.name, time.Since(start).Round(time.Millisecond)) }()
	all := nodeNames(3)

	// A node tainted as a master.
	kfWant(t, k.ok("taint", "nodes", "node-2", kfMasterTaint+":NoSchedule"), "node/node-2 tainted")
	if n := c.kfNode("node-2"); !kfHasTaint(n, kfMasterTaint, corev1.TaintEffectNoSchedule) {
		t.Fatalf("node-2 taints %v", n.Spec.Taints)
	}
	kfWant(t, k.fails("taint", "nodes", "node-2", kfMasterTaint+"=x:NoSchedule"),
		"node node-2 already has node-role.kubernetes.io/master taint(s) with same effect(s) and --overwrite is false")

	// The tutorial's manifests, unchanged: both tolerate the master taint.
	kfWant(t, k.ok("apply", "-f", kfTestdata("redis-ds.yaml")), "daemonset.apps/redis-ds created")
	kfWant(t, k.ok("apply", "-f", kfTestdata("fluentd-elasticsearch.yaml")), "daemonset.apps/fluentd-elasticsearch created")
	kfWantLastLine(t, k.ok("rollout", "status", "ds/redis-ds", "--timeout=60s"), `daemon set "redis-ds" successfully rolled out`)
	kfWantLastLine(t, k.ok("rollout", "status", "daemonset/fluentd-elasticsearch", "-n", "kube-system", "--timeout=60s"),
		`daemon set "fluentd-elasticsearch" successfully rolled out`)
	c.kfPodsOn("default", kfRedis, all, "redis:5-alpine")
	c.kfPodsOn("kube-system", kfFluentd, all, "fluent/fluentd-kubernetes-daemonset:v1.7.1-debian-syslog-1.0")

	// Without the toleration the master gets no pod, until it is applied.
	kfWant(t, k.ok("apply", "-f", kfTestdata("monitor.yaml")), "daemonset.apps/monitor created")
	kfWantLastLine(t, k.ok("rollout", "status", "ds/monitor", "--timeout=60s"), `daemon set "monitor" successfully rolled out`)
	c.kfPodsOn("default", kfMonitor, []string{"node-0", "node-1"}, "")
	if ds := c.kfDS("default", "monitor"); ds.Status.DesiredNumberScheduled != 2 {
		t.Fatalf("monitor desires %d pods, want 2 (node-2 is tainted)", ds.Status.DesiredNumberScheduled)
	}
	consistently(t, time.Second, func() error { return c.kfNoPodOn("default", kfMonitor, "node-2") })
	kfWant(t, k.ok("apply", "-f", kfTestdata("monitor-tolerates.yaml")), "daemonset.apps/monitor configured")
	kfWantLastLine(t, k.ok("rollout", "status", "ds/monitor", "--timeout=60s"), `daemon set "monitor" successfully rolled out`)
	c.kfPodsOn("default", kfMonitor, all, "")

	// A taint added later does not remove the running pod; a pod deleted
	// meanwhile comes back only when the taint goes.
	running := c.kfPodsOn("default", kfMonitor, all, "")["node-1"]
	kfWant(t, k.ok("taint", "node", "node-1", "example.com/maintenance=true:NoSchedule"), "node/node-1 tainted")
	consistently(t, time.Second, func() error {
		got := c.kfPodsOn("default", kfMonitor, all, "")["node-1"]
		if got.UID != running.UID {
			return fmt.Errorf("node-1's pod was replaced (%s → %s)", running.UID, got.UID)
		}
		return nil
	})
	kfWant(t, k.ok("delete", "pod", running.Name), fmt.Sprintf("pod %q deleted", running.Name))
	eventually(t, waitLong, func() error { return c.kfNoPodOn("default", kfMonitor, "node-1") })
	consistently(t, time.Second, func() error { return c.kfNoPodOn("default", kfMonitor, "node-1") })
	kfWant(t, k.ok("taint", "node", "node-1", "example.com/maintenance:NoSchedule-"), "node/node-1 untainted")
	if n := c.kfNode("node-1"); kfHasTaint(n, "example.com/maintenance", corev1.TaintEffectNoSchedule) {
		t.Fatalf("node-1 still tainted: %v", n.Spec.Taints)
	}
	kfWantLastLine(t, k.ok("rollout", "status", "ds/monitor", "--timeout=60s"), `daemon set "monitor" successfully rolled out`)
	if back := c.kfPodsOn("default", kfMonitor, all, "")["node-1"]; back.UID == running.UID {
		t.Fatalf("node-1 has the deleted pod %s", back.UID)
	}

	// Labels and annotations, with kubectl's refusal to overwrite.
	kfWant(t, k.ok("label", "node", "node-1", "disk=ssd"), "node/node-1 labeled")
	kfWant(t, k.fails("label", "node", "node-1", "disk=hdd"), "'disk' already has a value (ssd), and --overwrite is false")
	kfWant(t, k.ok("label", "node", "node-1", "disk=hdd", "--overwrite"), "node/node-1 labeled")
	if got := c.kfNode("node-1").Labels["disk"]; got != "hdd" {
		t.Fatalf("label disk = %q", got)
	}
	kfWant(t, k.ok("label", "node", "node-1", "disk-"), "node/node-1 unlabeled")
	kfWant(t, k.ok("annotate", "ds", "redis-ds", "kubernetes.io/change-cause=tutorial"), "daemonset.apps/redis-ds annotated")
	if got := c.kfDS("default", "redis-ds").Annotations["kubernetes.io/change-cause"]; got != "tutorial" {
		t.Fatalf("annotation = %q", got)
	}

	kfRollout(t, c, k)
	kfDescribe(t, c, k)
	kfDrain(t, c, k)
	kfOrphanAdopt(t, c, k)

	// Listing everything.
	out := k.ok("get", "all")
	kfWant(t, out, "daemonset.apps/redis-ds   3         3         3       3            3           <none>")
	kfWant(t, out, "pod/redis-ds-")
	if strings.Contains(out, "fluentd") {
		t.Fatalf("get all showed another namespace:\n%s", out)
	}
	out = k.ok("get", "pods", "-A")
	kfWant(t, out, "kube-system")
	kfWant(t, out, "fluentd-elasticsearch-")
	out = k.ok("get", "ds", "-A", "-o", "wide")
	for _, s := range []string{"NAMESPACE", "NODE SELECTOR", "CONTAINERS", "kube-system   fluentd-elasticsearch   3", "default       redis-ds                3"} {
		kfWant(t, out, s)
	}

	kfForegroundDelete(t, c, k)
}

// kfForegroundDelete: delete --cascade=foreground waits (the command's own
// wait) until the DaemonSet is gone, which happens only after its pods and
// revisions are: when the command returns, none of them is left.
func kfForegroundDelete(t *testing.T, c *cluster, k *kfTool) {
	kfWant(t, k.ok("delete", "ds", "monitor", "--cascade=foreground", "--timeout=60s"), `daemonset.apps "monitor" deleted`)
	if _, err := c.admin.Get(c.ctx, resources.DaemonSets, "default", "monitor"); !apierrors.IsNotFound(err) {
		t.Fatalf("monitor after foreground delete: %v", err)
	}
	pods, err := c.kfPods("default", kfMonitor)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 0 {
		t.Fatalf("%d monitor pod(s) left after the foreground delete returned: the DaemonSet went before its dependents", len(pods))
	}
	if revs := c.kfRevisions("default", kfMonitor); revs != "" {
		t.Fatalf("monitor revisions left after the foreground delete returned: %s", revs)
	}
}

// kfRollout: set image, status, history, undo, restart on redis-ds.
func kfRollout(t *testing.T, c *cluster, k *kfTool) {
	all := nodeNames(3)
	kfWant(t, k.ok("set", "image", "ds/redis-ds", "redis=redis:6-alpine"), "daemonset.apps/redis-ds image updated")
	kfWantLastLine(t, k.ok("rollout", "status", "ds/redis-ds", "--timeout=60s"), `daemon set "redis-ds" successfully rolled out`)
	c.kfPodsOn("default", kfRedis, all, "redis:6-alpine")

	hist := k.ok("rollout", "history", "ds/redis-ds")
	if want := "daemonset.apps/redis-ds \nREVISION  CHANGE-CAUSE\n1         <none>\n2         tutorial\n\n"; hist != want {
		t.Fatalf("history:\n%q\nwant\n%q", hist, want)
	}
	if rev1 := k.ok("rollout", "history", "ds/redis-ds", "--revision=1"); rev1 != kfRedisRevision1 {
		t.Fatalf("history --revision=1:\n%q\nwant\n%q", rev1, kfRedisRevision1)
	}
	if rev1 := k.ok("rollout", "history", "ds/fluentd-elasticsearch", "-n", "kube-system", "--revision=1"); rev1 != kfFluentdRevision1 {
		t.Fatalf("fluentd history --revision=1:\n%q\nwant\n%q", rev1, kfFluentdRevision1)
	}
	kfWant(t, k.fails("rollout", "history", "ds/redis-ds", "--revision=9"), "unable to find the specified revision")

	if out := k.ok("rollout", "undo", "ds/redis-ds"); out != "daemonset.apps/redis-ds rolled back\n" {
		t.Fatalf("undo printed %q", out)
	}
	kfWantLastLine(t, k.ok("rollout", "status", "ds/redis-ds", "--timeout=60s"), `daemon set "redis-ds" successfully rolled out`)
	c.kfPodsOn("default", kfRedis, all, "redis:5-alpine")
	if got := c.kfRevisions("default", kfRedis); got != "2,3" {
		t.Fatalf("revisions after undo %s, want 2,3 (revision 1 became 3)", got)
	}
	kfWant(t, k.fails("rollout", "undo", "ds/redis-ds", "--to-revision=1"), "unable to find specified revision 1 in history")
	if out := k.ok("rollout", "undo", "ds/redis-ds", "--to-revision=2"); out != "daemonset.apps/redis-ds rolled back\n" {
		t.Fatalf("undo --to-revision=2 printed %q", out)
	}
	kfWantLastLine(t, k.ok("rollout", "status", "ds/redis-ds", "--timeout=60s"), `daemon set "redis-ds" successfully rolled out`)
	before := c.kfPodsOn("default", kfRedis, all, "redis:6-alpine")

	if out := k.ok("rollout", "restart", "ds/redis-ds"); out != "daemonset.apps/redis-ds restarted\n" {
		t.Fatalf("restart printed %q", out)
	}
	if at := c.kfDS("default", "redis-ds").Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"]; at == "" {
		t.Fatal("restart set no restartedAt annotation")
	}
	kfWantLastLine(t, k.ok("rollout", "status", "ds/redis-ds", "--timeout=60s"), `daemon set "redis-ds" successfully rolled out`)
	after := c.kfPodsOn("default", kfRedis, all, "redis:6-alpine")
	for _, n := range all {
		if after[n].UID == before[n].UID {
			t.Fatalf("restart kept pod %s on %s", after[n].Name, n)
		}
	}
}

// kfDescribe: describe ds, pod and node, with their events.
func kfDescribe(t *testing.T, c *cluster, k *kfTool) {
	out := k.ok("describe", "ds", "redis-ds")
	for _, s := range []string{"Name:", "redis-ds", "Selector:", "name=redis-ds", "Events:", "SuccessfulCreate"} {
		kfWant(t, out, s)
	}
	pod := c.kfPodsOn("default", kfRedis, nodeNames(3), "")["node-0"]
	out = k.ok("describe", "pod", pod.Name)
	for _, s := range []string{pod.Name, "node-0", "redis:6-alpine", "Events:"} {
		kfWant(t, out, s)
	}
	out = k.ok("describe", "node", "node-2")
	for _, s := range []string{"node-2", "Taints:", kfMasterTaint + ":NoSchedule", "Events:"} {
		kfWant(t, out, s)
	}
}

// kfDrain: drain refuses DaemonSet pods without --ignore-daemonsets; with
// it the bare pod goes, the daemon pods stay and the node stays cordoned.
func kfDrain(t *testing.T, c *cluster, k *kfTool) {
	kfWant(t, k.ok("apply", "-f", kfTestdata("bare-pod.yaml")), "pod/scratch created")
	eventually(t, waitLong, func() error {
		p, err := c.admin.Get(c.ctx, resources.Pods, "default", "scratch")
		if err != nil {
			return err
		}
		if !runningReady(p.(*corev1.Pod)) {
			return errors.New("scratch not running yet")
		}
		return nil
	})
	daemons := c.kfDaemonPodsOn("node-0")
	if len(daemons) != 3 {
		t.Fatalf("node-0 runs %d daemon pods, want 3 (redis, fluentd, monitor)", len(daemons))
	}

	kfWant(t, k.fails("drain", "node-0", "--timeout=60s"), "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore)")
	if !c.kfNode("node-0").Spec.Unschedulable {
		t.Fatal("a refused drain still cordons the node (as kubectl does); node-0 is not cordoned")
	}
	if _, err := c.admin.Get(c.ctx, resources.Pods, "default", "scratch"); err != nil {
		t.Fatalf("refused drain touched the bare pod: %v", err)
	}
	r := k.run("drain", "node-0", "--ignore-daemonsets", "--force", "--timeout=60s")
	if r.code != 0 {
		t.Fatalf("drain: exit %d\nstdout: %s\nstderr: %s", r.code, r.out, r.err)
	}
	kfWantLastLine(t, r.out, "node/node-0 drained")
	kfWant(t, r.err, "ignoring DaemonSet-managed Pods")
	kfWant(t, r.err, "default/scratch")
	if _, err := c.admin.Get(c.ctx, resources.Pods, "default", "scratch"); !apierrors.IsNotFound(err) {
		t.Fatalf("bare pod after drain: %v", err)
	}
	if !c.kfNode("node-0").Spec.Unschedulable {
		t.Fatal("node-0 not cordoned after drain")
	}
	consistently(t, 500*time.Millisecond, func() error {
		return kfSameUIDs(daemons, c.kfDaemonPodsOn("node-0"))
	})

	kfWant(t, k.ok("uncordon", "node-0"), "node/node-0 uncordoned")
	if c.kfNode("node-0").Spec.Unschedulable {
		t.Fatal("node-0 still cordoned")
	}
	kfWant(t, k.ok("uncordon", "node-0"), "node/node-0 already uncordoned")
	kfWant(t, k.ok("cordon", "node-1"), "node/node-1 cordoned")
	kfWant(t, k.ok("cordon", "node-1"), "node/node-1 already cordoned")
	kfWant(t, k.ok("uncordon", "node-1"), "node/node-1 uncordoned")
}

// kfOrphanAdopt: delete --cascade=orphan leaves the pods; applying the
// DaemonSet again adopts them (same uids).
func kfOrphanAdopt(t *testing.T, c *cluster, k *kfTool) {
	all := nodeNames(3)
	before := c.kfPodsOn("default", kfMonitor, all, "")
	kfWant(t, k.ok("delete", "ds", "monitor", "--cascade=orphan"), `daemonset.apps "monitor" deleted`)
	if _, err := c.admin.Get(c.ctx, resources.DaemonSets, "default", "monitor"); !apierrors.IsNotFound(err) {
		t.Fatalf("monitor after delete: %v", err)
	}
	eventually(t, waitLong, func() error {
		pods := c.kfPodsOn("default", kfMonitor, all, "")
		for n, p := range pods {
			if p.UID != before[n].UID {
				return fmt.Errorf("orphaned pod on %s replaced", n)
			}
			if ref := metav1.GetControllerOf(p); ref != nil {
				return fmt.Errorf("pod %s still controlled by %s", p.Name, ref.UID)
			}
		}
		return nil
	})
	kfWant(t, k.ok("apply", "-f", kfTestdata("monitor-tolerates.yaml")), "daemonset.apps/monitor created")
	ds := c.kfDS("default", "monitor")
	eventually(t, waitLong, func() error {
		pods := c.kfPodsOn("default", kfMonitor, all, "")
		for n, p := range pods {
			if p.UID != before[n].UID {
				return fmt.Errorf("pod on %s replaced instead of adopted", n)
			}
			if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != ds.UID {
				return fmt.Errorf("pod %s not adopted yet", p.Name)
			}
		}
		return nil
	})
	kfWantLastLine(t, k.ok("rollout", "status", "ds/monitor", "--timeout=60s"), `daemon set "monitor" successfully rolled out`)
}

func (c *cluster) kfNode(name string) *corev1.Node {
	c.t.Helper()
	obj, err := c.admin.Get(c.ctx, resources.Nodes, "", name)
	if err != nil {
		c.t.Fatalf("get node %s: %v", name, err)
	}
	return obj.(*corev1.Node)
}

func kfHasTaint(n *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}

func (c *cluster) kfDS(namespace, name string) *appsv1.DaemonSet {
	c.t.Helper()
	obj, err := c.admin.Get(c.ctx, resources.DaemonSets, namespace, name)
	if err != nil {
		c.t.Fatalf("get daemonset %s/%s: %v", namespace, name, err)
	}
	return obj.(*appsv1.DaemonSet)
}

func (c *cluster) kfPods(namespace, selector string) ([]*corev1.Pod, error) {
	objs, _, err := c.admin.List(c.ctx, resources.Pods, namespace, client.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	return out, nil
}

// kfPodsOn waits until exactly the nodes run one ready pod of the selector
// each (with the image, if given) and returns them by node.
func (c *cluster) kfPodsOn(namespace, selector string, nodes []string, image string) map[string]*corev1.Pod {
	c.t.Helper()
	var out map[string]*corev1.Pod
	eventually(c.t, waitLong, func() error {
		pods, err := c.kfPods(namespace, selector)
		if err != nil {
			return err
		}
		grouped := byNode(pods)
		want := map[string]bool{}
		for _, n := range nodes {
			want[n] = true
		}
		for n, ps := range grouped {
			if !want[n] {
				return fmt.Errorf("%s: pods on %q, which should have none (%s)", selector, n, podNames(ps))
			}
		}
		out = map[string]*corev1.Pod{}
		for _, n := range nodes {
			ps := grouped[n]
			if len(ps) != 1 {
				return fmt.Errorf("%s: node %s has %d pods (%s), want 1", selector, n, len(ps), podNames(ps))
			}
			p := ps[0]
			if !runningReady(p) {
				return fmt.Errorf("%s: pod %s on %s not running and ready", selector, p.Name, n)
			}
			if image != "" && p.Spec.Containers[0].Image != image {
				return fmt.Errorf("%s: pod %s on %s runs %s, want %s", selector, p.Name, n, p.Spec.Containers[0].Image, image)
			}
			out[n] = p
		}
		return nil
	})
	return out
}

func (c *cluster) kfNoPodOn(namespace, selector, node string) error {
	pods, err := c.kfPods(namespace, selector)
	if err != nil {
		return err
	}
	if ps := byNode(pods)[node]; len(ps) > 0 {
		return fmt.Errorf("%s: node %s has pods %s", selector, node, podNames(ps))
	}
	return nil
}

// kfDaemonPodsOn maps "namespace/name" → uid of the DaemonSet pods on node.
func (c *cluster) kfDaemonPodsOn(node string) map[string]types.UID {
	c.t.Helper()
	objs, _, err := c.admin.List(c.ctx, resources.Pods, "", client.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		c.t.Fatalf("list pods on %s: %v", node, err)
	}
	out := map[string]types.UID{}
	for _, o := range objs {
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "DaemonSet" && o.GetDeletionTimestamp() == nil {
			out[o.GetNamespace()+"/"+o.GetName()] = o.GetUID()
		}
	}
	return out
}

func kfSameUIDs(want, got map[string]types.UID) error {
	if len(want) != len(got) {
		return fmt.Errorf("daemon pods %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("daemon pod %s changed: %s → %s", k, v, got[k])
		}
	}
	return nil
}

// kfRevisions lists the revision numbers of the selector's
// ControllerRevisions ("2,3").
func (c *cluster) kfRevisions(namespace, selector string) string {
	c.t.Helper()
	objs, _, err := c.admin.List(c.ctx, resources.ControllerRevisions, namespace, client.ListOptions{LabelSelector: selector})
	if err != nil {
		c.t.Fatalf("list controllerrevisions: %v", err)
	}
	var revs []int
	for _, o := range objs {
		revs = append(revs, int(o.(*appsv1.ControllerRevision).Revision))
	}
	sort.Ints(revs)
	s := make([]string, len(revs))
	for i, r := range revs {
		s[i] = fmt.Sprint(r)
	}
	return strings.Join(s, ",")
}
