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
	"runtime/debug"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/everynode/everynode/cmd/internal/agentcmd"
	"github.com/everynode/everynode/internal/version"
)

// idleGCPercent is the lean agent's GOGC unless the environment sets one.
// An idle agent's live heap is 1–3 MiB and Go's smallest heap goal is
// 4 MiB × GOGC/100, so at the default of 100 the heap grows to about twice
// what it holds; at 50 the agent holds up to 1.5 MiB less (with Docker
// pods), for collections about twice as often: about 1.3 ms of CPU per
// second with 5 Docker pods (docs/agent.md, "Footprint").
const idleGCPercent = 50

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(idleGCPercent)
	}
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
