package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"

	"github.com/everynode/everynode/nodeagent"
)

// DefaultAgentLogListen is where an agent serves container logs to the API
// server: kubelet's port, on every interface. When it is taken (two agents
// on one machine) a free port is used instead; the Node publishes whichever
// it is, so the API server always finds it.
const DefaultAgentLogListen = ":10250"

// agentLogFlags is the agent's log endpoint flag.
type agentLogFlags struct {
	listen string
}

func (f *agentLogFlags) register(fs *cmdFlags) {
	fs.StringVar(&f.listen, "log-listen", DefaultAgentLogListen,
		"address of the HTTPS endpoint serving container logs to the API server (port 0 picks a free one)")
}

// agentLogs is an agent's log endpoint: a listener made before the agent,
// so its port can be published in the Node's status.
type agentLogs struct {
	ln        net.Listener
	nodeIP    string
	nodeToken string
	log       *slog.Logger
}

// listenAgentLogs opens the log endpoint's listener on listen (falling back
// to a free port when the default port is taken) and sets cfg.LogPort. The
// API server authenticates with nodeagent.LogToken(nodeToken). Serve it
// with serve once the agent exists.
func listenAgentLogs(cfg *nodeagent.Config, listen, nodeToken string, log *slog.Logger) (*agentLogs, error) {
	if listen == "" {
		listen = DefaultAgentLogListen
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil && listen == DefaultAgentLogListen && errors.Is(err, syscall.EADDRINUSE) {
		log.Info("the default log port is taken; serving container logs on a free port", "listen", listen)
		ln, err = net.Listen("tcp", ":0")
	}
	if err != nil {
		return nil, withFix(fmt.Errorf("cannot listen for container logs on %s: %w", listen, err),
			"choose a free address with --log-listen (port 0 picks one)")
	}
	cfg.LogPort = int32(ln.Addr().(*net.TCPAddr).Port)
	return &agentLogs{ln: ln, nodeIP: cfg.NodeIP, nodeToken: nodeToken, log: log}, nil
}

// serve serves ag's container logs until ctx ends; it closes the listener.
func (l *agentLogs) serve(ctx context.Context, ag *nodeagent.Agent) {
	defer l.ln.Close()
	tlsCfg, err := nodeagent.SelfSignedTLS(l.nodeIP)
	if err != nil {
		l.log.Error("container logs are not served", "err", err)
		return
	}
	if err := ag.ServeLogs(ctx, l.ln, tlsCfg, nodeagent.LogAuthorizer(l.nodeToken)); err != nil && ctx.Err() == nil {
		l.log.Error("the container log endpoint stopped", "err", err)
	}
}

// newAgentWithLogs makes the agent of cfg with its log endpoint on listen
// (cfg.LogPort is set from the listener, so the Node publishes it) and
// returns it with the function that runs both until ctx ends: the agent's
// Run result is returned once the log endpoint has stopped too.
func newAgentWithLogs(cfg nodeagent.Config, listen, nodeToken string, log *slog.Logger) (*nodeagent.Agent, func(ctx context.Context) error, error) {
	logs, err := listenAgentLogs(&cfg, listen, nodeToken, log)
	if err != nil {
		return nil, nil, err
	}
	ag, err := nodeagent.New(cfg)
	if err != nil {
		logs.ln.Close()
		return nil, nil, err
	}
	run := func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			logs.serve(ctx, ag)
		}()
		err := ag.Run(ctx)
		cancel()
		<-done
		return err
	}
	return ag, run, nil
}
