package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller"
	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/store"
)

// server is the in-process everynode server of a benchmark run.
type server struct {
	dir     string
	cluster *pki.Cluster
	st      *store.Store
	api     *apiserver.Server
	url     string
	local   client.Interface // admin, in process
	member  *gossip.Member   // nil without gossip
	members nodelifecycle.Membership
	static  *staticMembership // nil with gossip
	// glog keeps the server member's notable gossip lines (nil without).
	glog *gossipRecorder

	stop func() error
}

// startServer starts pki, store, API server (TLS on 127.0.0.1:0) and the
// controllers. With useGossip the controllers' membership is a gossip member
// (LAN profile on loopback) that the simulated nodes join; without, it is
// the set of agents running in this process.
func startServer(ctx context.Context, dir string, useGossip bool, log *slog.Logger) (_ *server, err error) {
	s := &server{dir: dir}
	var cleanups []func() error
	s.stop = func() error {
		var errs []error
		for i := len(cleanups) - 1; i >= 0; i-- {
			errs = append(errs, cleanups[i]())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	if s.cluster, err = pki.Load(filepath.Join(dir, "server"), "127.0.0.1"); err != nil {
		return nil, fmt.Errorf("bench: pki: %w", err)
	}
	if s.st, err = store.Open(ctx, store.Config{DataDir: filepath.Join(dir, "server"), Logger: log.With("component", "store")}); err != nil {
		return nil, fmt.Errorf("bench: open store: %w", err)
	}
	cleanups = append(cleanups, s.st.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: listen: %w", err)
	}
	s.url = "https://" + ln.Addr().String()
	if useGossip {
		cfg := gossip.DefaultLANConfig()
		cfg.BindAddr, cfg.Name, cfg.Key = "127.0.0.1:0", "bench-server", s.cluster.GossipKey()
		cfg.Meta = gossip.Meta{Role: gossip.RoleServer, APIAddr: s.url}
		s.glog = newGossipRecorder(log.With("component", "gossip").Handler())
		cfg.Logger = slog.New(s.glog)
		if s.member, err = gossip.New(cfg); err != nil {
			ln.Close()
			return nil, fmt.Errorf("bench: gossip: %w", err)
		}
		cleanups = append(cleanups, s.member.Close)
	}
	s.api, err = apiserver.New(apiserver.Config{
		Store: s.st, Authenticator: s.cluster, Authorizer: apiserver.NewNodeRestriction(apiserver.StorePods(s.st)),
		Logger: log.With("component", "apiserver"),
		Join:   &apiserver.JoinConfig{Secrets: s.cluster, DataDir: dir, Seeds: s.seeds, APIServer: func() string { return s.url }},
	})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("bench: apiserver: %w", err)
	}
	if err := s.api.EnsureNamespaces(ctx, "default", "kube-system", "kube-public", "kube-node-lease"); err != nil {
		ln.Close()
		return nil, fmt.Errorf("bench: namespaces: %w", err)
	}
	apiCtx, stopAPI := context.WithCancel(context.WithoutCancel(ctx))
	apiErr := make(chan error, 1)
	go func() { apiErr <- s.api.Run(apiCtx, ln, s.cluster.TLSConfig()) }()
	cleanups = append(cleanups, func() error { stopAPI(); return <-apiErr })

	s.local = apiserver.NewLocalClient(s.api, "system:controller", pki.MastersGroup)
	if useGossip {
		gm := nodelifecycle.NewGossipMembership(s.member)
		s.members = gm
		ctrlCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); gm.Run(ctrlCtx) }()
		cleanups = append(cleanups, func() error { stop(); wg.Wait(); return nil })
	} else {
		s.static = newStaticMembership()
		s.members = s.static
	}
	ctrlCtx, stopCtrl := context.WithCancel(context.WithoutCancel(ctx))
	ctrlErr := make(chan error, 1)
	go func() {
		ctrlErr <- controller.RunAll(ctrlCtx, controller.Config{Client: s.local, Membership: s.members, Logger: log.With("component", "controller")})
	}()
	cleanups = append(cleanups, func() error {
		stopCtrl()
		if err := <-ctrlErr; err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	})
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// fleetTarget is what the simulated agents need to reach this server.
func (s *server) fleetTarget() fleetTarget {
	t := fleetTarget{url: s.url, caPEM: s.cluster.CAPEM(), token: s.cluster.NodeToken, static: s.static}
	if s.member != nil {
		t.gossipKey, t.seeds = s.cluster.GossipKey(), s.seeds()
	}
	return t
}

func (s *server) seeds() []string {
	if s.member == nil {
		return nil
	}
	return []string{s.member.LocalAddr()}
}

// transport is the HTTP/2 transport the simulated agents share; dials
// counts its connections.
func (s *server) transport(dials *atomic.Int64) (*http.Transport, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.cluster.CAPEM()) {
		return nil, errors.New("bench: CA holds no certificate")
	}
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials != nil {
				dials.Add(1)
			}
			return d.DialContext(ctx, network, addr)
		},
		TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}, nil
}

// agentTransport is the HTTP/2 transport the simulated agents share. Unlike
// net/http's, whose every request dials when no connection is ready (a
// thousand agents starting at once opened thousands of TLS connections),
// it has one dial in flight at a time and opens another connection only when
// the open ones carry as many streams as the server allows. dials counts its
// connections.
func agentTransport(caPEM []byte, dials *atomic.Int64) (*http2.Transport, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("bench: CA holds no certificate")
	}
	nd := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http2.Transport{
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, NextProtos: []string{"h2"}},
		DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			dials.Add(1)
			d := &tls.Dialer{NetDialer: nd, Config: cfg}
			return d.DialContext(ctx, network, addr)
		},
		ReadIdleTimeout: 30 * time.Second,
	}, nil
}

// waitReady polls /readyz over TLS until it answers 200.
func (s *server) waitReady(ctx context.Context) error {
	tr, err := s.transport(nil)
	if err != nil {
		return err
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: API at %s not ready: %v", s.url, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
