package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// buildEverynode builds the everynode binary into a temporary directory
// and returns its path.
func buildEverynode(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "everynode")
	out, err := exec.Command("go", "build", "-o", path, "github.com/everynode/everynode/cmd/everynode").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return path
}

// wiringProc is one everynode process.
type wiringProc struct {
	name string
	cmd  *exec.Cmd
	out  *testkit.Buffer // stdout and stderr
	done chan error
}

// startProc starts bin with args; the test's cleanup stops it with SIGTERM
// (SIGKILL after 15 s) and shows its output if the test failed.
func startProc(t *testing.T, name, bin string, args ...string) *wiringProc {
	t.Helper()
	p := &wiringProc{name: name, cmd: exec.Command(bin, args...), out: &testkit.Buffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, p.out.String())
		}
	})
	return p
}

// stop sends SIGTERM and waits; idempotent.
func (p *wiringProc) stop(t *testing.T) {
	t.Helper()
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("%s exited with %v", p.name, err)
		}
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Errorf("%s did not stop within 15s after SIGTERM", p.name)
		<-p.done
	}
}

// waitFile waits until path exists or the process exits.
func (p *wiringProc) waitFile(t *testing.T, path string, within time.Duration) {
	t.Helper()
	testkit.Eventually(t, within, func() error {
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("%s exited (%v) before writing %s:\n%s", p.name, err, path, p.out.String())
		default:
		}
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("%s did not write %s: %w\n%s", p.name, path, err, p.out.String())
		}
		return nil
	})
}

// runCLI runs one everynode client command and returns its output.
func runCLI(t *testing.T, bin, kubeconfig string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--kubeconfig", kubeconfig)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("everynode %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// adminFromKubeconfig is an HTTPS client from a server's admin.kubeconfig.
func adminFromKubeconfig(t *testing.T, path string) (*client.HTTP, string) {
	t.Helper()
	cfg, err := client.LoadKubeconfigFrom([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	cfg.ResourceFor = resources.ForObject
	h, err := client.NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h, cfg.Server
}
