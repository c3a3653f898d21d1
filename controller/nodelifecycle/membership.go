package nodelifecycle

// Member is one node as cluster membership (gossip) sees it.
type Member struct {
	// Name is the node name, equal to the Node object's name.
	Name string
	// Alive is false once failure detection declared the member dead or it left.
	Alive bool
	// Left is true when the member announced a graceful departure (its agent
	// was stopped on purpose): the Node goes Ready=False rather than Unknown.
	// Only meaningful when Alive is false.
	Left bool
	// Connected is true while the node holds an authenticated stream to
	// the API (its own credential, see Corroborated): what gossip says of
	// a connected node does not make it NotReady, since anyone with the
	// gossip key can say it.
	Connected bool
}

// Membership tells the controller which nodes are alive. The agent side
// implements it over memberlist. Implementations are safe for concurrent use.
type Membership interface {
	// Members returns the current members; it must not block for long.
	Members() []Member
	// Changed delivers a hint whenever membership may have changed. Senders
	// must not block (select with default); hints may be coalesced or lost,
	// because the controller also re-reads Members on a timer.
	Changed() <-chan struct{}
}
