// Command everynode-agent is the node agent alone: the same agent as
// "everynode agent", with the same flags, in a binary that links neither the
// API server, etcd nor the controllers (internal/deps checks its import
// graph), so an idle agent maps a fraction of the pages the full binary
// does (docs/agent.md, "Which binary" and "Footprint").
//
//	everynode-agent --server https://SERVER:6443 --token-file join-token [flags]
//	everynode-agent agent --server ...     (the same: "everynode agent"'s command line)
//	everynode-agent version
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/everynode/everynode/cmd/internal/agentcmd"
	"github.com/everynode/everynode/internal/agentruntime"
	"github.com/everynode/everynode/internal/version"
)

func main() {
	// GOGC=50 and GOMAXPROCS=1 unless the environment sets them: what an
	// idle agent holds and wakes for (internal/agentruntime).
	agentruntime.Apply(os.LookupEnv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, agentcmd.FormatError(err))
		os.Exit(1)
	}
}

// run parses args (without the program name) and runs the agent until ctx
// ends. Help goes to stdout and returns nil.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "agent" {
		args = args[1:] // "everynode agent"'s command line works unchanged
	}
	if len(args) == 1 && (args[0] == "version" || args[0] == "--version") {
		_, err := fmt.Fprintln(stdout, "everynode-agent version "+version.Get())
		return err
	}
	c := &agentcmd.Command{Version: version.Get()}
	fs := pflag.NewFlagSet("everynode-agent", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Flags(fs)
	fs.SortFlags = true
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stdout, "everynode-agent joins a node to an everynode server and runs its pods\n"+
				"(the same agent as \"everynode agent\", without the server's code).\n\n"+
				"Usage:\n  everynode-agent --server URL --token-file FILE [flags]\n  everynode-agent version\n\nFlags:\n%s", fs.FlagUsages())
			return nil
		}
		return agentcmd.WithFix(err, "see \"everynode-agent -h\"")
	}
	if err := c.Complete(fs.Args()); err != nil {
		return err
	}
	return c.Run(ctx, stderr)
}
