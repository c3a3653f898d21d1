package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/everynode/everynode/resources"
)

// TestKubectlCorpusStoredKinds: on a running server (which created the
// standard namespaces and the system PriorityClasses at start), real kubectl
// applies a published manifest of the shared corpus unchanged, a DaemonSet and
// a Service: the Service is stored with the Warning that nothing acts on it,
// and the DaemonSet runs on every node.
func TestKubectlCorpusStoredKinds(t *testing.T) {
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("EVERYNODE_REQUIRE_KUBECTL") == "1" {
			t.Fatalf("kubectl is required (EVERYNODE_REQUIRE_KUBECTL=1) but not on PATH: %v", err)
		}
		t.Skipf("SKIPPING real-kubectl test: kubectl not on PATH (%v); set EVERYNODE_REQUIRE_KUBECTL=1 to fail instead", err)
	}
	c := newCluster(t, 2)
	kc := kfKubeconfig(t, c)
	k := &kfTool{t: t, name: "kubectl", bin: bin,
		pre: []string{"--kubeconfig", kc, "--cache-dir", filepath.Join(t.TempDir(), "kube-cache")}, env: []string{"KUBECONFIG=" + kc}}

	out := k.ok("get", "namespaces", "-o", "name")
	for _, ns := range []string{"namespace/default", "namespace/kube-system", "namespace/kube-public", "namespace/kube-node-lease"} {
		if !strings.Contains(out, ns) {
			t.Errorf("no %s in\n%s", ns, out)
		}
	}
	out = k.ok("get", "priorityclasses")
	for _, row := range []string{"system-cluster-critical   2000000000   false", "system-node-critical      2000001000   false"} {
		if !strings.Contains(out, row) {
			t.Errorf("no %q in\n%s", row, out)
		}
	}

	manifest := filepath.Join("..", "..", "shared", "corpus", "dcgm-exporter.yaml")
	r := k.run("apply", "-f", manifest)
	if r.code != 0 || !strings.Contains(r.out, "daemonset.apps/dcgm-exporter created") || !strings.Contains(r.out, "service/dcgm-exporter created") {
		t.Fatalf("apply: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if !strings.Contains(r.err, "Warning: everynode stores services but does not act on them") {
		t.Errorf("no stored-only warning:\n%s", r.err)
	}
	if _, err := c.admin.Get(c.ctx, resources.Services, "default", "dcgm-exporter"); err != nil {
		t.Fatalf("service not stored: %v", err)
	}
	eventually(t, 60*time.Second, func() error {
		obj, err := c.admin.Get(c.ctx, resources.DaemonSets, "default", "dcgm-exporter")
		if err != nil {
			return err
		}
		st := obj.(*appsv1.DaemonSet).Status
		if st.DesiredNumberScheduled != 2 || st.NumberReady != 2 {
			return fmt.Errorf("desired %d, ready %d", st.DesiredNumberScheduled, st.NumberReady)
		}
		return nil
	})
}
