package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

const wiringDaemonSet = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: wiring
  namespace: default
spec:
  selector:
    matchLabels: {app: wiring}
  template:
    metadata:
      labels: {app: wiring}
    spec:
      containers:
      - name: daemon
        image: busybox
`

// TestProcessesServerAndAgents runs the built binary as a user would: one
// "everynode server" (with its local agent on the fake runtime) and two
// "everynode agent --runtime fake" processes that join with the server's
// join token; a DaemonSet applied with "everynode apply" gets one Running
// pod per node; every process stops cleanly on SIGTERM.
func TestProcessesServerAndAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildEverynode(t)
	dir := t.TempDir()
	srvDir := filepath.Join(dir, "server")
	srv := startProc(t, "server", bin, "server", "--data-dir", srvDir, "--listen", "127.0.0.1:0",
		"--gossip", "127.0.0.1:0", "--gossip-profile", "local", "--runtime", "fake", "--name", "proc-server",
		"--fake-images", "busybox", "--log-listen", "127.0.0.1:0", "--log-level", "warn")
	kubeconfig := filepath.Join(srvDir, "admin.kubeconfig")
	srv.waitFile(t, kubeconfig, 60*time.Second)
	admin, url := adminFromKubeconfig(t, kubeconfig)
	token, err := os.ReadFile(filepath.Join(srvDir, "join-token"))
	if err != nil {
		t.Fatal(err)
	}

	nodes := []string{"proc-agent-1", "proc-agent-2", "proc-server"} // sorted
	for _, name := range nodes[:2] {
		startProc(t, name, bin, "agent", "--server", url, "--token", strings.TrimSpace(string(token)),
			"--name", name, "--runtime", "fake", "--fake-images", "busybox", "--labels", "role=edge",
			"--data-dir", filepath.Join(dir, name), "--gossip", "127.0.0.1:0", "--gossip-profile", "local", "--log-listen", "127.0.0.1:0", "--log-level", "warn")
	}
	manifest := filepath.Join(dir, "ds.yaml")
	if err := os.WriteFile(manifest, []byte(wiringDaemonSet), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := runCLI(t, bin, kubeconfig, "apply", "-f", manifest); !strings.Contains(out, "daemonset.apps/wiring created") {
		t.Fatalf("apply printed %q", out)
	}

	ctx := context.Background()
	t.Cleanup(func() { // before the processes stop: what the cluster looked like
		if t.Failed() {
			t.Logf("%s\n%s", runCLI(t, bin, kubeconfig, "get", "pods", "-o", "wide"), runCLI(t, bin, kubeconfig, "get", "nodes", "-o", "wide"))
		}
	})
	eventually(t, 60*time.Second, func() error {
		got, err := runningPodsByNode(ctx, admin)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(nodes) {
			return fmt.Errorf("want one Running pod on each of %v; got %v (%v)", nodes, got, err)
		}
		return nil
	})
	t.Logf("one Running pod on each of %v", nodes)
	// Pod logs go from the API server to each node's agent (its log
	// endpoint, authorized by the node's log token).
	objs, _, err := admin.List(ctx, resources.Pods, "default", client.ListOptions{LabelSelector: "app=wiring"})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		p := o.(*corev1.Pod)
		b, err := admin.RawGet(ctx, "/api/v1/namespaces/default/pods/"+p.Name+"/log")
		if err != nil {
			t.Errorf("logs of %s on %s: %v", p.Name, p.Spec.NodeName, err)
			continue
		}
		t.Logf("logs of %s on %s: %q", p.Name, p.Spec.NodeName, strings.TrimSpace(string(b)))
	}
	for _, name := range nodes {
		o, err := admin.Get(ctx, resources.Nodes, "", name)
		if err != nil {
			t.Fatal(err)
		}
		if n := o.(*corev1.Node); name != "proc-server" && n.Labels["role"] != "edge" {
			t.Errorf("node %s labels %v lack role=edge", name, n.Labels)
		}
	}
}

// runningPodsByNode lists the nodes (sorted, with repeats) that run a
// Running pod of the wiring DaemonSet.
func runningPodsByNode(ctx context.Context, c client.Interface) ([]string, error) {
	objs, _, err := c.List(ctx, resources.Pods, "default", client.ListOptions{LabelSelector: "app=wiring"})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, o := range objs {
		if p := o.(*corev1.Pod); p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p.Spec.NodeName)
		}
	}
	sort.Strings(out)
	return out, nil
}
