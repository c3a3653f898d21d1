package cli

import (
	"errors"

	"github.com/everynode/everynode/cmd/internal/agentcmd"
	"github.com/everynode/everynode/server"
)

// agentFlags are the node agent's flags, shared by "everynode agent" and the
// local agent of "everynode server" (package agentcmd).
type agentFlags = agentcmd.Flags

// explainStart adds the flag that fixes a failure of the agent or server
// packages to start or run; dataDir is the --data-dir in use.
func explainStart(err error, dataDir string) error {
	if ex := agentcmd.Explain(err); ex != err {
		return ex
	}
	var se *server.Error
	if errors.As(err, &se) {
		switch se.Part {
		case server.PartDataDir:
			return withFix(err, "check the data dir "+dataDir)
		case server.PartListen:
			return withFix(err, "choose a free address with --listen (port 0 picks one)")
		case server.PartStore:
			return withFix(err, "check --etcd-endpoints, or that no other server uses "+dataDir)
		case server.PartEtcd:
			return withFix(err, "see the log above for the cause (disk full? data dir removed?), then restart the server")
		case server.PartGossip:
			return withFix(err, "choose a free --gossip address (port 0 picks one)")
		case server.PartAgent:
			return withFix(err, "fix the cause above, or run the server with --no-agent")
		case server.PartAPI:
			return withFix(err, "see the log above for the cause")
		}
	}
	return err
}
