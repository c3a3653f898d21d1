package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/images"
	"github.com/everynode/everynode/nodeagent"
)

// authenticator is the cluster's credentials, then cfg.Authenticator.
type authenticator struct {
	cluster *pki.Cluster
	extra   apiserver.Authenticator
}

func (a authenticator) AuthenticateToken(token string) (string, []string, bool) {
	if name, groups, ok := a.cluster.AuthenticateToken(token); ok {
		return name, groups, ok
	}
	return a.extra.AuthenticateToken(token)
}

// startAPI builds the API server, serves it on s.ln and waits for /readyz.
func (s *Server) startAPI(ctx context.Context) error {
	var auth apiserver.Authenticator = s.cluster
	if s.cfg.Authenticator != nil {
		auth = authenticator{cluster: s.cluster, extra: s.cfg.Authenticator}
	}
	var seeds func() []string
	if s.member != nil {
		seeds = func() []string { return gossip.ServerAddrs(s.member.Members()) }
	}
	state := apiserver.NewStoreJoinState(s.st)
	if err := s.joinStateAtStart(ctx, state); err != nil {
		return err
	}
	saKey, err := s.cluster.ServiceAccountKey()
	if err != nil {
		return &Error{Part: PartAPI, Err: err}
	}
	saTokens, err := apiserver.NewServiceAccountTokens(s.st, saKey)
	if err != nil {
		return &Error{Part: PartAPI, Err: err}
	}
	imgs, peers, serverBlobs, err := s.openImages(ctx)
	if err != nil {
		return &Error{Part: PartDataDir, Err: err}
	}
	var auditLog io.Writer
	if s.cfg.AuditLog != "" {
		if s.audit, err = openAuditLog(s.cfg.AuditLog, s.cfg.AuditLogMaxSize, s.cfg.AuditLogMaxBackups); err != nil {
			return &Error{Part: PartAPI, Err: err}
		}
		auditLog = s.audit
	}
	acfg := apiserver.Config{
		AuditLog:    auditLog,
		Images:      images.Handler(imgs, s.log.With("component", "images"), s.imageHolders, peers),
		ServerBlobs: serverBlobs,
		Store:       s.st, Authenticator: auth, Authorizer: &apiserver.Chain{
			Node: apiserver.NewNodeRestriction(apiserver.StoreGraph(s.st)), RBAC: apiserver.NewRBAC(s.st)},
		ServiceAccountTokens: saTokens,
		Connected:            s.connected,
		StreamPing:           streamPing(s.cfg.Gossip.Profile, s.cfg.StreamPingTimeout),
		Logger:               s.log.With("component", "apiserver"),
		NodeCredential:       func(n string) string { return nodeagent.LogToken(s.cluster.NodeToken(n)) },
		Join: &apiserver.JoinConfig{Secrets: s.cluster, DataDir: s.dataDir,
			Seeds: seeds, APIServer: func() string { return s.url },
			State: state, CAHash: pki.CAHash(s.cluster.CACert().Raw),
			WriteJoinToken: func(token string) error { return pki.WriteJoinToken(s.dataDir, token) }},
	}
	if s.members != nil {
		acfg.Join.Servers = s.members
	}
	api, err := apiserver.New(acfg)
	if err != nil {
		return &Error{Part: PartAPI, Err: err}
	}
	if err := api.EnsureNamespaces(ctx, namespacesAtStart...); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &Error{Part: PartAPI, Err: fmt.Errorf("create the standard namespaces: %w", err)}
	}
	if err := api.EnsurePriorityClasses(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &Error{Part: PartAPI, Err: fmt.Errorf("create the system priority classes: %w", err)}
	}
	if err := api.EnsureBootstrapPolicy(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &Error{Part: PartAPI, Err: fmt.Errorf("reconcile the default RBAC policy: %w", err)}
	}
	s.api = api
	s.local = apiserver.NewLocalClient(api, "system:controller", pki.MastersGroup)
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	if peers != nil {
		peers.Ctx = runCtx // blob transfers between servers end with the API
	}
	s.stopAPI, s.apiDone = stop, make(chan struct{})
	ln := s.ln
	s.ln = nil // api.Run owns it now
	tlsCfg := s.cluster.TLSConfig()
	if serverBlobs != nil {
		// Other servers fetch image blobs with their peer certificate
		// (images.ServerBlobsPath). Requested, not required, and checked by
		// that path's handler only: no other client is asked for one or
		// refused for the one it sends.
		tlsCfg.ClientAuth = tls.RequestClientCert
	}
	go func() {
		defer close(s.apiDone)
		s.apiErr = api.Run(runCtx, ln, tlsCfg)
		if runCtx.Err() == nil {
			s.fail(&Error{Part: PartAPI, Err: fmt.Errorf("API server stopped: %w", s.apiErr)})
		}
	}()
	return s.waitReady(ctx)
}

// joinStateAtStart writes the rotated join token, if the join secret has
// been rotated, into the data dir's join-token file, and claims the local
// agent's node name with its own node password, as an agent's join does
// (docs/security.md §4).
func (s *Server) joinStateAtStart(ctx context.Context, state *apiserver.StoreJoinState) error {
	rotated, err := state.JoinSecret(ctx)
	if err != nil {
		return &Error{Part: PartStore, Err: err}
	}
	if rotated != "" {
		if err := pki.WriteJoinToken(s.dataDir, s.cluster.JoinTokenWith(rotated)); err != nil {
			return &Error{Part: PartDataDir, Err: err}
		}
	}
	if s.cfg.Agent == nil {
		return nil
	}
	dir := filepath.Join(s.dataDir, "agent")
	password, err := agent.LoadOrCreateNodePassword(dir)
	if err != nil {
		return &Error{Part: PartDataDir, Err: err}
	}
	ok, err := state.ClaimNode(ctx, s.cfg.Agent.Name, password)
	if err != nil {
		return &Error{Part: PartStore, Err: err}
	}
	if !ok {
		return &Error{Part: PartAgent, Err: fmt.Errorf("the node name %q of the local agent is held by another machine (its node password does not match %s); "+
			"if that machine is gone, delete the node (\"everynode delete node %s\") and start again, else give the local agent another --name",
			s.cfg.Agent.Name, filepath.Join(dir, agent.NodePasswordFile), s.cfg.Agent.Name)}
	}
	return nil
}

// waitReady polls /readyz over the real port, with the CA and admin token,
// until it answers, the API fails, ctx ends or readyTimeout passes.
func (s *Server) waitReady(ctx context.Context) error {
	h, err := client.NewHTTP(client.Config{Server: s.url, CAPEM: s.cluster.CAPEM(), Token: s.cluster.AdminToken(), Timeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer h.Close()
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	var last error
	for {
		if _, last = h.RawGet(ctx, "/readyz"); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.apiDone:
			return &Error{Part: PartAPI, Err: fmt.Errorf("API server stopped while starting: %w", s.apiErr)}
		case <-deadline.C:
			return &Error{Part: PartAPI, Err: fmt.Errorf("API at %s not ready after %s: %w", s.url, readyTimeout, last)}
		case <-tick.C:
		}
	}
}
