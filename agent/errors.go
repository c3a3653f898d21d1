package agent

// Part names the step of starting or running an agent that failed, so that
// a caller (the CLI) can tell its user what to change.
type Part string

// Parts of an agent's start and run.
const (
	// PartJoin: the server could not be reached and no saved credentials fit.
	PartJoin Part = "join"
	// PartCredentials: the credentials could not be saved in the data dir.
	PartCredentials Part = "credentials"
	// PartRuntime: the container runtime could not be reached.
	PartRuntime Part = "runtime"
	// PartLogListen: the log endpoint's address is taken.
	PartLogListen Part = "log-listen"
	// PartGossip: the gossip member could not start.
	PartGossip Part = "gossip"
	// PartConfig: the node agent refused its settings.
	PartConfig Part = "config"
	// PartDataDir: the agent's data dir could not be created.
	PartDataDir Part = "data-dir"
)

// Error is a failure of one Part.
type Error struct {
	Part Part
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }
