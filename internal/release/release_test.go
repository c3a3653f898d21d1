package release

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/server"
)

// board is one release binary run under its qemu-user emulator.
type board struct {
	platform string      // make release's PLATFORMS entry
	binary   string      // its name in DIST
	qemu     string      // the emulator
	machine  elf.Machine // the ELF machine it must be built for
	class    elf.Class   // 32 or 64 bits
}

var boards = []board{
	{"linux/arm64", "everynode-linux-arm64", "qemu-aarch64-static", elf.EM_AARCH64, elf.ELFCLASS64},
	{"linux/arm/7", "everynode-linux-armv7", "qemu-arm-static", elf.EM_ARM, elf.ELFCLASS32},
}

const testVersion = "v9.8.7-releasetest"

// TestReleaseBoards builds the arm64 and armv7 binaries (everynode and the
// lean everynode-agent) with `make release` and runs them under qemu-user:
// `version` prints the stamped version, and an agent of each binary with the
// fake runtime joins an amd64 server and its Node turns Ready.
func TestReleaseBoards(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles everynode twice and runs it under qemu")
	}
	for _, b := range boards {
		if _, err := exec.LookPath(b.qemu); err != nil {
			if os.Getenv("EVERYNODE_REQUIRE_QEMU") == "1" {
				t.Fatalf("%s not found and EVERYNODE_REQUIRE_QEMU=1: install Debian's qemu-user-static (.ci/run does)", b.qemu)
			}
			t.Skipf("SKIP: %s not found: install Debian's qemu-user-static to run the release binaries of other boards", b.qemu)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir()
	platforms := make([]string, len(boards))
	for i, b := range boards {
		platforms[i] = b.platform
	}
	make := exec.Command("make", "-C", root, "release", "DIST="+dist, "VERSION="+testVersion, "PLATFORMS="+strings.Join(platforms, " "))
	if out, err := make.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	sums := readSums(t, filepath.Join(dist, "SHA256SUMS"))
	if len(sums) != 2*len(boards) {
		t.Errorf("SHA256SUMS lists %d files, want %d (everynode and everynode-agent per board): %v", len(sums), 2*len(boards), sums)
	}

	srv := startServer(t)
	for _, b := range boards {
		t.Run(b.binary, func(t *testing.T) {
			bin := filepath.Join(dist, b.binary)
			checkBinary(t, bin, b, sums[b.binary])
			out, err := exec.Command(b.qemu, bin, "version", "--client").CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "Client Version: "+testVersion {
				t.Fatalf("%s version --client: %v\n%s", b.binary, err, out)
			}
			joinAgent(t, srv, b, bin, strings.TrimPrefix(b.binary, "everynode-linux-"))

			lean := "everynode-agent-linux-" + strings.TrimPrefix(b.binary, "everynode-linux-")
			leanBin := filepath.Join(dist, lean)
			checkBinary(t, leanBin, board{b.platform, lean, b.qemu, b.machine, b.class}, sums[lean])
			out, err = exec.Command(b.qemu, leanBin, "version").CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "everynode-agent version "+testVersion {
				t.Fatalf("%s version: %v\n%s", lean, err, out)
			}
			joinAgent(t, srv, b, leanBin, "lean-"+strings.TrimPrefix(b.binary, "everynode-linux-"))
		})
	}
}

// readSums parses SHA256SUMS ("<hex>  <name>" lines).
func readSums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not '<sum>  <name>'", sc.Text())
		}
		sums[name] = sum
	}
	return sums
}

// checkBinary: built for the board, static (no interpreter), stripped (no
// symbol table), and the checksum SHA256SUMS gives.
func checkBinary(t *testing.T, path string, b board, wantSum string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != wantSum {
		t.Errorf("%s: sha256 %s, SHA256SUMS says %q", b.binary, got, wantSum)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != b.machine || f.Class != b.class {
		t.Errorf("%s: ELF %v %v, want %v %v", b.binary, f.Machine, f.Class, b.machine, b.class)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: not static", b.binary)
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("%s has a symbol table: not stripped", b.binary)
	}
	t.Logf("%s: %.1f MB", b.binary, float64(len(data))/(1<<20))
}

// startServer starts an amd64 server in this process, without a local agent.
func startServer(t *testing.T) *server.Server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := server.Start(context.Background(), server.Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", CompactInterval: -1, Logger: log,
		Gossip: agent.GossipOptions{Addr: "127.0.0.1:0", Profile: gossip.ProfileLocal, LeaveOnStop: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// joinAgent runs bin, a binary of board b, as an agent ("bin agent ...",
// which both everynode and everynode-agent take) named name with the fake
// runtime and waits for its Node to be Ready; then stops it with SIGTERM.
func joinAgent(t *testing.T, srv *server.Server, b board, bin, name string) {
	t.Helper()
	var log testkit.Buffer
	cmd := exec.Command(b.qemu, bin, "agent", "--server", srv.URL(), "--name", name,
		"--runtime", "fake", "--data-dir", t.TempDir(), "--gossip", "127.0.0.1:0", "--gossip-profile", "local",
		"--log-listen", "127.0.0.1:0", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "EVERYNODE_TOKEN="+srv.JoinToken())
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("%s agent did not stop within 30s of SIGTERM", bin)
		}
	}()
	ctx := context.Background()
	testkit.Eventually(t, 2*time.Minute, func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("%s agent exited: %v\n%s", bin, err, log.String())
		default:
		}
		obj, err := srv.Admin().Get(ctx, resources.Nodes, "", name)
		if err != nil {
			return err
		}
		n := obj.(*corev1.Node)
		if n.Status.NodeInfo.Architecture != arch(b) {
			return errors.New("node reports architecture " + n.Status.NodeInfo.Architecture + ", want " + arch(b))
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return errors.New("node " + name + " not Ready")
	})
}

// arch is the GOARCH the Node reports (kubelet reports runtime.GOARCH).
func arch(b board) string {
	_, rest, _ := strings.Cut(b.platform, "/")
	a, _, _ := strings.Cut(rest, "/")
	return a
}
