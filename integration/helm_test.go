package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// helmVersion is the Helm 3 release the test builds (the CLI users have).
const helmVersion = "v3.22.0"

// smartctlChart is the published prometheus-community chart, unchanged.
// It is part of the test corpus beside the repository (README, "Test corpus").
var smartctlChart = filepath.Join("..", "..", "shared", "charts", "prometheus-smartctl-exporter")

// TestHelmChart: Helm 3 installs the published smartctl-exporter chart and
// its DaemonSet reaches desired == ready on every node; `helm upgrade` with
// a changed value rolls the pods to a new revision; `helm history` lists
// both releases; `helm uninstall` removes every object the chart made and
// Helm's release records.
func TestHelmChart(t *testing.T) {
	if _, err := os.Stat(smartctlChart); err != nil {
		t.Fatalf("the chart corpus is missing (%v): the test corpus sits beside the repository, see the README's \"Test corpus\"", err)
	}
	helm := buildHelm(t)
	c := newCluster(t, 3)
	kc := kfKubeconfig(t, c)
	home := t.TempDir()
	h := &kfTool{t: t, name: "helm", bin: helm, pre: []string{"--kubeconfig", kc},
		env: []string{"HELM_CACHE_HOME=" + filepath.Join(home, "cache"), "HELM_CONFIG_HOME=" + filepath.Join(home, "config"), "HELM_DATA_HOME=" + filepath.Join(home, "data")}}
	const release, namespace = "smart", "monitoring"
	ds := release + "-prometheus-smartctl-exporter-0"

	out := h.ok("install", release, smartctlChart, "--namespace", namespace, "--create-namespace", "--wait", "--timeout", "90s")
	kfWant(t, out, "STATUS: deployed")
	first := waitDaemonSetReady(t, c, namespace, ds, 3)

	out = h.ok("upgrade", release, smartctlChart, "--namespace", namespace, "--set", "podAnnotations.everynode\\.io/rolled=yes", "--wait", "--timeout", "90s")
	kfWant(t, out, "has been upgraded")
	second := waitDaemonSetReady(t, c, namespace, ds, 3)
	if second == first {
		t.Fatalf("helm upgrade left the pods at revision %s", first)
	}
	eventually(t, waitLong, func() error {
		pods, _, err := c.admin.List(context.Background(), resources.Pods, namespace, client.ListOptions{})
		if err != nil {
			return err
		}
		n := 0
		for _, o := range pods {
			p := o.(*corev1.Pod)
			if p.DeletionTimestamp != nil || p.Labels[hashLabel] != second {
				return fmt.Errorf("pod %s at revision %s, want %s", p.Name, p.Labels[hashLabel], second)
			}
			n++
		}
		if n != 3 {
			return fmt.Errorf("%d pods, want 3", n)
		}
		return nil
	})

	hist := h.ok("history", release, "--namespace", namespace)
	for _, w := range []string{"superseded", "deployed", "Install complete", "Upgrade complete"} {
		kfWant(t, hist, w)
	}
	if rows := strings.Count(strings.TrimSpace(hist), "\n"); rows != 2 {
		t.Errorf("helm history lists %d releases, want 2:\n%s", rows, hist)
	}

	kfWant(t, h.ok("uninstall", release, "--namespace", namespace, "--wait", "--timeout", "90s"), "uninstalled")
	ctx := context.Background()
	for _, o := range []struct {
		r    *resources.Resource
		name string
	}{
		{resources.DaemonSets, ds},
		{resources.ServiceAccounts, release + "-prometheus-smartctl-exporter"},
	} {
		eventually(t, waitLong, func() error {
			if _, err := c.admin.Get(ctx, o.r, namespace, o.name); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s %s after uninstall: %v", o.r.Name, o.name, err)
			}
			return nil
		})
	}
	// Everything Helm made is gone: its release Secrets, the chart's objects
	// (RoleBinding and Service included), and the pods.
	eventually(t, waitLong, func() error {
		for _, r := range []string{"secrets", "services", "rolebindings", "pods", "daemonsets"} {
			res := resources.ByName(r)
			if res == nil {
				return fmt.Errorf("resource %s is not served", r)
			}
			l, _, err := c.admin.List(ctx, res, namespace, client.ListOptions{})
			if err != nil {
				return err
			}
			for _, m := range l {
				if r == "secrets" && !strings.HasPrefix(m.GetName(), "sh.helm.release.") {
					continue // e.g. a token Secret not of the chart's
				}
				return fmt.Errorf("%s %s left after helm uninstall", r, m.GetName())
			}
		}
		return nil
	})
}

// waitDaemonSetReady waits for desired == updated == ready == n and returns
// the update revision's hash.
func waitDaemonSetReady(t *testing.T, c *cluster, namespace, name string, n int32) string {
	t.Helper()
	var hash string
	eventually(t, 90*time.Second, func() error {
		o, err := c.admin.Get(context.Background(), resources.DaemonSets, namespace, name)
		if err != nil {
			return err
		}
		ds := o.(*appsv1.DaemonSet)
		s := ds.Status
		if s.ObservedGeneration != ds.Generation || s.DesiredNumberScheduled != n || s.UpdatedNumberScheduled != n || s.NumberReady != n {
			return fmt.Errorf("ds %s status %+v", name, s)
		}
		pods, _, err := c.admin.List(context.Background(), resources.Pods, namespace, client.ListOptions{})
		if err != nil {
			return err
		}
		hash = ""
		for _, p := range pods {
			if h := p.(*corev1.Pod).Labels[hashLabel]; h != "" && p.(*corev1.Pod).DeletionTimestamp == nil {
				hash = h
			}
		}
		return nil
	})
	return hash
}

// buildHelm returns the Helm CLI: EVERYNODE_HELM, which make test builds,
// or else one built here with go install, once per machine (kept in the
// user cache dir), as a user would get it.
func buildHelm(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("EVERYNODE_HELM"); bin != "" {
		// make test builds it before the tests start; check it is the release
		// this test is written for.
		out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "\tmod\thelm.sh/helm/v3\t"+helmVersion+"\t") {
			t.Fatalf("EVERYNODE_HELM=%s: %q (%v), want Helm %s: run make test, or unset EVERYNODE_HELM to build it here", bin, out, err, helmVersion)
		}
		return bin
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "everynode-test", "helm-"+helmVersion)
	bin := filepath.Join(dir, "helm")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", "helm.sh/helm/v3/cmd/helm@"+helmVersion)
	cmd.Dir = t.TempDir() // outside this module
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install helm %s: %v\n%s", helmVersion, err, out)
	}
	return bin
}
