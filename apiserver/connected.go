package apiserver

import (
	"net/http"
	"sync"
	"time"
)

// Node streams: the corroboration that gossip needs before a node is
// marked not ready (docs/security.md, "Gossip is a hint").
//
// An agent holds long-running requests (its pod watch) to the API,
// authenticated with its own credential. While one is open, the node is
// connected. A killed agent's streams end at once (its kernel closes the
// connection); a cut link is found by the HTTP/2 PING the server sends on
// a connection that has been silent for StreamPingInterval, which closes the
// connection when no answer comes within StreamPingTimeout, and with it its
// streams. Nothing is written anywhere: the set lives in this server's
// memory.

const (
	// StreamPingInterval is how long a connection may be silent before the
	// server pings it (http.HTTP2Config.SendPingTimeout), unless
	// Config.StreamPing says otherwise.
	StreamPingInterval = time.Second
	// StreamPingTimeout is how long the server waits for the ping's answer
	// before closing the connection (http.HTTP2Config.PingTimeout).
	StreamPingTimeout = time.Second
	// DefaultStreamLinger is how long a node stays connected after its last
	// stream ended: the time an agent takes to re-open a watch the server
	// ended (a watch timeout, a slow consumer) without being counted gone.
	DefaultStreamLinger = 300 * time.Millisecond
)

// StreamPing is when the server pings a silent HTTP/2 connection and how
// long it waits for the answer. Zero fields mean StreamPingInterval and
// StreamPingTimeout. Slow links (the wan gossip profile) ping less often:
// each ping costs about 100 bytes each way.
type StreamPing struct {
	Interval, Timeout time.Duration
}

func (p StreamPing) orDefaults() StreamPing {
	if p.Interval <= 0 {
		p.Interval = StreamPingInterval
	}
	if p.Timeout <= 0 {
		p.Timeout = StreamPingTimeout
	}
	return p
}

// ConnectedNodes is the set of nodes that hold a long-running request
// (a watch, a log follow) authenticated as themselves (system:node:<name>
// in system:nodes) to this server. It is safe for concurrent use.
type ConnectedNodes struct {
	linger  time.Duration
	changed chan struct{}

	mu      sync.Mutex
	streams map[string]int       // open streams by node
	gone    map[string]time.Time // nodes whose last stream ended, until when they still count
}

// NewConnectedNodes returns an empty set; a node's last stream counts for
// linger after it ended (0 means DefaultStreamLinger).
func NewConnectedNodes(linger time.Duration) *ConnectedNodes {
	if linger <= 0 {
		linger = DefaultStreamLinger
	}
	return &ConnectedNodes{linger: linger, changed: make(chan struct{}, 1),
		streams: map[string]int{}, gone: map[string]time.Time{}}
}

// Connected returns the nodes connected now.
func (c *ConnectedNodes) Connected() []string {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.streams)+len(c.gone))
	for n := range c.streams {
		out = append(out, n)
	}
	for n, until := range c.gone {
		if now.Before(until) {
			out = append(out, n)
		} else {
			delete(c.gone, n)
		}
	}
	return out
}

// IsConnected reports whether node is connected now.
func (c *ConnectedNodes) IsConnected(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams[node] > 0 {
		return true
	}
	until, ok := c.gone[node]
	return ok && time.Now().Before(until)
}

// Changed delivers a hint (coalesced, never blocking the sender) after a
// node stopped being connected: its last stream ended and the linger passed.
func (c *ConnectedNodes) Changed() <-chan struct{} { return c.changed }

func (c *ConnectedNodes) open(node string) {
	c.mu.Lock()
	c.streams[node]++
	delete(c.gone, node)
	c.mu.Unlock()
}

func (c *ConnectedNodes) end(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.streams[node]--
	if c.streams[node] > 0 {
		return
	}
	delete(c.streams, node)
	c.gone[node] = time.Now().Add(c.linger)
	// The hint after the linger: the timer's function only signals, so it
	// needs no owner beyond the timer itself.
	time.AfterFunc(c.linger, c.signal)
}

func (c *ConnectedNodes) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// withNodeStreams counts the long-running requests of authenticated nodes
// in s.connected. The identity is the authenticated one, before any
// impersonation.
func (s *Server) withNodeStreams(next http.Handler) http.Handler {
	if s.connected == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, ok := UserFrom(req.Context())
		node, isNode := nodeName(u)
		if !ok || !isNode || !longRunning(req) {
			next.ServeHTTP(w, req)
			return
		}
		s.connected.open(node)
		defer s.connected.end(node)
		next.ServeHTTP(w, req)
	})
}

// ConnectedNodesPath answers GET with this server's ConnectedNodesList:
// how the server leading the controllers learns which nodes hold their
// stream to another server (docs/agent.md, "Several servers"). Non-resource
// authorization applies: system:masters (the servers' admin credential) may
// read it, nodes may not.
const ConnectedNodesPath = "/everynode/v1/connected-nodes"

// ConnectedNodesList is the answer of ConnectedNodesPath.
type ConnectedNodesList struct {
	Nodes []string `json:"nodes"`
}

func (s *Server) serveConnectedNodes(w http.ResponseWriter, req *http.Request) {
	setScope(req.Context(), "get", "") // authorized as "get" by withNonResourceAuthorization
	out := ConnectedNodesList{Nodes: []string{}}
	if s.connected != nil {
		out.Nodes = append(out.Nodes, s.connected.Connected()...)
	}
	writeJSON(w, http.StatusOK, out)
}
