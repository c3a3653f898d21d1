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
// no write is ever applied twice. Build it with NewFailover.
type Failover struct {
	next    http.RoundTripper
	servers func() []string

	mu      sync.Mutex
	current string // base URL, scheme://host:port
}

// NewFailover routes requests made for first (the configured server URL)
// over next, to first or to any server others returns (base URLs, read at
// each failover; the agent's come from gossip, where servers announce
// their API URL).
func NewFailover(next http.RoundTripper, first string, others func() []string) (*Failover, error) {
	u, err := url.Parse(first)
	if err != nil || u.Host == "" {
		return nil, errors.New("client: failover needs an absolute server URL")
	}
	cur := u.Scheme + "://" + u.Host
	return &Failover{next: next, current: cur, servers: func() []string {
		out := []string{cur}
		if others != nil {
			for _, s := range others() {
				if v, err := url.Parse(s); err == nil && v.Host != "" && !slices.Contains(out, v.Scheme+"://"+v.Host) {
					out = append(out, v.Scheme+"://"+v.Host)
				}
			}
		}
		return out
	}}, nil
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
	resp, err := f.next.RoundTrip(retarget(req, cur))
	if err == nil || !unreached(err) || (req.Body != nil && req.GetBody == nil) {
		return resp, err
	}
	for _, s := range f.servers() {
		if s == cur {
			continue
		}
		r := retarget(req, s)
		if req.GetBody != nil {
			body, berr := req.GetBody()
			if berr != nil {
				return nil, err
			}
			r.Body = body
		}
		resp, err2 := f.next.RoundTrip(r)
		if err2 == nil {
			f.mu.Lock()
			f.current = s
			f.mu.Unlock()
			return resp, nil
		}
	}
	return nil, err
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
