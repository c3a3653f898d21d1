package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/everynode/everynode/internal/service"
	"github.com/everynode/everynode/internal/version"
)

// serviceRoot are the flags install and uninstall share.
type serviceRoot struct {
	init string
	// root writes under a scratch directory and runs no init command (tests).
	root string
}

func (r *serviceRoot) register(fs *pflag.FlagSet) {
	fs.StringVar(&r.init, "init", "auto", "init system: auto, systemd or openrc")
	fs.StringVar(&r.root, "root", "", "write the files under this directory and run no init command (for tests)")
	_ = fs.MarkHidden("root")
}

// checkRoot refuses a caller that is not root (unless --root).
func (r *serviceRoot) checkRoot(verb string) error {
	if r.root == "" && os.Geteuid() != 0 {
		return usageError(verb+" must run as root", "run it with sudo: sudo everynode "+verb+" ...")
	}
	return nil
}

// resolve checks privileges and picks the init system.
func (r *serviceRoot) resolve(verb string) (string, error) {
	if err := r.checkRoot(verb); err != nil {
		return "", err
	}
	switch r.init {
	case service.Systemd, service.OpenRC:
		return r.init, nil
	case "auto":
		init, err := service.DetectInit(r.root)
		if err != nil {
			return "", withFix(err, "give --init systemd|openrc, or start \"everynode server|agent\" from your own init system (docs/edge.md §2)")
		}
		return init, nil
	}
	return "", usageError(fmt.Sprintf("invalid --init %q", r.init), "use auto, systemd or openrc")
}

// runner runs init commands for real, or none under --root.
func (r *serviceRoot) runner() service.Runner {
	if r.root != "" {
		return nil
	}
	return execRunner{}
}

type execRunner struct{}

func (execRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// InstallCommand is "everynode install server|agent": the role's own flags,
// checked as the role checks them, become the service's command line.
//
// The binary installed is this one (as /usr/local/bin/everynode), except
// that "install agent" installs the lean agent binary instead (as
// /usr/local/bin/everynode-agent, the service running "everynode-agent
// agent FLAGS") when an everynode-agent of the same version lies beside
// this binary, as make build and the release archives put it.
type InstallCommand struct {
	main    *Main
	role    string
	roleCmd runner
	svc     serviceRoot
	noStart bool
	fs      *pflag.FlagSet
	spec    service.Spec
}

// installFlags are install's own flags, not passed to the service.
var installFlags = []string{"init", "root", "no-start"}

func (c *InstallCommand) flags(fs *pflag.FlagSet) {
	c.fs = fs
	c.svc.register(fs)
	fs.BoolVar(&c.noStart, "no-start", false, "write and enable the service without starting it")
	c.roleCmd.flags(fs)
}

func (c *InstallCommand) complete(pos []string) error {
	if err := c.svc.checkRoot("install " + c.role); err != nil {
		return err // before the role's checks: they may read files only root can
	}
	if err := c.roleCmd.complete(pos); err != nil {
		return err
	}
	c.spec = service.Spec{Role: c.role, Root: c.svc.root, Env: map[string]string{}}
	if a, ok := c.roleCmd.(*AgentCommand); ok {
		token, err := a.joinToken()
		if err != nil {
			return err
		}
		c.spec.Env[TokenEnv] = token
	}
	var args []string
	dataDirSet, listenSet := false, false
	var err error
	c.fs.Visit(func(f *pflag.Flag) {
		name := f.Name
		switch {
		case err != nil || slices.Contains(installFlags, name):
			return
		case name == "token" || name == "token-file":
			return // in the environment file
		case name == "data-dir" || name == "manifest-dir":
			dataDirSet = dataDirSet || name == "data-dir"
			abs, aerr := filepath.Abs(f.Value.String())
			if aerr != nil {
				err = aerr
				return
			}
			args = append(args, "--"+name+"="+abs)
		case name == "listen":
			listenSet = true
			args = append(args, "--"+name+"="+f.Value.String())
		default:
			args = append(args, "--"+name+"="+flagValue(f))
		}
	})
	if err != nil {
		return err
	}
	if !dataDirSet {
		args = append(args, "--data-dir="+service.DefaultDataDir(c.role))
	}
	if c.role == service.RoleServer && !listenSet {
		// A service server is there for agents on other boxes.
		args = append(args, "--listen=0.0.0.0:6443")
	}
	c.spec.Args = args
	return nil
}

// flagValue is a flag's value as it parses back: slices without brackets.
func flagValue(f *pflag.Flag) string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return strings.Join(sv.GetSlice(), ",")
	}
	return f.Value.String()
}

// Run installs the service, starts it and prints the next step.
func (c *InstallCommand) Run(ctx context.Context, std IO) error {
	init, err := c.svc.resolve("install " + c.role)
	if err != nil {
		return err
	}
	c.spec.Init = init
	if c.svc.root == "" {
		procs, err := service.ManualProcesses("/proc", c.role, os.Getpid())
		if err != nil {
			return err
		}
		if len(procs) > 0 {
			return usageError(fmt.Sprintf("an everynode %s started by hand is running (pid %d: %s)", c.role, procs[0].PID, strings.Join(procs[0].Args, " ")),
				"stop it first (the service would fight it for its data dir and ports), then run install again")
		}
	}
	self, err := c.main.executable()
	if err != nil {
		return fmt.Errorf("find the everynode binary: %w", err)
	}
	if self, err = filepath.EvalSymlinks(self); err != nil {
		return fmt.Errorf("find the everynode binary: %w", err)
	}
	bin, binNote := self, ""
	if c.role == service.RoleAgent {
		lean, note := leanAgentBeside(ctx, self)
		if lean != "" {
			bin, c.spec.BinPath = lean, service.LeanAgentBinPath
		}
		binNote = note
	}
	in := service.Installer{Spec: c.spec, Run: c.svc.runner()}
	upgrade := in.Installed()
	if err := in.Install(ctx, bin, !c.noStart && in.Run != nil); err != nil {
		return withFix(err, "fix what it names and run install again: it is safe to repeat")
	}
	verb := "installed"
	if upgrade {
		verb = "upgraded"
	}
	fmt.Fprintf(std.Out, "everynode %s %s as %s service %s (%s, token in %s, mode 0600)\n", c.role, verb, init, c.spec.Name(), c.spec.ServiceFile(), c.spec.EnvFile())
	if binNote != "" {
		fmt.Fprintln(std.Out, binNote)
	}
	dataDir := service.DataDirOf([]byte(strings.Join(c.spec.Args, " ")))
	switch {
	case c.noStart:
		fmt.Fprintf(std.Out, "Next: start it with %s\n", startCommand(init, c.spec.Name()))
	case c.role == service.RoleServer:
		fmt.Fprintf(std.Out, "Next: on each node, copy %s/join-token from this machine and run\n  sudo everynode install agent --server https://<this machine's address>:6443 --token-file join-token\n", dataDir)
		fmt.Fprintf(std.Out, "kubectl here: sudo KUBECONFIG=%s/admin.kubeconfig kubectl get nodes\n", dataDir)
	default:
		fmt.Fprintf(std.Out, "Next: on the server, \"kubectl get nodes\" lists this node once it has joined; its log: %s\n", logCommand(init, c.spec.Name()))
	}
	return nil
}

// leanAgentBeside returns the lean agent binary beside self when there is
// one of this binary's version, else "", and a line saying which binary
// the agent service runs and why. Beside "everynode" it looks for
// "everynode-agent"; beside a release file such as "everynode-linux-arm64"
// for "everynode-agent-linux-arm64".
func leanAgentBeside(ctx context.Context, self string) (lean, note string) {
	name := service.LeanAgentBinary
	if rest, ok := strings.CutPrefix(filepath.Base(self), "everynode"); ok {
		name += rest
	}
	path := filepath.Join(filepath.Dir(self), name)
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return "", fmt.Sprintf("Binary: %s (everynode itself; put %s beside it to install the lean agent, docs/agent.md)", service.DefaultBinPath, name)
	}
	want := service.LeanAgentBinary + " version " + version.Get()
	out, err := exec.CommandContext(ctx, path, "version").Output()
	if got := strings.TrimSpace(string(out)); err != nil || got != want {
		if err != nil {
			got = err.Error()
		}
		return "", fmt.Sprintf("Binary: %s (everynode itself: %s beside it answered %q to \"version\", not %q)", service.DefaultBinPath, path, got, want)
	}
	return path, fmt.Sprintf("Binary: %s (the lean agent, copied from %s)", service.LeanAgentBinPath, path)
}

func startCommand(init, name string) string {
	if init == service.OpenRC {
		return "rc-service " + name + " start"
	}
	return "systemctl start " + name
}

func logCommand(init, name string) string {
	if init == service.OpenRC {
		return "/var/log/" + name + ".log"
	}
	return "journalctl -u " + name
}

// UninstallCommand is "everynode uninstall [--purge]".
type UninstallCommand struct {
	svc   serviceRoot
	purge bool
}

func (c *UninstallCommand) flags(fs *pflag.FlagSet) {
	c.svc.register(fs)
	fs.BoolVar(&c.purge, "purge", false, "also remove the data dirs (the cluster's state, node credentials, pods' state)")
}

func (c *UninstallCommand) complete(pos []string) error {
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "uninstall takes only flags; it removes every everynode service installed here")
	}
	return nil
}

// Run stops and removes every installed everynode service.
func (c *UninstallCommand) Run(ctx context.Context, std IO) error {
	init, err := c.svc.resolve("uninstall")
	if err != nil {
		return err
	}
	var installed []service.Installer
	for _, role := range []string{service.RoleAgent, service.RoleServer} {
		in := service.Installer{Spec: service.Spec{Role: role, Init: init, Root: c.svc.root}, Run: c.svc.runner()}
		if in.Installed() {
			installed = append(installed, in)
		}
	}
	if len(installed) == 0 {
		return usageError("nothing to uninstall: no everynode service is installed here", "\"everynode install server|agent\" installs one")
	}
	var errs []error
	for i, in := range installed {
		if err := in.Uninstall(ctx, i == len(installed)-1, c.purge); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(std.Out, "everynode %s service %s removed\n", in.Role, in.Name())
	}
	if !c.purge {
		fmt.Fprintf(std.Out, "Data dirs kept under %s (\"everynode uninstall --purge\" removes them); pods' containers keep running until removed\n", service.DataRoot)
	}
	return errors.Join(errs...)
}
