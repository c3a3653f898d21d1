package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Runner runs a command of the init system (systemctl, rc-update,
// rc-service) and returns its combined output.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// DetectInit tells the init system running under root: systemd when
// /run/systemd/system exists (sd_booted's test), OpenRC when /run/openrc
// does.
func DetectInit(root string) (string, error) {
	if fi, err := os.Stat(filepath.Join(root, "/run/systemd/system")); err == nil && fi.IsDir() {
		return Systemd, nil
	}
	if _, err := os.Stat(filepath.Join(root, "/run/openrc")); err == nil {
		return OpenRC, nil
	}
	return "", errors.New("neither systemd nor OpenRC runs this machine")
}

// Installer installs, starts and removes one service.
type Installer struct {
	Spec
	// Run runs init-system commands; nil writes and removes files only.
	Run Runner
	// ActiveWait bounds the wait for a started service to be active (10 s
	// when zero).
	ActiveWait time.Duration
}

// Install copies the binary self to BinPath, writes the service's files,
// enables the service and, if start, (re)starts it and waits until it is
// active. Run again, it upgrades in place.
func (in Installer) Install(ctx context.Context, self string, start bool) error {
	if err := in.Validate(); err != nil {
		return err
	}
	if err := in.InstallBinary(self); err != nil {
		return err
	}
	if err := in.WriteFiles(); err != nil {
		return err
	}
	if in.Run == nil {
		return nil
	}
	name := in.Name()
	steps := [][]string{{"systemctl", "daemon-reload"}, {"systemctl", "enable", name}}
	if in.Init == OpenRC {
		steps = [][]string{{"rc-update", "add", name, "default"}}
	}
	if start {
		if in.Init == OpenRC {
			steps = append(steps, []string{"rc-service", name, "restart"})
		} else {
			steps = append(steps, []string{"systemctl", "restart", name})
		}
	}
	for _, s := range steps {
		if out, err := in.Run.Run(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	if !start {
		return nil
	}
	return in.waitActive(ctx)
}

// waitActive polls the service's state until it is active.
func (in Installer) waitActive(ctx context.Context) error {
	wait := in.ActiveWait
	if wait == 0 {
		wait = 10 * time.Second
	}
	deadline := time.Now().Add(wait)
	var state string
	for {
		out, err := in.status(ctx)
		state = out
		if err == nil && state == "active" {
			return nil
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	logs := "journalctl -u " + in.Name()
	if in.Init == OpenRC {
		logs = "/var/log/" + in.Name() + ".log"
	}
	return fmt.Errorf("service %s is %q, not active, %s after it was started: its log is in %s", in.Name(), state, wait, logs)
}

func (in Installer) status(ctx context.Context) (string, error) {
	if in.Init == OpenRC {
		out, err := in.Run.Run(ctx, "rc-service", in.Name(), "status")
		if err == nil && bytes.Contains(out, []byte("started")) {
			return "active", nil
		}
		return strings.TrimSpace(string(out)), err
	}
	out, err := in.Run.Run(ctx, "systemctl", "is-active", in.Name())
	return strings.TrimSpace(string(out)), err
}

// Installed reports whether the service's file exists.
func (in Installer) Installed() bool {
	_, err := os.Stat(in.path(in.ServiceFile()))
	return err == nil
}

// Uninstall stops and disables the service and removes its files (the
// binary too if removeBinary); with purge, its data dir as well.
func (in Installer) Uninstall(ctx context.Context, removeBinary, purge bool) error {
	dataDir := ""
	if b, err := os.ReadFile(in.path(in.ServiceFile())); err == nil {
		dataDir = DataDirOf(b)
	}
	name := in.Name()
	steps := [][]string{{"systemctl", "disable", "--now", name}}
	if in.Init == OpenRC {
		steps = [][]string{{"rc-service", name, "stop"}, {"rc-update", "del", name, "default"}}
	}
	if in.Run == nil {
		steps = nil
	}
	for _, s := range steps {
		if out, err := in.Run.Run(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	if err := in.RemoveFiles(removeBinary); err != nil {
		return err
	}
	if in.Init == Systemd && in.Run != nil {
		if out, err := in.Run.Run(ctx, "systemctl", "daemon-reload"); err != nil {
			return fmt.Errorf("systemctl daemon-reload: %w: %s", err, strings.TrimSpace(string(out)))
		}
	}
	if purge && dataDir != "" {
		if !filepath.IsAbs(dataDir) || filepath.Clean(dataDir) == "/" {
			return fmt.Errorf("refusing to purge data dir %q: not an absolute directory below /", dataDir)
		}
		if err := os.RemoveAll(in.path(dataDir)); err != nil {
			return fmt.Errorf("purge %s: %w", dataDir, err)
		}
	}
	return nil
}

// Process is an everynode process found running.
type Process struct {
	PID  int
	Args []string
}

// ManualProcesses lists the `everynode ROLE` processes under procRoot
// (/proc) — for the agent role `everynode-agent` ones too — that no service
// manager started — not in the service's systemd cgroup, not a child of
// OpenRC's supervise-daemon — leaving out self.
func ManualProcesses(procRoot, role string, self int) ([]Process, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		dir := filepath.Join(procRoot, e.Name())
		raw, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || len(raw) == 0 {
			continue // gone, or a kernel thread
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		base := filepath.Base(args[0])
		lean := role == RoleAgent && base == LeanAgentBinary
		if !lean && (len(args) < 2 || base != "everynode" || args[1] != role) {
			continue
		}
		if cg, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil && bytes.Contains(cg, []byte("/everynode-"+role+".service")) {
			continue
		}
		if parentIsSupervisor(procRoot, dir) {
			continue
		}
		out = append(out, Process{PID: pid, Args: args})
	}
	return out, nil
}

func parentIsSupervisor(procRoot, dir string) bool {
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return false
	}
	// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return false
	}
	comm, err := os.ReadFile(filepath.Join(procRoot, f[1], "comm"))
	return err == nil && strings.TrimSpace(string(comm)) == "supervise-daemon"
}
