// Package cli is the everynode command line: Main.Run dispatches to one
// command struct per subcommand (server, apply, get, describe, delete,
// version), each parsing its own flag.FlagSet. Nothing here exits the process
// or keeps global state; package main maps Run's error to an exit code.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"
)

// Main runs the everynode command line.
type Main struct {
	// Getenv reads environment variables (KUBECONFIG, HOME); nil means os.Getenv.
	Getenv func(string) string
	// Now is the clock for AGE columns; nil means time.Now.
	Now func() time.Time
}

// NewMain returns a Main reading the real environment and clock.
func NewMain() *Main { return &Main{} }

// IO bundles a command's standard streams.
type IO struct {
	In       io.Reader
	Out, Err io.Writer
}

const usage = `everynode runs DaemonSets outside Kubernetes: an API server on embedded etcd,
a DaemonSet controller and node agents, in one binary.

Usage:
  everynode server [flags]             start a server (API + etcd + controllers + a local agent)
  everynode agent --server URL --token TOKEN [flags]
                                       join a node to a server and run its pods
  everynode apply -f FILE|DIR|-        create or update objects from YAML/JSON
  everynode get KIND [NAME...]         list or show objects
  everynode describe KIND NAME         show an object in detail, with its events
  everynode delete KIND NAME...        delete objects
  everynode logs POD [-c C] [-f]       print (or follow) a container's output
  everynode set image ds/NAME CONTAINER=IMAGE
                                       change a DaemonSet's container image
  everynode rollout status|history|undo|restart ds/NAME
                                       follow, list, roll back or restart a DaemonSet's rollout
  everynode label|annotate KIND NAME k=v k2- [--overwrite]
                                       set or remove labels or annotations
  everynode taint node NAME k=v:Effect | k:Effect-
                                       add or remove a node's taints
  everynode cordon|uncordon NODE       mark a node (un)schedulable
  everynode drain NODE [--ignore-daemonsets] [--force]
                                       cordon a node and delete its non-DaemonSet pods
  everynode version                    print client and server versions

KIND is a resource name or short name: daemonsets (ds), pods (po), nodes (no),
namespaces (ns), events (ev), controllerrevisions.
Client commands read --kubeconfig, else KUBECONFIG, else ~/.kube/config.
Run "everynode COMMAND -h" for a command's flags.
`

// Run executes the command named by args[0]. It returns flag.ErrHelp after
// printing help, and otherwise an error for package main to report.
func (m *Main) Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	std := IO{In: stdin, Out: stdout, Err: stderr}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError("no command given", "run \"everynode server\" to start a cluster, or see \"everynode -h\"")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "server":
		return (&ServerCommand{}).Run(ctx, rest, std)
	case "agent":
		return (&AgentCommand{}).Run(ctx, rest, std)
	case "apply":
		return (&ApplyCommand{main: m}).Run(ctx, rest, std)
	case "get":
		return (&GetCommand{main: m}).Run(ctx, rest, std)
	case "describe":
		return (&DescribeCommand{main: m}).Run(ctx, rest, std)
	case "delete":
		return (&DeleteCommand{main: m}).Run(ctx, rest, std)
	case "logs":
		return (&LogsCommand{main: m}).Run(ctx, rest, std)
	case "version":
		return (&VersionCommand{main: m}).Run(ctx, rest, std)
	case "rollout":
		return (&RolloutCommand{main: m}).Run(ctx, rest, std)
	case "label":
		return (&LabelCommand{main: m}).Run(ctx, rest, std)
	case "annotate":
		return (&LabelCommand{main: m, annotate: true}).Run(ctx, rest, std)
	case "taint":
		return (&TaintCommand{main: m}).Run(ctx, rest, std)
	case "cordon":
		return (&CordonCommand{main: m}).Run(ctx, rest, std)
	case "uncordon":
		return (&CordonCommand{main: m, uncordon: true}).Run(ctx, rest, std)
	case "drain":
		return (&DrainCommand{main: m}).Run(ctx, rest, std)
	case "set":
		return (&SetImageCommand{main: m}).Run(ctx, rest, std)
	case "bench":
		return (&BenchCommand{}).Run(ctx, rest, std)
	}
	return usageError(fmt.Sprintf("unknown command %q", cmd), "see \"everynode -h\" for the commands")
}

func (m *Main) getenv(k string) string {
	if m.Getenv != nil {
		return m.Getenv(k)
	}
	return os.Getenv(k)
}

func (m *Main) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Version is everynode's version as recorded by the Go toolchain.
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "v0.0.0-dev"
}

// cmdFlags is a subcommand's flag set. Parse errors come back as errors
// (printed once by main), help goes to the command's stdout.
type cmdFlags struct {
	*flag.FlagSet
	synopsis string
	help     io.Writer
}

// newFlagSet returns the flag set of "everynode <synopsis>"; -h prints its
// usage to help.
func newFlagSet(name, synopsis string, help io.Writer) *cmdFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &cmdFlags{FlagSet: fs, synopsis: synopsis, help: help}
}

// parse parses args (see parseInterspersed), printing usage on -h.
func (f *cmdFlags) parse(args []string) ([]string, error) {
	pos, err := parseInterspersed(f.FlagSet, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(f.help, "Usage: everynode %s\n\nFlags:\n", f.synopsis)
		f.SetOutput(f.help)
		f.PrintDefaults()
		f.SetOutput(io.Discard)
		return nil, err
	}
	if err != nil {
		return nil, withFix(err, fmt.Sprintf("see \"everynode %s -h\"", f.Name()))
	}
	return pos, nil
}

// parseInterspersed parses flags that may come before, between or after
// positional arguments, as kubectl allows ("get ds -n kube-system"), and
// returns the positional arguments. "--" ends flag parsing. Single-letter
// flags with attached values ("-owide", "-nkube-system") are split first.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	args = splitShortFlags(fs, args)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

type boolFlag interface{ IsBoolFlag() bool }

func splitShortFlags(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && !strings.Contains(a, "=") {
			if f := fs.Lookup(a[1:2]); f != nil {
				if b, ok := f.Value.(boolFlag); !ok || !b.IsBoolFlag() {
					if fs.Lookup(a[1:]) == nil {
						out = append(out, a[:2], a[2:])
						continue
					}
				}
			}
		}
		out = append(out, a)
	}
	return out
}
