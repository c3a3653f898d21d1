package nodeagent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"time"
)

// BridgeRuntime is implemented by a runtime whose pods without host
// networking sit on a bridge of this host (Docker's default bridge):
// BridgeGateway is the host's address on it (e.g. 172.17.0.1), where such
// a pod reaches a process of the host.
type BridgeRuntime interface {
	BridgeGateway(ctx context.Context) (net.IP, error)
}

// podAPITimeout bounds finding the bridge's address and checking the
// server's certificate at start.
const podAPITimeout = 5 * time.Second

// apiServerHostPort is the API server's host and port from Config.APIServer
// (port 443 when the URL gives none); ok false without a usable URL.
func (a *Agent) apiServerHostPort() (host, port string, ok bool) {
	if a.cfg.APIServer == "" {
		return "", "", false
	}
	u, err := url.Parse(a.cfg.APIServer)
	if err != nil || u.Hostname() == "" {
		return "", "", false
	}
	host, port = u.Hostname(), u.Port()
	if port == "" {
		port = "443"
	}
	return host, port, true
}

// isLoopbackHost reports whether host names this machine's loopback.
func isLoopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return (ip != nil && ip.IsLoopback()) || host == "localhost"
}

// bridgeAPIForwarder decides how pods on the runtime's bridge reach an API
// server that the agent reaches on loopback, which they cannot: through a
// forwarder listening on the bridge's gateway address and the server's
// port, copying raw TCP to the server (TLS stays end to end). It sets
// a.bridgeAPI to the address those pods get, and returns the forwarder
// for Run to run, or nil: no forwarder is needed (the server is not on
// loopback, or something of this cluster already serves that address, such
// as the server listening on all addresses) or none can be had (logged:
// those pods then get no KUBERNETES_SERVICE_* variables). Called by Run
// before any pod is synced.
func (a *Agent) bridgeAPIForwarder(ctx context.Context) *tcpForwarder {
	host, port, ok := a.apiServerHostPort()
	if !ok || !isLoopbackHost(host) {
		return nil
	}
	br, ok := a.rt.(BridgeRuntime)
	if !ok {
		return nil
	}
	gctx, cancel := context.WithTimeout(ctx, podAPITimeout)
	gw, err := br.BridgeGateway(gctx)
	cancel()
	if err != nil {
		a.log.Warn("pods without hostNetwork get no KUBERNETES_SERVICE_HOST: the API server is on loopback and the bridge's address is unknown", "server", a.cfg.APIServer, "err", err)
		return nil
	}
	addr, target := net.JoinHostPort(gw.String(), port), net.JoinHostPort(host, port)
	f, err := listenForwarder(addr, target, 0, a.log)
	if err != nil {
		if a.servesCluster(ctx, addr, host) {
			a.log.Info("pods without hostNetwork reach the API server at the bridge's address, served already", "addr", addr)
			a.bridgeAPI = addr
			return nil
		}
		a.log.Warn("pods without hostNetwork get no KUBERNETES_SERVICE_HOST: cannot forward the loopback API server to the bridge", "addr", addr, "err", err)
		return nil
	}
	a.log.Info("forwarding the API server to pods without hostNetwork", "listen", addr, "server", target)
	a.bridgeAPI = addr
	return f
}

// caPool is the cluster CA as a pool; nil without one.
func (a *Agent) caPool() *x509.CertPool {
	pool := x509.NewCertPool()
	if len(a.cfg.ClusterCA) == 0 || !pool.AppendCertsFromPEM(a.cfg.ClusterCA) {
		return nil
	}
	return pool
}

// servesCluster reports whether a TLS server at addr has a certificate of
// this cluster's CA valid for name.
func (a *Agent) servesCluster(ctx context.Context, addr, name string) bool {
	pool := a.caPool()
	if pool == nil {
		return false
	}
	dctx, cancel := context.WithTimeout(ctx, podAPITimeout)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12}}
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// checkServingCert logs one line saying what to do when the server's
// certificate does not cover the address bridge pods reach it at
// (a.bridgeAPI): their clients, which verify it against ca.crt, would fail.
// An unreachable server says nothing (an offline start).
func (a *Agent) checkServingCert(ctx context.Context) {
	host, port, ok := a.apiServerHostPort()
	pool := a.caPool()
	if !ok || pool == nil || a.bridgeAPI == "" {
		return
	}
	gw, _, _ := net.SplitHostPort(a.bridgeAPI)
	dctx, cancel := context.WithTimeout(ctx, podAPITimeout)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: gw, MinVersion: tls.VersionTLS12}}
	c, err := d.DialContext(dctx, "tcp", net.JoinHostPort(host, port))
	if err == nil {
		c.Close()
		return
	}
	var he x509.HostnameError
	if errors.As(err, &he) {
		a.log.Warn("the API server's certificate does not cover "+gw+", where pods without hostNetwork reach it: "+
			"their clients will fail to verify it; restart the server with --tls-san "+gw, "server", a.cfg.APIServer)
		return
	}
	a.log.Debug("cannot check the API server's certificate for the bridge address", "addr", gw, "err", err)
}
