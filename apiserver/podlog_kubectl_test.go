package apiserver

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/client"
)

// newKubectlLogsEnv is newKubectlEnv's server with node credentials for
// pods/log (skipped without kubectl, unless EVERYNODE_REQUIRE_KUBECTL=1).
func newKubectlLogsEnv(t *testing.T, credential func(string) string) *kubectlEnv {
	t.Helper()
	return newKubectlEnv(t, func(c *Config) { c.NodeCredential = credential })
}

// TestKubectlLogs drives pods/log with the real kubectl: a pod's log,
// options passed on to the agent, Kubernetes' error for a bad container,
// and logs -f printing lines as the agent streams them.
func TestKubectlLogs(t *testing.T) {
	agent := newFakeAgent(t, "cred-n1")
	k := newKubectlLogsEnv(t, func(node string) string { return "cred-" + node })
	host, port := agent.hostPort(t)
	(&env{t: t, st: k.s.store.st}).seedNode("n1", []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host}}, port)
	pod := newPod("web", "n1")
	pod.Namespace = "default"
	if _, err := k.c.Create(testCtx(t), pod, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	out := k.ok("logs", "web")
	wantContains(t, out, "log of /containerLogs/default/web/c\n")
	out = k.ok("logs", "web", "-c", "c", "--tail=2", "--timestamps", "--since=1m", "--previous")
	wantContains(t, out, "previous=true", "sinceSeconds=60", "tailLines=2", "timestamps=true")
	wantContains(t, k.fails("", "logs", "web", "-c", "nope"), "container nope is not valid for pod web")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", "--kubeconfig", k.kubeconfig, "--cache-dir", k.cacheDir, "logs", "-f", "web")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-time.After(15 * time.Second):
			t.Fatal("kubectl logs -f printed nothing")
			return ""
		}
	}
	if l := next(); !strings.HasPrefix(l, "log of /containerLogs/default/web/c?follow=true") {
		t.Fatalf("first line %q", l)
	}
	for _, want := range []string{"one", "two"} {
		agent.more <- want
		if l := next(); l != want {
			t.Fatalf("kubectl logs -f printed %q, want %q", l, want)
		}
	}
	close(agent.more)
	if err := cmd.Wait(); err != nil {
		t.Errorf("kubectl logs -f after the stream ended: %v", err)
	}
}
