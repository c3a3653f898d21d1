// Package agentcmd is the node agent's command line, shared by
// "everynode agent" (the full binary) and everynode-agent (the lean binary,
// which links neither the API server nor etcd): its flags, their checks,
// and the run of package agent. It also holds the error shape both binaries
// print (FixError, FormatError).
package agentcmd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/everynode/everynode/agent"
)

// DefaultDataDir is the agent's data dir when --data-dir is not given.
const DefaultDataDir = "./everynode-agent-data"

// TokenEnv is the environment variable holding the join token when neither
// --token nor --token-file is given.
const TokenEnv = "EVERYNODE_TOKEN"

// Command is the agent: "everynode agent" or everynode-agent.
type Command struct {
	// Getenv reads the environment (EVERYNODE_TOKEN); nil means os.Getenv.
	Getenv func(string) string
	// Version goes into the User-Agent ("everynode-agent/VERSION").
	Version string

	server    string
	token     string
	tokenFile string
	dataDir   string
	logLevel  string
	agent     Flags

	level       slog.Level
	tokenOnArgv bool // --token was given: warn that ps shows it
}

// Flags binds the agent's flags to fs.
func (c *Command) Flags(fs *pflag.FlagSet) {
	fs.StringVar(&c.server, "server", "", "the API server's https URL (printed by \"everynode server\")")
	fs.StringVar(&c.token, "token", "", "the join token (the server's DATA_DIR/join-token); visible to other local users in ps: prefer --token-file or "+TokenEnv)
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the join token (a copy of the server's DATA_DIR/join-token)")
	fs.StringVar(&c.dataDir, "data-dir", DefaultDataDir, "directory for the node credential and the agent's state")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	c.agent.Register(fs, "gossip (memberlist) bind address host:port (UDP and TCP); port 0 picks a free one")
}

// Complete checks the parsed flags; pos are the positional arguments (none
// are taken).
func (c *Command) Complete(pos []string) error {
	var err error
	if len(pos) > 0 {
		return UsageError(fmt.Sprintf("unexpected arguments %q", pos), "agent takes only flags; see \"everynode agent -h\"")
	}
	if c.level, err = ParseLogLevel(c.logLevel); err != nil {
		return err
	}
	if c.server == "" {
		return UsageError("--server is required", "give the URL \"everynode server\" printed, e.g. --server https://10.0.0.1:6443")
	}
	if u, err := url.Parse(c.server); err != nil || u.Scheme != "https" || u.Host == "" {
		return UsageError(fmt.Sprintf("invalid --server %q", c.server), "use the https URL \"everynode server\" printed")
	}
	switch {
	case c.token != "" && c.tokenFile != "":
		return UsageError("both --token and --token-file given", "give one of them")
	case c.token != "":
		c.tokenOnArgv = true
	case c.tokenFile != "":
		// Read when the agent starts (JoinToken).
	default:
		c.token = strings.TrimSpace(c.getenv(TokenEnv))
		if c.token == "" {
			return UsageError("join refused: no join token given", "copy <data-dir>/join-token from the server and give it with --token-file (or "+TokenEnv+", or --token)")
		}
	}
	if c.dataDir == "" {
		return UsageError("--data-dir is empty", "give a directory")
	}
	return c.agent.Check()
}

func (c *Command) getenv(k string) string {
	if c.Getenv != nil {
		return c.Getenv(k)
	}
	return os.Getenv(k)
}

// JoinToken is the join token of --token, --token-file or EVERYNODE_TOKEN.
func (c *Command) JoinToken() (string, error) {
	if c.tokenFile != "" {
		return ReadTokenFile(c.tokenFile)
	}
	return c.token, nil
}

// Run joins the cluster and runs the node agent until ctx ends
// (agent.Start documents the steps); then it stops the agent, leaves the
// gossip pool (unless --leave-on-stop=false) and closes the member. The log
// goes to stderr.
func (c *Command) Run(ctx context.Context, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.level}))
	if c.tokenOnArgv {
		log.Warn("the join token was given with --token: other local users can read it in the process list; give it with --token-file or " + TokenEnv)
	}
	token, err := c.JoinToken()
	if err != nil {
		return err
	}
	node, err := c.agent.NodeName()
	if err != nil {
		return err
	}
	err = agent.Run(ctx, agent.Config{
		Server: c.server, Token: token, DataDir: c.dataDir, Node: c.agent.NodeOptions(node),
		Gossip: c.agent.GossipOptions(), UserAgent: "everynode-agent/" + c.Version, Logger: log,
	})
	if err != nil {
		return Explain(err)
	}
	return nil
}
