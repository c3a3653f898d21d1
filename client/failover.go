package client

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
)

// Failover is an http.RoundTripper that sends each request to the current
// one of several API servers and, when it cannot be reached, on to the next
// one that answers (the client-side load balancer of k3s' agent, in-process):
// an agent keeps working against another server when its own dies, without
// restarting. A request is resent to another server only when it never
// reached the first (the connection was refused or could not be made), so
// no write is ever applied twice. A server known to be dead (the agent's
// gossip view) is tried after all the others, so a request does not wait
// for a dial to it to time out. Build it with NewFailover.
type Failover struct {
	next    http.RoundTripper
	servers func() []string
	down    func() []string

	mu      sync.Mutex
	current string // base URL, scheme://host:port
}

// NewFailover routes requests made for first (the configured server URL)
// over next, to first or to any server others returns (base URLs, read at
// each failover; the agent's come from gossip, where servers announce
// their API URL). down, which may be nil, returns the base URLs of servers
// known to be dead, read at each request: they are tried last.
func NewFailover(next http.RoundTripper, first string, others, down func() []string) (*Failover, error) {
	u, err := url.Parse(first)
	if err != nil || u.Host == "" {
		return nil, errors.New("client: failover needs an absolute server URL")
	}
	cur := u.Scheme + "://" + u.Host
	return &Failover{next: next, current: cur, down: down, servers: func() []string {
		out := []string{cur}
		if others != nil {
			out = appendBases(out, others())
		}
		return out
	}}, nil
}

// appendBases appends to out the base URLs (scheme://host) of urls that
// are not in it yet.
func appendBases(out, urls []string) []string {
	for _, s := range urls {
		if v, err := url.Parse(s); err == nil && v.Host != "" && !slices.Contains(out, v.Scheme+"://"+v.Host) {
			out = append(out, v.Scheme+"://"+v.Host)
		}
	}
	return out
}

// Current is the server requests go to now.
func (f *Failover) Current() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current
}

// RoundTrip implements http.RoundTripper.
func (f *Failover) RoundTrip(req *http.Request) (*http.Response, error) {
	cur := f.Current()
	var down []string
	if f.down != nil {
		down = appendBases(nil, f.down())
	}
	if !slices.Contains(down, cur) {
		resp, err := f.next.RoundTrip(retarget(req, cur))
		if err == nil || !unreached(err) || (req.Body != nil && req.GetBody == nil) {
			return resp, err
		}
		return f.failover(req, cur, cur, down, err)
	}
	return f.failover(req, cur, "", down, nil)
}

// failover sends req to the servers other than tried (cur when req was
// sent there already, else empty): cur first, then the others, the known
// dead last, until one can be reached; it stops at an error that is not a
// failed dial (the request may have arrived) and returns the first error.
// The request's own body is sent only when tried is empty: each other
// attempt reads it anew from GetBody.
func (f *Failover) failover(req *http.Request, cur, tried string, down []string, err error) (*http.Response, error) {
	servers := f.servers()
	if i := slices.Index(servers, cur); i > 0 {
		servers = append([]string{cur}, slices.Delete(servers, i, i+1)...)
	}
	// Stable: cur first, then the others in order; the known dead after
	// the rest.
	slices.SortStableFunc(servers, func(a, b string) int {
		return cmpBool(slices.Contains(down, a), slices.Contains(down, b))
	})
	sent := tried != ""
	for _, s := range servers {
		if s == tried {
			continue
		}
		r := retarget(req, s)
		if sent && req.Body != nil {
			if req.GetBody == nil {
				return nil, err
			}
			body, berr := req.GetBody()
			if berr != nil {
				return nil, err
			}
			r.Body = body
		}
		sent = true
		resp, err2 := f.next.RoundTrip(r)
		if err2 == nil {
			f.mu.Lock()
			f.current = s
			f.mu.Unlock()
			return resp, nil
		}
		if err == nil {
			err = err2
		}
		if !unreached(err2) {
			return nil, err2
		}
	}
	return nil, err
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// retarget is req sent to base's host.
func retarget(req *http.Request, base string) *http.Request {
	u, _ := url.Parse(base)
	if u == nil || (u.Host == req.URL.Host && u.Scheme == req.URL.Scheme) {
		return req
	}
	r := req.Clone(req.Context())
	r.URL.Scheme, r.URL.Host, r.Host = u.Scheme, u.Host, ""
	return r
}

// unreached reports whether err means the request never reached the
// server: dialling failed.
func unreached(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// CloseIdleConnections closes the idle connections of the transport below.
func (f *Failover) CloseIdleConnections() {
	if c, ok := f.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
