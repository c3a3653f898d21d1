// Package service installs everynode as a system service: a systemd unit or
// an OpenRC script that runs `everynode server|agent` with the flags given at
// install time, and an environment file (0600) for what must not appear on a
// command line — the join token. Install is idempotent: run again, it swaps
// the binary, rewrites the files and restarts the service, which is how an
// upgrade is done. docs/edge.md §2 describes it for users.
package service

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Init systems Install knows.
const (
	Systemd = "systemd"
	OpenRC  = "openrc"
)

// Roles a service runs.
const (
	RoleServer = "server"
	RoleAgent  = "agent"
)

// LeanAgentBinary is the lean agent binary's file name (cmd/everynode-agent):
// the agent alone, with "everynode agent"'s command line.
const LeanAgentBinary = "everynode-agent"

// Default locations (under Spec.Root).
const (
	DefaultBinPath = "/usr/local/bin/everynode"
	// LeanAgentBinPath is where "install agent" puts the lean agent
	// binary (everynode-agent) when it installs that one.
	LeanAgentBinPath = "/usr/local/bin/" + LeanAgentBinary
	ConfigDir        = "/etc/everynode"
	DataRoot         = "/var/lib/everynode"
)

// Spec is what one installed service runs.
type Spec struct {
	// Role is RoleServer or RoleAgent.
	Role string
	// Init is Systemd or OpenRC.
	Init string
	// Root prefixes every path written (a test's scratch root); "" is /.
	Root string
	// BinPath is where the binary is installed (DefaultBinPath if empty).
	BinPath string
	// Args are the role's flags, "--name=value" each, without secrets.
	Args []string
	// Env are variables for the environment file (EVERYNODE_TOKEN).
	Env map[string]string
}

// Name is the service's name: everynode-server or everynode-agent.
func (s Spec) Name() string { return "everynode-" + s.Role }

func (s Spec) binPath() string {
	if s.BinPath != "" {
		return s.BinPath
	}
	return DefaultBinPath
}

// EnvFile is the environment file's path (without Root).
func (s Spec) EnvFile() string { return filepath.Join(ConfigDir, s.Role+".env") }

// ServiceFile is the unit's or script's path (without Root).
func (s Spec) ServiceFile() string {
	if s.Init == OpenRC {
		return "/etc/init.d/" + s.Name()
	}
	return "/etc/systemd/system/" + s.Name() + ".service"
}

// DefaultDataDir is the role's data dir when the flags give none.
func DefaultDataDir(role string) string { return filepath.Join(DataRoot, role) }

// Validate checks the spec.
func (s Spec) Validate() error {
	if s.Role != RoleServer && s.Role != RoleAgent {
		return fmt.Errorf("service: role %q: want %s or %s", s.Role, RoleServer, RoleAgent)
	}
	if s.Init != Systemd && s.Init != OpenRC {
		return fmt.Errorf("service: init %q: want %s or %s", s.Init, Systemd, OpenRC)
	}
	if !filepath.IsAbs(s.binPath()) {
		return fmt.Errorf("service: binary path %q is not absolute", s.binPath())
	}
	for k, v := range s.Env {
		if k == "" || strings.ContainsAny(k, "= \t\n'\"") || strings.ContainsAny(v, "\n\r'\\") {
			return fmt.Errorf("service: environment variable %q cannot be written to an environment file", k)
		}
	}
	for _, a := range s.Args {
		if strings.ContainsAny(a, "\n\r") {
			return fmt.Errorf("service: flag %q holds a line break", a)
		}
	}
	return nil
}

// Unit renders the systemd unit.
func (s Spec) Unit() string {
	var b strings.Builder
	what := "the API server, its embedded etcd, the controllers and a local node agent"
	after := "network-online.target"
	if s.Role == RoleAgent {
		what = "the node agent: runs this node's DaemonSet pods"
		after += " docker.service"
	}
	fmt.Fprintf(&b, "# Written by \"everynode install %s\"; \"everynode uninstall\" removes it.\n", s.Role)
	b.WriteString("[Unit]\n")
	fmt.Fprintf(&b, "Description=everynode %s (%s)\n", s.Role, what)
	b.WriteString("Documentation=https://github.com/everynode/everynode/blob/main/docs/edge.md\n")
	b.WriteString("Wants=network-online.target\n")
	fmt.Fprintf(&b, "After=%s\n", after)
	b.WriteString("StartLimitIntervalSec=0\n\n")
	b.WriteString("[Service]\nType=exec\n")
	fmt.Fprintf(&b, "EnvironmentFile=-%s\n", s.EnvFile())
	words := append([]string{s.binPath(), s.Role}, s.Args...)
	for i := range words {
		words[i] = systemdQuote(words[i])
	}
	fmt.Fprintf(&b, "ExecStart=%s\n", strings.Join(words, " "))
	// SIGTERM to everynode alone (it stops gracefully: the agent leaves the
	// gossip pool); pods are Docker's containers, outside this unit, and keep
	// running through a restart or an upgrade.
	b.WriteString("KillMode=mixed\nTimeoutStopSec=30\nRestart=always\nRestartSec=5\nUMask=0077\nLimitNOFILE=1048576\n\n")
	b.WriteString("[Install]\nWantedBy=multi-user.target\n")
	return b.String()
}

// OpenRCScript renders the OpenRC init script.
func (s Spec) OpenRCScript() string {
	var b strings.Builder
	b.WriteString("#!/sbin/openrc-run\n")
	fmt.Fprintf(&b, "# Written by \"everynode install %s\"; \"everynode uninstall\" removes it.\n", s.Role)
	fmt.Fprintf(&b, "description=\"everynode %s\"\n", s.Role)
	b.WriteString("supervisor=supervise-daemon\n")
	fmt.Fprintf(&b, "command=%s\n", shellQuote(s.binPath()))
	args := append([]string{s.Role}, s.Args...)
	for i := range args {
		args[i] = shellQuote(args[i])
	}
	fmt.Fprintf(&b, "command_args=%s\n", shellQuote(strings.Join(args, " ")))
	fmt.Fprintf(&b, "output_log=/var/log/%s.log\nerror_log=/var/log/%s.log\n", s.Name(), s.Name())
	b.WriteString("respawn_delay=5\nrespawn_max=0\numask=077\n\n")
	b.WriteString("depend() {\n\tneed net\n")
	if s.Role == RoleAgent {
		b.WriteString("\tafter docker\n")
	}
	b.WriteString("}\n\n")
	fmt.Fprintf(&b, "if [ -f %s ]; then\n\tset -o allexport\n\t. %s\n\tset +o allexport\nfi\n", s.EnvFile(), s.EnvFile())
	return b.String()
}

// EnvFileContent renders the environment file, readable by systemd's
// EnvironmentFile= and by a POSIX shell.
func (s Spec) EnvFileContent() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by \"everynode install %s\": secrets for the service, kept off its command line. Mode 0600.\n", s.Role)
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s='%s'\n", k, s.Env[k])
	}
	return b.String()
}

// File is one file Install writes.
type File struct {
	Path    string // without Root
	Mode    os.FileMode
	Content string
}

// Files are the files of the service (the binary aside).
func (s Spec) Files() []File {
	svc := File{Path: s.ServiceFile(), Mode: 0o644, Content: s.Unit()}
	if s.Init == OpenRC {
		svc = File{Path: s.ServiceFile(), Mode: 0o755, Content: s.OpenRCScript()}
	}
	return []File{{Path: s.EnvFile(), Mode: 0o600, Content: s.EnvFileContent()}, svc}
}

// WriteFiles writes the files under Root, each atomically (a temporary file
// renamed over the old one), the environment file's directory 0700.
func (s Spec) WriteFiles() error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(s.path(ConfigDir), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", ConfigDir, err)
	}
	if err := os.Chmod(s.path(ConfigDir), 0o700); err != nil {
		return fmt.Errorf("restrict %s: %w", ConfigDir, err)
	}
	for _, f := range s.Files() {
		if err := writeAtomic(s.path(f.Path), []byte(f.Content), f.Mode); err != nil {
			return err
		}
	}
	return nil
}

// InstallBinary copies the running binary src to BinPath atomically, so a
// running service keeps its old inode until restarted. Nothing is done when
// src is already BinPath.
func (s Spec) InstallBinary(src string) error {
	dst := s.path(s.binPath())
	if same, err := sameFile(src, dst); err != nil || same {
		return err
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read the everynode binary: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(dst), err)
	}
	return writeAtomic(dst, data, 0o755)
}

func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, fmt.Errorf("find the everynode binary: %w", err)
	}
	fb, err := os.Stat(b)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

// RemoveFiles removes the service's files (and the binary if removeBinary);
// missing ones are fine. An agent's service also takes the lean agent
// binary with it, which only that service runs.
func (s Spec) RemoveFiles(removeBinary bool) error {
	paths := []string{s.ServiceFile(), s.EnvFile()}
	if removeBinary {
		paths = append(paths, s.binPath())
	}
	if s.Role == RoleAgent && s.binPath() != LeanAgentBinPath {
		paths = append(paths, LeanAgentBinPath)
	}
	var errs []error
	for _, p := range paths {
		if err := os.Remove(s.path(p)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	_ = os.Remove(s.path(ConfigDir)) // only when empty
	return errors.Join(errs...)
}

func (s Spec) path(p string) string { return filepath.Join(s.Root, p) }

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// systemdQuote quotes one ExecStart word: systemd splits on white space,
// honours double quotes and expands % specifiers and $ variables.
func systemdQuote(w string) string {
	w = strings.ReplaceAll(w, "%", "%%")
	w = strings.ReplaceAll(w, "$", "$$")
	if w != "" && !strings.ContainsAny(w, " \t\"'\\;") {
		return w
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(w) + `"`
}

// shellQuote quotes w for a POSIX shell.
func shellQuote(w string) string {
	if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:,@+") == "" {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

// DataDirOf reads the --data-dir an installed service file runs with ("" if
// it names none), for uninstall --purge.
func DataDirOf(serviceFile []byte) string {
	for _, line := range bytes.Split(serviceFile, []byte("\n")) {
		for _, f := range strings.Fields(string(line)) {
			f = strings.Trim(f, `"'`)
			if v, ok := strings.CutPrefix(f, "--data-dir="); ok {
				return v
			}
		}
	}
	return ""
}
