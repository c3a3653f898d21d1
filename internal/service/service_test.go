package service

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// recordingRunnerFake records the init-system commands it is asked to run
// and answers "active" to is-active.
type recordingRunnerFake struct{ cmds []string }

func (r *recordingRunnerFake) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.cmds = append(r.cmds, strings.Join(append([]string{name}, args...), " "))
	if len(args) > 0 && args[0] == "is-active" {
		return []byte("active\n"), nil
	}
	if len(args) > 1 && args[1] == "status" {
		return []byte(" * status: started\n"), nil
	}
	return nil, nil
}

func agentSpec(root, init string) Spec {
	return Spec{Role: RoleAgent, Init: init, Root: root,
		Args: []string{"--server=https://10.0.0.1:6443", "--name=pi 1", "--data-dir=/var/lib/everynode/agent", "--labels=a=$HOME%n"},
		Env:  map[string]string{"EVERYNODE_TOKEN": "K10abc::server:secret"}}
}

// TestInstallWritesFilesAndStarts: the binary, a 0600 environment file with
// the token, a unit without it; systemctl daemon-reload, enable, restart and
// is-active in that order; a second install (the upgrade) swaps the binary.
func TestInstallWritesFilesAndStarts(t *testing.T) {
	root := t.TempDir()
	self := filepath.Join(t.TempDir(), "everynode")
	if err := os.WriteFile(self, []byte("v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &recordingRunnerFake{}
	in := Installer{Spec: agentSpec(root, Systemd), Run: r}
	if err := in.Install(context.Background(), self, true); err != nil {
		t.Fatal(err)
	}
	want := []string{"systemctl daemon-reload", "systemctl enable everynode-agent", "systemctl restart everynode-agent", "systemctl is-active everynode-agent"}
	if !slices.Equal(r.cmds, want) {
		t.Errorf("ran %q, want %q", r.cmds, want)
	}
	env := filepath.Join(root, "/etc/everynode/agent.env")
	checkMode(t, env, 0o600)
	checkMode(t, filepath.Join(root, ConfigDir), 0o700|os.ModeDir)
	checkMode(t, filepath.Join(root, DefaultBinPath), 0o755)
	if b, _ := os.ReadFile(env); !strings.Contains(string(b), "EVERYNODE_TOKEN='K10abc::server:secret'\n") {
		t.Errorf("env file:\n%s", b)
	}
	unit, err := os.ReadFile(filepath.Join(root, "/etc/systemd/system/everynode-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(unit), "secret") {
		t.Errorf("the token is in the unit:\n%s", unit)
	}
	for _, w := range []string{
		"ExecStart=/usr/local/bin/everynode agent --server=https://10.0.0.1:6443 \"--name=pi 1\" --data-dir=/var/lib/everynode/agent --labels=a=$$HOME%%n\n",
		"EnvironmentFile=-/etc/everynode/agent.env\n", "Restart=always\n", "After=network-online.target docker.service\n",
	} {
		if !strings.Contains(string(unit), w) {
			t.Errorf("unit lacks %q:\n%s", w, unit)
		}
	}
	if got := DataDirOf(unit); got != "/var/lib/everynode/agent" {
		t.Errorf("DataDirOf = %q", got)
	}

	// Upgrade: a new binary replaces the old one; files are rewritten.
	if err := os.WriteFile(self, []byte("v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := in.Install(context.Background(), self, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, DefaultBinPath)); string(b) != "v2" {
		t.Errorf("installed binary %q after the upgrade, want v2", b)
	}
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() & (os.ModePerm | os.ModeDir); got != want {
		t.Errorf("%s: mode %v, want %v", path, got, want)
	}
}

// TestUninstallPurge: uninstall disables and removes the files, keeps the
// data dir unless purge.
func TestUninstallPurge(t *testing.T) {
	for _, purge := range []bool{false, true} {
		t.Run(fmt.Sprint("purge=", purge), func(t *testing.T) {
			root := t.TempDir()
			self := filepath.Join(t.TempDir(), "everynode")
			_ = os.WriteFile(self, []byte("v1"), 0o755)
			data := filepath.Join(root, "/var/lib/everynode/agent")
			if err := os.MkdirAll(data, 0o700); err != nil {
				t.Fatal(err)
			}
			r := &recordingRunnerFake{}
			in := Installer{Spec: agentSpec(root, Systemd), Run: r}
			if err := in.Install(context.Background(), self, false); err != nil {
				t.Fatal(err)
			}
			if !in.Installed() {
				t.Fatal("not Installed after Install")
			}
			lean := filepath.Join(root, LeanAgentBinPath) // left by an earlier install of the lean binary
			if err := os.WriteFile(lean, []byte("lean"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := in.Uninstall(context.Background(), true, purge); err != nil {
				t.Fatal(err)
			}
			if in.Installed() {
				t.Error("still Installed after Uninstall")
			}
			for _, p := range []string{"/etc/everynode", DefaultBinPath, LeanAgentBinPath} {
				if _, err := os.Stat(filepath.Join(root, p)); !os.IsNotExist(err) {
					t.Errorf("%s left behind (%v)", p, err)
				}
			}
			_, err := os.Stat(data)
			if purge != os.IsNotExist(err) {
				t.Errorf("purge=%v: data dir stat: %v", purge, err)
			}
			if !slices.Contains(r.cmds, "systemctl disable --now everynode-agent") {
				t.Errorf("ran %q", r.cmds)
			}
		})
	}
}

// TestOpenRCScript: the script runs under supervise-daemon, sources the
// environment file, and quotes arguments for the shell's eval.
func TestOpenRCScript(t *testing.T) {
	s := agentSpec(t.TempDir(), OpenRC)
	script := s.OpenRCScript()
	for _, w := range []string{"#!/sbin/openrc-run\n", "supervisor=supervise-daemon\n", ". /etc/everynode/agent.env\n", "after docker\n"} {
		if !strings.Contains(script, w) {
			t.Errorf("script lacks %q:\n%s", w, script)
		}
	}
	if strings.Contains(script, "secret") {
		t.Error("the token is in the script")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// command_args, evaluated as OpenRC does, gives back the exact words.
	var line string
	for _, l := range strings.Split(script, "\n") {
		if strings.HasPrefix(l, "command_args=") {
			line = l
		}
	}
	out, err := exec.Command(sh, "-c", line+`; eval "set -- $command_args"; for a in "$@"; do printf '%s\n' "$a"; done`).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := append([]string{"agent"}, s.Args...)
	if got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"); !slices.Equal(got, want) {
		t.Errorf("command_args evaluates to %q, want %q", got, want)
	}
	r := &recordingRunnerFake{}
	self := filepath.Join(t.TempDir(), "everynode")
	_ = os.WriteFile(self, []byte("v1"), 0o755)
	if err := (Installer{Spec: s, Run: r}).Install(context.Background(), self, true); err != nil {
		t.Fatal(err)
	}
	checkMode(t, filepath.Join(s.Root, "/etc/init.d/everynode-agent"), 0o755)
	want = []string{"rc-update add everynode-agent default", "rc-service everynode-agent restart", "rc-service everynode-agent status"}
	if !slices.Equal(r.cmds, want) {
		t.Errorf("ran %q, want %q", r.cmds, want)
	}
}

// TestUnitVerifies runs systemd-analyze verify on the rendered units.
func TestUnitVerifies(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("SKIP: systemd-analyze not found (Debian's systemd package has it)")
	}
	bin, err := os.Executable() // any executable stands in for everynode
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{RoleServer, RoleAgent} {
		dir := t.TempDir()
		s := Spec{Role: role, Init: Systemd, BinPath: bin, Args: []string{"--data-dir=" + DefaultDataDir(role), "--log-level=info"}}
		unit := filepath.Join(dir, s.Name()+".service")
		if err := os.WriteFile(unit, []byte(s.Unit()), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("systemd-analyze", "verify", unit).CombinedOutput()
		// verify reports units it cannot find that ours only orders itself
		// after (docker.service on a machine without Docker's unit); those
		// lines are not about our unit's syntax.
		var bad []string
		for _, l := range strings.Split(string(out), "\n") {
			if l != "" && strings.Contains(l, s.Name()) {
				bad = append(bad, l)
			}
		}
		if err != nil && len(bad) == 0 && !strings.Contains(string(out), "not found") {
			bad = append(bad, err.Error())
		}
		if len(bad) > 0 {
			t.Errorf("systemd-analyze verify %s:\n%s\n%s", s.Name(), strings.Join(bad, "\n"), s.Unit())
		}
	}
}

// TestManualProcesses finds an `everynode agent` started by hand in a fake
// /proc, and not one in the service's cgroup or under supervise-daemon.
func TestManualProcesses(t *testing.T) {
	proc := t.TempDir()
	mk := func(pid, ppid int, comm, cgroup string, args ...string) {
		d := filepath.Join(proc, fmt.Sprint(pid))
		_ = os.MkdirAll(d, 0o755)
		_ = os.WriteFile(filepath.Join(d, "cmdline"), []byte(strings.Join(args, "\x00")+"\x00"), 0o644)
		_ = os.WriteFile(filepath.Join(d, "comm"), []byte(comm+"\n"), 0o644)
		_ = os.WriteFile(filepath.Join(d, "stat"), []byte(fmt.Sprintf("%d (%s) S %d 1 1", pid, comm, ppid)), 0o644)
		_ = os.WriteFile(filepath.Join(d, "cgroup"), []byte(cgroup), 0o644)
	}
	mk(1, 0, "systemd", "0::/init.scope\n", "/sbin/init")
	mk(10, 1, "everynode", "0::/user.slice/session-1.scope\n", "./everynode", "agent", "--server", "x")
	mk(11, 1, "everynode", "0::/system.slice/everynode-agent.service\n", "/usr/local/bin/everynode", "agent")
	mk(12, 13, "everynode", "0::/\n", "/usr/local/bin/everynode", "agent")
	mk(13, 1, "supervise-daemon", "0::/\n", "supervise-daemon", "everynode-agent")
	mk(14, 1, "everynode", "0::/\n", "everynode", "server")
	mk(15, 1, "everynode", "0::/\n", "everynode", "agent") // ourselves
	mk(16, 1, "everynode-agent", "0::/user.slice/session-1.scope\n", "/opt/everynode-agent", "--server", "x")
	mk(17, 1, "everynode-agent", "0::/system.slice/everynode-agent.service\n", "/usr/local/bin/everynode-agent", "agent")
	got, err := ManualProcesses(proc, RoleAgent, 15)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].PID != 10 || got[1].PID != 16 {
		t.Errorf("ManualProcesses = %+v, want pids 10 and 16 (the lean binary's) only", got)
	}
	if got, _ := ManualProcesses(proc, RoleServer, 15); len(got) != 1 || got[0].PID != 14 {
		t.Errorf("ManualProcesses(server) = %+v, want pid 14 only", got)
	}
}

// TestValidateRefuses: what cannot be written safely is refused.
func TestValidateRefuses(t *testing.T) {
	for _, s := range []Spec{
		{Role: "worker", Init: Systemd},
		{Role: RoleAgent, Init: "runit"},
		{Role: RoleAgent, Init: Systemd, BinPath: "everynode"},
		{Role: RoleAgent, Init: Systemd, Env: map[string]string{"EVERYNODE_TOKEN": "a'b"}},
		{Role: RoleAgent, Init: Systemd, Args: []string{"--name=a\nExecStartPre=/bin/evil"}},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", s)
		}
	}
}
