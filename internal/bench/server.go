package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/net/http2"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/server"
)

// benchServer is the in-process everynode server of a benchmark run.
type benchServer struct {
	srv     *server.Server
	url     string
	etcd    *clientv3.Client
	local   client.Interface // admin, in process
	member  *gossip.Member   // nil without gossip
	members nodelifecycle.Membership
	static  *nodelifecycle.StaticMembership // nil with gossip
	// glog keeps the server member's notable gossip lines (nil without).
	glog *gossipRecorder
	// profile is the gossip profile ("" is lan).
	profile string
}

// startServer starts a server (server.Start) on 127.0.0.1:0 without a
// local agent. With useGossip the controllers' membership is the server's
// gossip member (LAN profile on loopback) that the simulated nodes join;
// without, it is the set of agents running in this process.
//
// pingTimeout, when > 0, replaces the API's HTTP/2 ping timeout
// (server.Config.StreamPingTimeout). memLimit is the server's
// Config.MemoryLimit.
func startServer(ctx context.Context, dir string, useGossip bool, profile string, grace, pingTimeout time.Duration, memLimit int64, log *slog.Logger) (*benchServer, error) {
	b := &benchServer{profile: profile}
	if profile == "" {
		profile = gossip.ProfileLAN
	}
	cfg := server.Config{DataDir: filepath.Join(dir, "server"), Listen: "127.0.0.1:0", Logger: log, UnreachableGrace: grace,
		StreamPingTimeout: pingTimeout, GossipName: "bench-server", Gossip: agent.GossipOptions{Addr: "127.0.0.1:0", Profile: profile}, MemoryLimit: memLimit}
	if useGossip {
		b.glog = newGossipRecorder(log.With("component", "gossip").Handler())
		cfg.Gossip.Logger = slog.New(b.glog)
	} else {
		b.static = nodelifecycle.NewStaticMembership()
		cfg.Membership = b.static
	}
	s, err := server.Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: start the server: %w", err)
	}
	b.srv, b.url, b.etcd, b.local, b.member, b.members = s, s.URL(), s.Etcd(), s.Admin(), s.Member(), s.Membership()
	return b, nil
}

// stop closes the server.
func (s *benchServer) stop() error { return s.srv.Close() }

// fleetTarget is what the simulated agents need to reach this server.
func (s *benchServer) fleetTarget() fleetTarget {
	t := fleetTarget{url: s.url, caPEM: s.srv.CAPEM(), token: s.srv.NodeToken, static: s.static}
	if s.member != nil {
		t.gossipKey, t.seeds, t.gossipProfile = s.srv.GossipKey(), s.srv.GossipSeeds(), s.profile
	}
	return t
}

// agentTransport is the HTTP/2 transport the simulated agents share. Unlike
// net/http's, whose every request dials when no connection is ready (a
// thousand agents starting at once opened thousands of TLS connections),
// it has one dial in flight at a time and opens another connection only when
// the open ones carry as many streams as the server allows. dials counts its
// connections.
// count adds what the connections carry, below TLS.
func agentTransport(caPEM []byte, dials *atomic.Int64, count *byteCount) (*http2.Transport, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("bench: CA holds no certificate")
	}
	nd := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http2.Transport{
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, NextProtos: []string{"h2"}},
		DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			dials.Add(1)
			raw, err := nd.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			conn := tls.Client(&countedConn{Conn: raw, c: count}, cfg)
			if err := conn.HandshakeContext(ctx); err != nil {
				raw.Close()
				return nil, err
			}
			return conn, nil
		},
		ReadIdleTimeout: 30 * time.Second,
	}, nil
}
