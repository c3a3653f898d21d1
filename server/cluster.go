package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/store"
)

const (
	// DefaultPeerPort is the embedded etcd's peer port, as etcd's own.
	DefaultPeerPort = 2380
	// MemberFile, in the data dir, records that the server is a member of
	// an embedded etcd cluster: its name, peer URL and the URL it joined
	// through. Its presence makes a restart resume as the same member,
	// whatever --cluster-init or --join say.
	MemberFile = "etcd-member.json"
	// promoteTimeout bounds the wait for a learner to catch up and be
	// promoted.
	promoteTimeout = 2 * time.Minute
)

// member is MemberFile's content.
type member struct {
	Name    string `json:"name"`
	PeerURL string `json:"peerURL"`
	// JoinURL is the server joined through; empty for --cluster-init.
	JoinURL string `json:"joinURL,omitempty"`
}

// clusterPeer decides, before the key material is loaded, how the embedded
// etcd starts: alone (nil), as the first member of a new cluster, as a
// server joining one (receiving the key material over the join token's
// pinned channel), or resuming as the member its data dir records. It
// returns the advertise address the serving certificate must also carry.
func (s *Server) clusterPeer(ctx context.Context) (*store.Peer, string, *member, error) {
	cfg := s.cfg
	path := filepath.Join(s.dataDir, MemberFile)
	var m member
	switch b, err := os.ReadFile(path); {
	case err == nil:
		if err := json.Unmarshal(b, &m); err != nil || m.Name == "" || m.PeerURL == "" {
			return nil, "", nil, &Error{Part: PartDataDir, Err: fmt.Errorf("%s is damaged; restore it from a backup", path)}
		}
		if cfg.ClusterInit || cfg.JoinURL != "" {
			s.log.Info("data dir already initialised: resuming as the same etcd member, ignoring --cluster-init/--join", "member", m.Name)
		}
		u, _ := url.Parse(m.PeerURL)
		p := &store.Peer{Name: m.Name, PeerURL: m.PeerURL}
		if m.JoinURL != "" {
			p.Promote = s.promoteVia(m.JoinURL, "")
		}
		return p, u.Hostname(), &m, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, "", nil, &Error{Part: PartDataDir, Err: err}
	}
	if !cfg.ClusterInit && cfg.JoinURL == "" {
		return nil, "", nil, nil
	}
	if len(cfg.EtcdEndpoints) > 0 {
		return nil, "", nil, &Error{Part: PartStore, Err: errors.New("--cluster-init and --join cluster the embedded etcd; they cannot be used with --etcd-endpoints")}
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "etcd", "member")); err == nil {
		s.log.Warn("data dir already holds a single server's etcd: ignoring --cluster-init/--join (start from a fresh data dir to form or join a cluster)")
		return nil, "", nil, nil
	}
	m.Name = s.serverName()
	adv := cfg.AdvertiseAddress
	if adv == "" && cfg.JoinURL != "" {
		adv = agent.OutboundIP(cfg.JoinURL)
	}
	if adv == "" {
		adv = serverNodeIP(s.listenHost)
	}
	port := cfg.PeerPort
	if port == 0 {
		port = DefaultPeerPort
	}
	m.PeerURL = "https://" + net.JoinHostPort(adv, strconv.Itoa(port))
	p := &store.Peer{Name: m.Name, PeerURL: m.PeerURL}
	if cfg.JoinURL == "" {
		return p, adv, &m, nil
	}
	m.JoinURL = cfg.JoinURL
	resp, err := s.joinCluster(ctx, &m)
	if err != nil {
		return nil, "", nil, err
	}
	p.InitialCluster = resp.InitialCluster
	p.Promote = s.promoteVia(cfg.JoinURL, cfg.JoinToken)
	return p, adv, &m, nil
}

// clusterLeaderTTL is the controllers' leader-election lease of servers
// on an embedded etcd cluster: etcd renews every lease by its whole TTL
// when it elects a new leader (about 1–2 s after the old one is killed),
// so a killed server that led both etcd and the controllers is replaced
// after roughly election + TTL; 5 s keeps that under 10 s.
const clusterLeaderTTL = 5

// leaderTTL is the controllers' lease: clusterLeaderTTL on an embedded
// etcd cluster, else leader.DefaultTTL.
func (s *Server) leaderTTL() int {
	if s.members != nil {
		return clusterLeaderTTL
	}
	return 0
}

// serverName is the server's etcd member name: Config.ServerName, else the
// local agent's node name, else the host name.
func (s *Server) serverName() string {
	switch {
	case s.cfg.ServerName != "":
		return s.cfg.ServerName
	case s.cfg.Agent != nil && s.cfg.Agent.Name != "":
		return s.cfg.Agent.Name
	}
	return hostnameOr("server")
}

// joinCluster asks the server at m.JoinURL, over a channel pinned to the
// join token's CA hash, to add this server as an etcd learner, and writes
// the cluster's key material it answers with into the data dir.
func (s *Server) joinCluster(ctx context.Context, m *member) (*client.ServerJoinResponse, error) {
	caHash, _, err := client.ParseJoinToken(s.cfg.JoinToken)
	if err != nil {
		return nil, &Error{Part: PartJoin, Err: fmt.Errorf("invalid server join token: %w", err)}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	caPEM, err := client.FetchCA(cctx, m.JoinURL, caHash)
	if err != nil {
		if strings.Contains(err.Error(), "pinned by the join token") {
			return nil, &Error{Part: PartJoin, Err: fmt.Errorf("%s is not the cluster of this join token (its CA does not match the token's hash); nothing was sent", m.JoinURL)}
		}
		return nil, &Error{Part: PartJoin, Err: fmt.Errorf("cannot reach %s: %w", m.JoinURL, err)}
	}
	var resp client.ServerJoinResponse
	if err := client.PostPinned(cctx, m.JoinURL, caPEM, client.ServerJoinPath,
		client.ServerJoinRequest{Name: m.Name, PeerURL: m.PeerURL, JoinToken: s.cfg.JoinToken}, &resp); err != nil {
		return nil, &Error{Part: PartJoin, Err: fmt.Errorf("server join refused by %s: %w", m.JoinURL, err)}
	}
	if err := pki.WriteKeyMaterial(s.dataDir, &pki.KeyMaterial{CACert: resp.CACert, CAKey: resp.CAKey, Secret: resp.Secret}); err != nil {
		return nil, &Error{Part: PartDataDir, Err: err}
	}
	if err := client.VerifyCA(caHash, resp.CACert); err != nil {
		return nil, &Error{Part: PartJoin, Err: fmt.Errorf("the CA received from %s: %w", m.JoinURL, err)}
	}
	if len(resp.EncryptionKeys) > 0 {
		if err := writePrivate(filepath.Join(s.dataDir, store.EncryptionKeyFile), resp.EncryptionKeys); err != nil {
			return nil, &Error{Part: PartDataDir, Err: fmt.Errorf("write the cluster's encryption keys: %w", err)}
		}
	}
	return &resp, nil
}

// promoteVia returns the learner's promotion: asked of the server at
// joinURL with token (empty: this data dir's own join-token file, which
// holds the same cluster's token once joined).
func (s *Server) promoteVia(joinURL, token string) func(context.Context) error {
	return func(ctx context.Context) error {
		if token == "" {
			b, err := os.ReadFile(filepath.Join(s.dataDir, pki.JoinTokenFile))
			if err != nil {
				return fmt.Errorf("read the join token to ask for promotion: %w", err)
			}
			token = strings.TrimSpace(string(b))
		}
		caPEM, err := os.ReadFile(filepath.Join(s.dataDir, pki.CACertFile))
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, promoteTimeout)
		defer cancel()
		var out struct{}
		if err := client.PostPinned(cctx, joinURL, caPEM, client.ServerPromotePath,
			client.ServerJoinRequest{Name: s.serverName(), JoinToken: token}, &out); err != nil {
			return fmt.Errorf("ask %s to promote this server: %w", joinURL, err)
		}
		s.log.Info("promoted to a voting etcd member")
		return nil
	}
}

// writeMember records the membership once etcd has data of it.
func writeMember(dataDir string, m *member) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	path := filepath.Join(dataDir, MemberFile)
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(path+".tmp", path)
}

// etcdMembers is the servers' etcd cluster, over the store's client
// (apiserver.ServerMembers).
type etcdMembers struct {
	c       *clientv3.Client
	dataDir string
}

var serversResource = schema.GroupResource{Resource: "servers"}

func (e *etcdMembers) AddServer(ctx context.Context, in client.ServerJoinRequest) (*client.ServerJoinResponse, error) {
	if u, err := url.Parse(in.PeerURL); err != nil || u.Scheme != "https" || u.Port() == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("peer URL %q must be https://address:port", in.PeerURL))
	}
	km, err := pki.ReadKeyMaterial(e.dataDir)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	list, err := e.c.MemberList(ctx)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable("etcd cluster: " + rpctypes.ErrorDesc(err))
	}
	var newID uint64
	for _, m := range list.Members {
		if m.Name == in.Name || slices.Contains(m.PeerURLs, in.PeerURL) {
			if m.IsLearner && slices.Contains(m.PeerURLs, in.PeerURL) {
				newID = m.ID // an earlier attempt added it: answer again
				break
			}
			return nil, apierrors.NewConflict(serversResource, in.Name, fmt.Errorf(
				"a server with this name or peer URL %s is already a member; remove it first (everynode server remove %s) or use another --name",
				in.PeerURL, in.Name))
		}
	}
	members := list.Members
	if newID == 0 {
		add, err := e.addLearner(ctx, in.PeerURL)
		if err != nil {
			return nil, apierrors.NewServiceUnavailable("add the etcd learner: " + rpctypes.ErrorDesc(err))
		}
		newID, members = add.Member.ID, add.Members
	}
	var ic []string
	for _, m := range members {
		name := m.Name
		if m.ID == newID {
			name = in.Name
		}
		for _, u := range m.PeerURLs {
			ic = append(ic, name+"="+u)
		}
	}
	// The joining server's store decrypts the Secrets with the same keys.
	keys, err := os.ReadFile(filepath.Join(e.dataDir, store.EncryptionKeyFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, apierrors.NewInternalError(fmt.Errorf("read the encryption keys for the joining server: %w", err))
	}
	return &client.ServerJoinResponse{CACert: km.CACert, CAKey: km.CAKey, Secret: km.Secret, EncryptionKeys: keys,
		InitialCluster: strings.Join(ic, ",")}, nil
}

// addLearner adds a learner, retrying while etcd refuses reconfiguration
// because the answering member has not yet been connected to a quorum for
// etcd's health interval (5 s; a server that has just joined).
func (e *etcdMembers) addLearner(ctx context.Context, peerURL string) (*clientv3.MemberAddResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		add, err := e.c.MemberAddAsLearner(ctx, []string{peerURL})
		if err == nil || !errors.Is(rpctypes.Error(err), rpctypes.ErrUnhealthy) {
			return add, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (e *etcdMembers) PromoteServer(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, promoteTimeout)
	defer cancel()
	for {
		list, err := e.c.MemberList(ctx)
		if err != nil {
			return apierrors.NewServiceUnavailable("etcd cluster: " + rpctypes.ErrorDesc(err))
		}
		var id uint64
		for _, m := range list.Members {
			if m.Name == name {
				if !m.IsLearner {
					return nil
				}
				id = m.ID
			}
		}
		if id == 0 {
			return apierrors.NewNotFound(serversResource, name)
		}
		_, err = e.c.MemberPromote(ctx, id)
		if err == nil {
			return nil
		}
		if !errors.Is(rpctypes.Error(err), rpctypes.ErrMemberLearnerNotReady) {
			return apierrors.NewServiceUnavailable("promote the etcd learner: " + rpctypes.ErrorDesc(err))
		}
		select {
		case <-ctx.Done():
			return apierrors.NewServiceUnavailable(fmt.Sprintf("the etcd learner %s has not caught up within %s", name, promoteTimeout))
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (e *etcdMembers) RemoveServer(ctx context.Context, name string) error {
	list, err := e.c.MemberList(ctx)
	if err != nil {
		return apierrors.NewServiceUnavailable("etcd cluster: " + rpctypes.ErrorDesc(err))
	}
	var id uint64
	var names []string
	for _, m := range list.Members {
		names = append(names, m.Name)
		if m.Name == name {
			id = m.ID
			if !m.IsLearner && countVoters(list.Members) == 1 {
				return apierrors.NewForbidden(serversResource, name, errors.New(
					"it is the last server of the cluster: removing it would leave no member holding the data"))
			}
		}
	}
	if id == 0 {
		return apierrors.NewNotFound(serversResource, fmt.Sprintf("%s (members: %s)", name, strings.Join(names, ", ")))
	}
	if _, err := e.c.MemberRemove(ctx, id); err != nil {
		return apierrors.NewServiceUnavailable("remove the etcd member: " + rpctypes.ErrorDesc(err))
	}
	return nil
}

func countVoters(ms []*etcdserverpb.Member) int {
	n := 0
	for _, m := range ms {
		if !m.IsLearner {
			n++
		}
	}
	return n
}

// writePrivate writes data to path readable by its owner only, through a
// temporary file renamed over it, so that a crash leaves the old file or the
// new one.
func writePrivate(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
