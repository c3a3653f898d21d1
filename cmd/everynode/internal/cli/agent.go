package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/gossip"
)

// DefaultAgentDataDir is the agent's data dir when --data-dir is not given.
const DefaultAgentDataDir = "./everynode-agent-data"

// rejoinInterval is how often an agent checks that it still gossips with a
// server, and joins the seeds again if not.
const rejoinInterval = 5 * time.Second

// AgentCommand is "everynode agent".
type AgentCommand struct {
	server   string
	token    string
	dataDir  string
	logLevel string
	agent    agentFlags

	level slog.Level
}

func (c *AgentCommand) parse(args []string, std IO) error {
	fs := newFlagSet("agent", "agent --server URL --token TOKEN [--name NAME] [--labels k=v,...] [--taints k=v:Effect,...] [--runtime docker|fake] [--data-dir DIR] [--gossip ADDR] [--gossip-profile lan|wan|local] [--manifest-dir DIR]", std.Out)
	fs.StringVar(&c.server, "server", "", "the API server's https URL (printed by \"everynode server\")")
	fs.StringVar(&c.token, "token", "", "the join token (the server's DATA_DIR/join-token)")
	fs.StringVar(&c.dataDir, "data-dir", DefaultAgentDataDir, "directory for the node credential and the agent's state")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	c.agent.register(fs, "gossip (memberlist) bind address host:port (UDP and TCP); port 0 picks a free one")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
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
	if c.token == "" {
		return usageError("join refused: no --token given", "copy <data-dir>/join-token from the server")
	}
	if c.dataDir == "" {
		return usageError("--data-dir is empty", "give a directory")
	}
	return c.agent.check()
}

// Run joins the cluster and runs the node agent until ctx ends:
//  1. parse the join token, fetch and pin the server's CA,
//  2. exchange the join secret for a node credential (or, with the server
//     unreachable, reuse the one saved in DATA_DIR/credentials.json),
//  3. start a gossip member and join the servers' members (retried in the
//     background),
//  4. run the node agent with the node credential,
//  5. on ctx end: stop the agent, leave the gossip pool (unless
//     --leave-on-stop=false), close the member.
func (c *AgentCommand) Run(ctx context.Context, args []string, std IO) error {
	if err := c.parse(args, std); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(std.Err, &slog.HandlerOptions{Level: c.level}))
	dataDir, err := filepath.Abs(c.dataDir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	node, err := c.agent.nodeName()
	if err != nil {
		return err
	}
	creds, offline, err := obtainCredentials(ctx, c.server, c.token, node, dataDir)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if offline {
		log.Warn("the server is unreachable: starting offline from saved credentials; pods kept on disk keep running", "server", c.server)
	} else {
		log.Info("joined the cluster", "server", c.server, "node", node, "seeds", creds.GossipSeeds)
	}
	nodeIP := c.agent.nodeIP
	if nodeIP == "" {
		nodeIP = outboundIP(c.server)
	}

	api, err := client.NewHTTP(client.Config{Server: c.server, CAPEM: []byte(creds.CAPEM), Token: creds.NodeToken,
		UserAgent: "everynode-agent/" + Version(), Logger: log.With("component", "client")})
	if err != nil {
		return err
	}
	defer api.Close()
	rt, closeRT, err := c.agent.newRuntime(ctx, node, nodeIP, log)
	if err != nil {
		return err
	}
	defer closeRT()

	logLn, err := c.agent.listenLogs()
	if err != nil {
		return err
	}
	defer logLn.Close()
	member, err := gossip.New(c.agent.gossipConfig(node, creds.GossipKey, gossip.Meta{Role: gossip.RoleAgent, AgentAddr: logAddr(logLn, nodeIP)}, nodeIP, log))
	if err != nil {
		return withFix(fmt.Errorf("cannot start gossip: %w", err), "choose a free --gossip address (port 0 picks one)")
	}
	defer member.Close()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		keepJoined(runCtx, member, func() []string { return mergeSeeds(creds.GossipSeeds, serverSeeds(member)) }, rejoinInterval, log)
	}()
	ar := &agentRun{flags: &c.agent, node: node, nodeIP: nodeIP, nodeToken: creds.NodeToken, dataDir: dataDir, api: api, rt: rt, log: log, logLn: logLn}
	err = ar.run(runCtx)
	stop()
	wg.Wait()
	if c.agent.leaveOnStop {
		if lerr := member.Leave(leaveTimeout); lerr != nil {
			log.Warn("gossip leave failed", "err", lerr)
		}
	}
	if cerr := member.Close(); cerr != nil && err == nil {
		log.Warn("gossip close failed", "err", cerr)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("agent stopped", "node", node)
	return nil
}

// mergeSeeds returns a followed by the elements of b not in a.
func mergeSeeds(a, b []string) []string {
	out := append([]string(nil), a...)
	for _, s := range b {
		found := false
		for _, x := range out {
			found = found || x == s
		}
		if !found {
			out = append(out, s)
		}
	}
	return out
}
