package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/spf13/pflag"

	"github.com/everynode/everynode/agent"
)

// DefaultAgentDataDir is the agent's data dir when --data-dir is not given.
const DefaultAgentDataDir = "./everynode-agent-data"

// AgentCommand is "everynode agent".
type AgentCommand struct {
	main      *Main
	server    string
	token     string
	tokenFile string
	dataDir   string
	logLevel  string
	agent     agentFlags

	level       slog.Level
	tokenOnArgv bool // --token was given: warn that ps shows it
}

// TokenEnv is the environment variable holding the join token when neither
// --token nor --token-file is given.
const TokenEnv = "EVERYNODE_TOKEN"

func (c *AgentCommand) flags(fs *pflag.FlagSet) {
	fs.StringVar(&c.server, "server", "", "the API server's https URL (printed by \"everynode server\")")
	fs.StringVar(&c.token, "token", "", "the join token (the server's DATA_DIR/join-token); visible to other local users in ps: prefer --token-file or "+TokenEnv)
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the join token (a copy of the server's DATA_DIR/join-token)")
	fs.StringVar(&c.dataDir, "data-dir", DefaultAgentDataDir, "directory for the node credential and the agent's state")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	c.agent.register(fs, "gossip (memberlist) bind address host:port (UDP and TCP); port 0 picks a free one")
}

func (c *AgentCommand) complete(pos []string) error {
	var err error
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "agent takes only flags; see \"everynode agent -h\"")
	}
	if c.level, err = parseLogLevel(c.logLevel); err != nil {
		return err
	}
	if c.server == "" {
		return usageError("--server is required", "give the URL \"everynode server\" printed, e.g. --server https://10.0.0.1:6443")
	}
	if u, err := url.Parse(c.server); err != nil || u.Scheme != "https" || u.Host == "" {
		return usageError(fmt.Sprintf("invalid --server %q", c.server), "use the https URL \"everynode server\" printed")
	}
	switch {
	case c.token != "" && c.tokenFile != "":
		return usageError("both --token and --token-file given", "give one of them")
	case c.token != "":
		c.tokenOnArgv = true
	case c.tokenFile != "":
		// Read when the agent starts (joinToken).
	default:
		c.token = strings.TrimSpace(c.main.getenv(TokenEnv))
		if c.token == "" {
			return usageError("join refused: no join token given", "copy <data-dir>/join-token from the server and give it with --token-file (or "+TokenEnv+", or --token)")
		}
	}
	if c.dataDir == "" {
		return usageError("--data-dir is empty", "give a directory")
	}
	return c.agent.check()
}

// joinToken is the join token of --token, --token-file or EVERYNODE_TOKEN.
func (c *AgentCommand) joinToken() (string, error) {
	if c.tokenFile != "" {
		return readTokenFile(c.tokenFile)
	}
	return c.token, nil
}

// Run joins the cluster and runs the node agent until ctx ends
// (agent.Start documents the steps); then it stops the agent, leaves the
// gossip pool (unless --leave-on-stop=false) and closes the member.
func (c *AgentCommand) Run(ctx context.Context, std IO) error {
	log := slog.New(slog.NewTextHandler(std.Err, &slog.HandlerOptions{Level: c.level}))
	if c.tokenOnArgv {
		log.Warn("the join token was given with --token: other local users can read it in the process list; give it with --token-file or " + TokenEnv)
	}
	token, err := c.joinToken()
	if err != nil {
		return err
	}
	node, err := c.agent.nodeName()
	if err != nil {
		return err
	}
	err = agent.Run(ctx, agent.Config{
		Server: c.server, Token: token, DataDir: c.dataDir, Node: c.agent.nodeOptions(node),
		Gossip: c.agent.gossipOptions(), UserAgent: "everynode-agent/" + Version(), Logger: log,
	})
	if err != nil {
		return explainStart(err, c.dataDir)
	}
	return nil
}
