package cli

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/everynode/everynode/cmd/internal/agentcmd"
)

// DefaultAgentDataDir is the agent's data dir when --data-dir is not given.
const DefaultAgentDataDir = agentcmd.DefaultDataDir

// TokenEnv is the environment variable holding the join token when neither
// --token nor --token-file is given.
const TokenEnv = agentcmd.TokenEnv

// AgentCommand is "everynode agent": package agentcmd's command, which the
// lean everynode-agent binary runs too.
type AgentCommand struct {
	main *Main
	agentcmd.Command
}

func (c *AgentCommand) flags(fs *pflag.FlagSet) { c.Command.Flags(fs) }

func (c *AgentCommand) complete(pos []string) error {
	c.Getenv = c.main.getenv
	return c.Complete(pos)
}

// joinToken is the join token of --token, --token-file or EVERYNODE_TOKEN.
func (c *AgentCommand) joinToken() (string, error) { return c.JoinToken() }

// Run joins the cluster and runs the node agent until ctx ends.
func (c *AgentCommand) Run(ctx context.Context, std IO) error {
	c.Version = Version()
	return c.Command.Run(ctx, std.Err)
}
