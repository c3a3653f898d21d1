package server

// Part names the piece of a server that failed to start or stopped, so
// that a caller (the CLI) can tell its user what to change.
type Part string

// Parts of a server.
const (
	// PartDataDir: the data dir, its key material or files in it.
	PartDataDir Part = "data-dir"
	// PartListen: the API address is invalid or taken.
	PartListen Part = "listen"
	// PartStore: the store could not open.
	PartStore Part = "store"
	// PartEtcd: the embedded etcd stopped.
	PartEtcd Part = "etcd"
	// PartGossip: the gossip member could not start.
	PartGossip Part = "gossip"
	// PartAPI: the API server could not start, or stopped.
	PartAPI Part = "api"
	// PartJoin: joining another server's etcd cluster failed.
	PartJoin Part = "join"
	// PartAgent: the local agent stopped.
	PartAgent Part = "agent"
)

// Error is a failure of one Part. The local agent's start failures are
// agent.Error values.
type Error struct {
	Part Part
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }
