// Package cli is the everynode command line: Main.Run builds a cobra command
// tree with one command struct per verb (server, agent, apply, get, ...), each
// binding its flags (spf13/pflag, so they behave as kubectl's) to its fields.
// Nothing here exits the process or keeps global state; package main maps
// Run's error to an exit code.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/everynode/everynode/internal/version"
	"github.com/everynode/everynode/resources"
)

// Main runs the everynode command line.
type Main struct {
	// Getenv reads environment variables (KUBECONFIG, HOME); nil means os.Getenv.
	Getenv func(string) string
	// Now is the clock for AGE columns; nil means time.Now.
	Now func() time.Time
	// Executable is the running binary's path (install copies it, and
	// looks for everynode-agent beside it); nil means os.Executable.
	Executable func() (string, error)
}

// NewMain returns a Main reading the real environment and clock.
func NewMain() *Main { return &Main{} }

// IO bundles a command's standard streams.
type IO struct {
	In       io.Reader
	Out, Err io.Writer
}

// runner is one verb: flags binds its flags to the verb's fields, complete
// reads the positional arguments and checks the flags once they are parsed,
// and Run does the work.
type runner interface {
	flags(fs *pflag.FlagSet)
	complete(args []string) error
	Run(ctx context.Context, std IO) error
}

// verbSpec places a verb in the command tree.
type verbSpec struct {
	name   string     // "get", "status" (of "rollout status")
	args   string     // the synopsis of its arguments
	short  string     // one line for the command list
	hidden bool       // left out of help ("bench agents")
	kinds  bool       // the first argument is a KIND (shell completion offers them)
	v      runner     // the verb; nil for a group (rollout, set, bench)
	sub    []verbSpec // a group's subcommands
}

// verbs is every command of the everynode binary, in the order help lists them.
func (m *Main) verbs() []verbSpec {
	return []verbSpec{
		{name: "server", args: "[flags]", short: "start a server (API + etcd + controllers + a local agent)", v: &ServerCommand{}, sub: []verbSpec{
			{name: "remove", args: "NAME", short: "remove a server from the embedded etcd cluster (docs/ha.md)", v: &ServerRemoveCommand{main: m}},
		}},
		{name: "agent", args: "--server URL --token-file FILE [flags]", short: "join a node to a server and run its pods", v: &AgentCommand{main: m}},
		{name: "apply", args: "-f FILE|DIR|-", short: "create or update objects from YAML/JSON", v: &ApplyCommand{main: m}},
		{name: "plan", args: "-f FILE|DIR|-", short: "show what apply -f would do, node by node, changing nothing", v: &PlanCommand{main: m}},
		{name: "get", args: "KIND[,KIND...]|all [NAME...]", short: "list or show objects", kinds: true, v: &GetCommand{main: m}},
		{name: "describe", args: "KIND NAME...", short: "show an object in detail, with its events", kinds: true, v: &DescribeCommand{main: m}},
		{name: "delete", args: "KIND NAME...", short: "delete objects", kinds: true, v: &DeleteCommand{main: m}},
		{name: "logs", args: "POD|TYPE/NAME [CONTAINER]", short: "print (or follow) a container's output", v: &LogsCommand{main: m}},
		{name: "set", args: "image ds/NAME CONTAINER=IMAGE...", short: "change a DaemonSet's container image", sub: []verbSpec{
			{name: "image", args: "ds/NAME CONTAINER=IMAGE...", short: "change a DaemonSet's container image", v: &SetImageCommand{main: m}},
		}},
		{name: "rollout", args: "status|history|undo|restart|pause|resume|promote ds/NAME", short: "follow, list, roll back, restart, pause or promote a DaemonSet's rollout", sub: []verbSpec{
			{name: "status", args: "ds/NAME", short: "wait for a DaemonSet's rollout to finish, showing each node's pod", v: &RolloutStatusCommand{main: m}},
			{name: "history", args: "ds/NAME", short: "list a DaemonSet's revisions (--revision N shows one)", v: &RolloutHistoryCommand{main: m}},
			{name: "undo", args: "ds/NAME", short: "roll back to the previous revision (--to-revision N)", v: &RolloutUndoCommand{main: m}},
			{name: "restart", args: "ds/NAME", short: "replace every pod, one node at a time as the update strategy allows", v: &RolloutRestartCommand{main: m}},
			{name: "pause", args: "ds/NAME", short: "hold a DaemonSet's rollout: no pod is replaced until resume", v: &RolloutAnnotateCommand{main: m, action: actionPause}},
			{name: "resume", args: "ds/NAME", short: "continue a paused rollout", v: &RolloutAnnotateCommand{main: m, action: actionResume}},
			{name: "promote", args: "ds/NAME", short: "end a canary or partition: update every node", v: &RolloutAnnotateCommand{main: m, action: actionPromote}},
		}},
		{name: "label", args: "KIND NAME... KEY=VALUE... KEY-...", short: "set or remove labels", kinds: true, v: &LabelCommand{main: m}},
		{name: "annotate", args: "KIND NAME... KEY=VALUE... KEY-...", short: "set or remove annotations", kinds: true, v: &LabelCommand{main: m, annotate: true}},
		{name: "taint", args: "node NAME... KEY[=VALUE]:EFFECT... KEY[:EFFECT]-...", short: "add or remove a node's taints", v: &TaintCommand{main: m}},
		{name: "cordon", args: "NODE...", short: "mark nodes unschedulable", v: &CordonCommand{main: m}},
		{name: "uncordon", args: "NODE...", short: "mark nodes schedulable again", v: &CordonCommand{main: m, uncordon: true}},
		{name: "drain", args: "NODE", short: "cordon a node and delete its non-DaemonSet pods", v: &DrainCommand{main: m}},
		{name: "token", args: "create|list|delete|rotate", short: "manage the join tokens that admit agents", sub: []verbSpec{
			{name: "create", short: "create a bootstrap token that admits agents until it expires (--ttl)", v: &TokenCreateCommand{main: m}},
			{name: "list", short: "list the bootstrap tokens", v: &TokenListCommand{main: m}},
			{name: "delete", args: "TOKEN|ID...", short: "delete bootstrap tokens", v: &TokenDeleteCommand{main: m}},
			{name: "rotate", short: "replace the cluster's join secret (joined agents keep running)", v: &TokenRotateCommand{main: m}},
		}},
		{name: "etcd", args: "snapshot save|ls|restore", short: "save, list and restore etcd snapshots of the embedded etcd", sub: []verbSpec{
			{name: "snapshot", args: "save|ls|restore", short: "save, list and restore etcd snapshots (docs/ha.md)", sub: []verbSpec{
				{name: "save", args: "[NAME]", short: "save a snapshot of the running server's etcd into DATA_DIR/snapshots", v: &SnapshotSaveCommand{}},
				{name: "ls", short: "list the snapshots in DATA_DIR/snapshots", v: &SnapshotListCommand{}},
				{name: "restore", args: "FILE", short: "restore a snapshot onto a fresh data dir", v: &SnapshotRestoreCommand{}},
			}},
		}},
		{name: "secrets", args: "rotate-key", short: "manage the encryption of Secrets in etcd", sub: []verbSpec{
			{name: "rotate-key", short: "encrypt every Secret under a new key and retire the old one", v: &SecretsRotateKeyCommand{main: m}},
		}},
		{name: "image", args: "load|ls|rm", short: "keep images on the servers for nodes that reach no registry", sub: []verbSpec{
			{name: "load", args: "FILE|-", short: "store a docker save tarball on the servers", v: &ImageLoadCommand{main: m}},
			{name: "ls", short: "list the stored images (--nodes: which nodes have them)", v: &ImageListCommand{main: m}},
			{name: "rm", args: "IMAGE...", short: "remove stored images", v: &ImageRemoveCommand{main: m}},
		}},
		{name: "version", short: "print client and server versions", v: &VersionCommand{main: m}},
		{name: "install", args: "server|agent [flags]", short: "install everynode as a system service (systemd or OpenRC), start it", sub: []verbSpec{
			{name: "server", args: "[server flags]", short: "install and start the server as a service", v: &InstallCommand{main: m, role: "server", roleCmd: &ServerCommand{}}},
			{name: "agent", args: "--server URL --token-file F [agent flags]", short: "install and start an agent as a service", v: &InstallCommand{main: m, role: "agent", roleCmd: &AgentCommand{main: m}}},
		}},
		{name: "uninstall", args: "[--purge]", short: "stop and remove the installed everynode services", v: &UninstallCommand{}},
		{name: "bench", args: "fleet|report", short: "measure a simulated fleet, render results as docs/benchmarks.md", sub: []verbSpec{
			{name: "fleet", short: "run a simulated fleet against a real server and measure it", v: &benchFleetCommand{}},
			{name: "report", args: "RESULT.json...", short: "render results of \"bench fleet --json\" as markdown", v: &benchReportCommand{}},
			// The child process of "bench fleet --agent-procs" and "--cpu-load",
			// driven over its stdin and stdout.
			{name: "agents", short: "serve simulated agents on stdin and stdout (run by \"bench fleet --agent-procs\")", hidden: true, v: &benchAgentsCommand{}},
		}},
	}
}

const (
	rootIntro = `everynode runs DaemonSets outside Kubernetes: an API server on embedded etcd,
a DaemonSet controller and node agents, in one binary.
`
	rootOutro = `KIND is a resource name or short name: daemonsets (ds), pods (po), nodes (no),
namespaces (ns), events (ev), controllerrevisions.
Client commands read --kubeconfig, else KUBECONFIG, else ~/.kube/config.
Flags may come before or after the command and its arguments; "--" ends them.
`
)

// Run executes the command line args (without the program name). Help
// (-h, --help, "help") is printed to stdout and returns nil; any other
// failure comes back as an error for package main to print with FormatError.
func (m *Main) Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	root := m.newRoot(IO{In: stdin, Out: stdout, Err: stderr}, m.verbs())
	root.SetArgs(append([]string{}, args...)) // never nil: cobra would read os.Args
	return root.ExecuteContext(ctx)
}

// newRoot builds the command tree of specs, afresh for every run: cobra keeps
// the parsed flags in the commands, and the verbs keep them in their fields.
// The global flags (--kubeconfig, -n) belong to the root, so they may stand
// before the verb as in kubectl ("everynode -n kube-system get pods").
func (m *Main) newRoot(std IO, specs []verbSpec) *cobra.Command {
	global := &clientFlags{}
	root := &cobra.Command{
		Use:           "everynode",
		Short:         "run DaemonSets outside Kubernetes",
		Args:          cobra.ArbitraryArgs,
		SilenceErrors: true, // package main prints the error once, with FormatError
		SilenceUsage:  true, // an error is one line, not the usage
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				writeRootHelp(std.Err, cmd, specs)
				return usageError("no command given", "run \"everynode server\" to start a cluster, or see \"everynode -h\"")
			}
			fix := "see \"everynode -h\" for the commands"
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				fix = fmt.Sprintf("did you mean %q? %s", s[0], fix)
			}
			return usageError(fmt.Sprintf("unknown command %q", args[0]), fix)
		},
		SuggestionsMinimumDistance: 2,
	}
	root.SetIn(std.In)
	root.SetOut(std.Out)
	root.SetErr(std.Err)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return withFix(err, fmt.Sprintf("see \"%s -h\"", cmd.CommandPath()))
	})
	pf := root.PersistentFlags()
	pf.StringVar(&global.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	pf.StringVarP(&global.namespace, "namespace", "n", "", "namespace (default: \"default\")")

	addVerbs(root, specs, global, std)

	// cobra's "completion bash|zsh|fish|powershell"; made here rather than
	// on first use so that help lists it with a synopsis like the others.
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil && c != root {
		c.Use = "completion " + strings.Join(subcommandNames(c), "|")
		c.Short = "print a shell completion script (see \"everynode completion bash -h\")"
	}

	defaultHelp := root.HelpFunc()
	root.SetHelpFunc(func(cmd *cobra.Command, args []string) {
		if cmd != root {
			defaultHelp(cmd, args)
			return
		}
		writeRootHelp(cmd.OutOrStdout(), root, specs)
	})
	return root
}

// addVerbs adds a command to parent for each of specs.
func addVerbs(parent *cobra.Command, specs []verbSpec, global *clientFlags, std IO) {
	for _, s := range specs {
		cmd := &cobra.Command{Use: strings.TrimSpace(s.name + " " + s.args), Short: s.short, Hidden: s.hidden, Args: cobra.ArbitraryArgs}
		if s.v == nil {
			cmd.RunE = groupRunE
			addVerbs(cmd, s.sub, global, std)
		} else {
			bindVerb(cmd, s.v, global, std)
			addVerbs(cmd, s.sub, global, std) // "server remove"
		}
		if s.kinds {
			cmd.ValidArgsFunction = completeKinds
		}
		parent.AddCommand(cmd)
	}
}

// bindVerb makes cmd parse into v and run it.
func bindVerb(cmd *cobra.Command, v runner, global *clientFlags, std IO) {
	v.flags(cmd.Flags())
	cmd.PreRunE = func(_ *cobra.Command, args []string) error {
		if c, ok := v.(interface{ setClientFlags(clientFlags) }); ok {
			c.setClientFlags(*global)
		}
		return v.complete(args)
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return v.Run(cmd.Context(), std) }
}

// groupRunE runs when a group (rollout, set, bench) is given no known
// subcommand.
func groupRunE(cmd *cobra.Command, args []string) error {
	fix := "use " + strings.Join(subcommandNames(cmd), ", ")
	if len(args) == 0 {
		return usageError(fmt.Sprintf("%s needs a subcommand", cmd.Name()), fix)
	}
	return usageError(fmt.Sprintf("unknown %s subcommand %q", cmd.Name(), args[0]), fix)
}

// subcommandNames lists cmd's visible subcommands (sorted, as cobra keeps them).
func subcommandNames(cmd *cobra.Command) []string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return names
}

// completeKinds offers the resource names and short names for a verb's
// first argument.
func completeKinds(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, r := range resources.All() {
		for _, n := range append([]string{r.Name}, r.ShortNames...) {
			if strings.HasPrefix(n, toComplete) {
				out = append(out, n)
			}
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// writeRootHelp prints "everynode -h": what everynode is, one line per
// command with its synopsis, and the global flags.
func writeRootHelp(w io.Writer, root *cobra.Command, specs []verbSpec) {
	const col = 36 // synopses longer than this go on a line of their own
	var b strings.Builder
	b.WriteString(rootIntro + "\nUsage:\n")
	line := func(synopsis, short string) {
		if len(synopsis) > col-2 {
			fmt.Fprintf(&b, "  %s\n  %-*s %s\n", synopsis, col, "", short)
			return
		}
		fmt.Fprintf(&b, "  %-*s %s\n", col, synopsis, short)
	}
	listed := map[string]bool{}
	for _, s := range specs {
		if !s.hidden {
			line(strings.TrimSpace("everynode "+s.name+" "+s.args), s.short)
			listed[s.name] = true
		}
	}
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() && !listed[c.Name()] {
			line("everynode "+c.Use, c.Short)
		}
	}
	b.WriteString("\n" + rootOutro + "\nGlobal flags:\n")
	b.WriteString(root.PersistentFlags().FlagUsages())
	b.WriteString("\nRun \"everynode COMMAND -h\" for a command's flags.\n")
	io.WriteString(w, b.String())
}

func (m *Main) getenv(k string) string {
	if m == nil {
		return os.Getenv(k)
	}
	if m.Getenv != nil {
		return m.Getenv(k)
	}
	return os.Getenv(k)
}

func (m *Main) executable() (string, error) {
	if m != nil && m.Executable != nil {
		return m.Executable()
	}
	return os.Executable()
}

func (m *Main) now() time.Time {
	if m != nil && m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Version is everynode's version (package version): the one `make release`
// stamped, else the one the Go toolchain recorded.
func Version() string { return version.Get() }
