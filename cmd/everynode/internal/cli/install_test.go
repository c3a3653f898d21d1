package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/everynode/everynode/internal/version"
)

func runMain(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := (&Main{Getenv: func(string) string { return "" }}).Run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return out.String() + errb.String(), err
}

// TestInstallCommandLine: install turns the role's flags into the service's
// command line — the token into the 0600 environment file, relative paths
// made absolute, a data dir and (for a server) a listen address every box can
// reach filled in — and refuses a flag the role does not know; uninstall
// removes it all.
func TestInstallCommandLine(t *testing.T) {
	root := t.TempDir()
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile(filepath.Join(dir, "join-token"), []byte("K10tok::server:s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runMain(t, "install", "agent", "--root", root, "--init", "systemd", "--server", "https://10.0.0.1:6443",
		"--token-file", "join-token", "--name", "pi1", "--labels", "zone=a,tier=edge", "--manifest-dir", "manifests")
	if err != nil {
		t.Fatalf("install agent: %v\n%s", err, out)
	}
	unit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/everynode-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	execStart := ""
	for _, l := range strings.Split(string(unit), "\n") {
		if strings.HasPrefix(l, "ExecStart=") {
			execStart = l
		}
	}
	for _, w := range []string{" agent ", "--server=https://10.0.0.1:6443", "--name=pi1", "--labels=zone=a,tier=edge",
		"--manifest-dir=" + filepath.Join(dir, "manifests"), "--data-dir=/var/lib/everynode/agent"} {
		if !strings.Contains(execStart, w) {
			t.Errorf("ExecStart lacks %q: %s", w, execStart)
		}
	}
	if strings.Contains(string(unit), "s3cret") || strings.Contains(string(unit), "token") || strings.Contains(out, "s3cret") {
		t.Errorf("the token is in the unit or the output:\n%s\n%s", unit, out)
	}
	env, err := os.ReadFile(filepath.Join(root, "etc/everynode/agent.env"))
	if err != nil || !strings.Contains(string(env), "EVERYNODE_TOKEN='K10tok::server:s3cret'") {
		t.Errorf("env file: %v\n%s", err, env)
	}
	if !strings.Contains(out, "installed as systemd service everynode-agent") {
		t.Errorf("output:\n%s", out)
	}

	out, err = runMain(t, "install", "server", "--root", root, "--init", "systemd", "--tls-san", "hub.lan")
	if err != nil {
		t.Fatalf("install server: %v\n%s", err, out)
	}
	unit, _ = os.ReadFile(filepath.Join(root, "etc/systemd/system/everynode-server.service"))
	for _, w := range []string{"--listen=0.0.0.0:6443", "--tls-san=hub.lan", "--data-dir=/var/lib/everynode/server"} {
		if !strings.Contains(string(unit), w) {
			t.Errorf("server unit lacks %q:\n%s", w, unit)
		}
	}
	if out, err := runMain(t, "install", "server", "--root", root, "--init", "systemd"); err != nil || !strings.Contains(out, "upgraded") {
		t.Errorf("second install: %v\n%s", err, out)
	}

	// A flag the role does not know, or an agent without its token: refused,
	// nothing written.
	root2 := t.TempDir()
	if _, err := runMain(t, "install", "agent", "--root", root2, "--init", "systemd", "--server", "https://s:6443", "--token", "T", "--nmae", "x"); err == nil {
		t.Error("install agent --nmae succeeded")
	}
	if _, err := runMain(t, "install", "agent", "--root", root2, "--init", "systemd", "--server", "https://s:6443"); err == nil {
		t.Error("install agent without a token succeeded")
	}
	if _, err := runMain(t, "install", "server", "--root", root2, "--init", "upstart"); err == nil || !strings.Contains(FormatError(err), "--init") {
		t.Errorf("--init upstart: %v", err)
	}
	if entries, _ := os.ReadDir(root2); len(entries) != 0 {
		t.Errorf("a refused install wrote %d entries", len(entries))
	}

	out, err = runMain(t, "uninstall", "--root", root, "--init", "systemd")
	if err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	for _, p := range []string{"etc/systemd/system/everynode-agent.service", "etc/systemd/system/everynode-server.service", "etc/everynode", "usr/local/bin/everynode"} {
		if _, err := os.Stat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("%s left after uninstall (%v)", p, err)
		}
	}
	if _, err := runMain(t, "uninstall", "--root", root, "--init", "systemd"); err == nil || !strings.Contains(FormatError(err), "nothing to uninstall") {
		t.Errorf("second uninstall: %v", err)
	}
}

// TestInstallAgentLeanBinary: with an everynode-agent of the same version
// beside the running binary, install agent installs that one and the unit
// runs it; one of another version is left alone and everynode itself is
// installed; uninstall removes the lean binary.
func TestInstallAgentLeanBinary(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "everynode")
	lean := filepath.Join(dir, "everynode-agent")
	if err := os.WriteFile(self, []byte("full"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeLean := func(v string) {
		t.Helper()
		if err := os.WriteFile(lean, []byte("#!/bin/sh\necho 'everynode-agent version "+v+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	install := func(root string) (string, string, error) {
		t.Helper()
		var out, errb bytes.Buffer
		m := &Main{Getenv: func(string) string { return "" }, Executable: func() (string, error) { return self, nil }}
		err := m.Run(context.Background(), []string{"install", "agent", "--root", root, "--init", "systemd", "--server", "https://10.0.0.1:6443", "--token", "K10t::s"},
			strings.NewReader(""), &out, &errb)
		unit, _ := os.ReadFile(filepath.Join(root, "etc/systemd/system/everynode-agent.service"))
		return out.String() + errb.String(), string(unit), err
	}

	writeLean(version.Get())
	root := t.TempDir()
	out, unit, err := install(root)
	if err != nil {
		t.Fatalf("install agent: %v\n%s", err, out)
	}
	if !strings.Contains(unit, "ExecStart=/usr/local/bin/everynode-agent agent --server=https://10.0.0.1:6443") {
		t.Errorf("unit does not run the lean binary:\n%s", unit)
	}
	if b, err := os.ReadFile(filepath.Join(root, "usr/local/bin/everynode-agent")); err != nil || !strings.Contains(string(b), "everynode-agent version") {
		t.Errorf("lean binary not installed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/local/bin/everynode")); !os.IsNotExist(err) {
		t.Errorf("everynode installed too (%v)", err)
	}
	if !strings.Contains(out, "Binary: /usr/local/bin/everynode-agent (the lean agent, copied from "+lean+")") {
		t.Errorf("output does not name the lean binary:\n%s", out)
	}
	if out, err := runMain(t, "uninstall", "--root", root, "--init", "systemd"); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/local/bin/everynode-agent")); !os.IsNotExist(err) {
		t.Errorf("lean binary left after uninstall (%v)", err)
	}

	writeLean("v0.0.1-other")
	root = t.TempDir()
	out, unit, err = install(root)
	if err != nil {
		t.Fatalf("install agent: %v\n%s", err, out)
	}
	if !strings.Contains(unit, "ExecStart=/usr/local/bin/everynode agent ") || !strings.Contains(out, "not \"everynode-agent version "+version.Get()+"\"") {
		t.Errorf("with a lean binary of another version:\n%s\n%s", unit, out)
	}
	if b, err := os.ReadFile(filepath.Join(root, "usr/local/bin/everynode")); err != nil || string(b) != "full" {
		t.Errorf("everynode not installed: %v %q", err, b)
	}

	// Release files keep their names: everynode-agent-linux-arm64 beside
	// everynode-linux-arm64.
	self, lean = filepath.Join(dir, "everynode-linux-arm64"), filepath.Join(dir, "everynode-agent-linux-arm64")
	if err := os.WriteFile(self, []byte("full"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeLean(version.Get())
	root = t.TempDir()
	if out, unit, err = install(root); err != nil || !strings.Contains(unit, "ExecStart=/usr/local/bin/everynode-agent agent ") {
		t.Errorf("release file names: %v\n%s\n%s", err, out, unit)
	}

	if err := os.Remove(lean); err != nil {
		t.Fatal(err)
	}
	root = t.TempDir()
	if out, unit, err = install(root); err != nil || !strings.Contains(unit, "ExecStart=/usr/local/bin/everynode agent ") {
		t.Errorf("without a lean binary: %v\n%s\n%s", err, out, unit)
	}
}
