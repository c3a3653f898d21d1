package apiserver

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// kubectlEnv is an API server on a real store, served over TLS on
// 127.0.0.1:0 exactly as `everynode server` serves it, with a kubeconfig
// for the kubectl on PATH and a fresh discovery cache.
type kubectlEnv struct {
	t          *testing.T
	s          *Server
	c          client.Interface // in-process client for assertions
	kubeconfig string
	cacheDir   string
}

// newKubectlEnv skips the test when kubectl is not on PATH, unless
// EVERYNODE_REQUIRE_KUBECTL=1 (CI), which makes it fail.
func newKubectlEnv(t *testing.T) *kubectlEnv {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		if os.Getenv("EVERYNODE_REQUIRE_KUBECTL") == "1" {
			t.Fatalf("kubectl is required (EVERYNODE_REQUIRE_KUBECTL=1) but not on PATH: %v", err)
		}
		t.Skipf("SKIPPING real-kubectl test: kubectl not on PATH (%v); set EVERYNODE_REQUIRE_KUBECTL=1 to fail instead", err)
	}
	st := openStore(t)
	dir := t.TempDir()
	cluster, err := pki.Load(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatalf("pki.Load: %v", err)
	}
	s, err := New(Config{Store: st, Authenticator: cluster, Logger: testLogger()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.EnsureNamespaces(testCtx(t), "default", "kube-system"); err != nil {
		t.Fatalf("EnsureNamespaces: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln, cluster.TLSConfig()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	k := &kubectlEnv{
		t: t, s: s, c: NewLocalClient(s, "test", mastersGroup),
		kubeconfig: filepath.Join(dir, "kubeconfig"), cacheDir: filepath.Join(dir, "cache"),
	}
	if err := pki.WriteKubeconfig(k.kubeconfig, "https://"+ln.Addr().String(), cluster.CAPEM(), cluster.AdminToken(), "everynode"); err != nil {
		t.Fatalf("WriteKubeconfig: %v", err)
	}
	return k
}

// kubectlResult is one finished kubectl run.
type kubectlResult struct {
	out, err string
	code     int
}

// run runs kubectl with the env's kubeconfig and cache, stdin as its input.
func (k *kubectlEnv) run(stdin string, env []string, args ...string) kubectlResult {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", k.cacheDir}, args...)
	cmd := exec.CommandContext(ctx, "kubectl", full...)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+k.kubeconfig), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := kubectlResult{out: out.String(), err: errb.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	case err != nil:
		k.t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// ok runs kubectl and fails the test unless it exits 0; it returns stdout.
func (k *kubectlEnv) ok(args ...string) string {
	k.t.Helper()
	return k.okIn("", args...)
}

func (k *kubectlEnv) okIn(stdin string, args ...string) string {
	k.t.Helper()
	r := k.run(stdin, nil, args...)
	if r.code != 0 {
		k.t.Fatalf("kubectl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.out, r.err)
	}
	return r.out
}

// fails runs kubectl, wants a non-zero exit and returns stderr.
func (k *kubectlEnv) fails(stdin string, args ...string) string {
	k.t.Helper()
	r := k.run(stdin, nil, args...)
	if r.code == 0 {
		k.t.Fatalf("kubectl %s succeeded, want failure\nstdout: %s", strings.Join(args, " "), r.out)
	}
	return r.err
}

func (k *kubectlEnv) get(r *resources.Resource, ns, name string) client.Object {
	k.t.Helper()
	obj, err := k.c.Get(testCtx(k.t), r, ns, name)
	if err != nil {
		k.t.Fatalf("get %s %s/%s: %v", r.Name, ns, name, err)
	}
	return obj
}

func wantContains(t *testing.T, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("output lacks %q:\n%s", w, got)
		}
	}
}

func TestKubectlExplain(t *testing.T) {
	k := newKubectlEnv(t)
	out := k.ok("explain", "daemonset.spec")
	wantContains(t, out, "KIND:       DaemonSet", "VERSION:    v1", "FIELD: spec <DaemonSetSpec>",
		"template\t<PodTemplateSpec> -required-", "updateStrategy\t<DaemonSetUpdateStrategy>")
	out = k.ok("explain", "pod.spec.containers")
	wantContains(t, out, "KIND:       Pod", "FIELD: containers <[]Container>", "image\t<string>", "name\t<string> -required-")
	out = k.ok("explain", "nodes.spec.taints.effect")
	wantContains(t, out, "FIELD: effect <string>")
}
