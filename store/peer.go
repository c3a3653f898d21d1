package store

import (
	"context"
	"fmt"
	"net/url"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// Peer clusters the embedded etcd with other servers' (docs/ha.md). The
// member listens for its peers on PeerURL (https, mutual TLS: a peer must
// present a certificate signed by the cluster's CA, which only servers
// hold); clients still reach it only on its unix socket.
type Peer struct {
	// Name is the member's name, unique in the cluster.
	Name string
	// PeerURL is the https URL the member listens on and advertises to its
	// peers, https://ip:port.
	PeerURL string
	// CertFile and KeyFile are the member's peer certificate (server and
	// client authentication), CAFile the cluster CA that signs every peer's.
	CertFile, KeyFile, CAFile string
	// InitialCluster is name=peerURL,... of every member including this
	// one, when it joins an existing cluster (it has been added as a
	// learner); empty starts a new cluster of this member alone. Ignored
	// once the member has data: it resumes as itself.
	InitialCluster string
	// Promote, when the member starts as a learner, is called once etcd
	// serves and must return once the member votes; nil: never called.
	Promote func(context.Context) error
}

// apply configures ec's member and peer listener.
func (p *Peer) apply(ec *embed.Config) error {
	u, err := url.Parse(p.PeerURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("store: etcd peer URL %q must be https://host:port", p.PeerURL)
	}
	ec.Name = p.Name
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*u}, []url.URL{*u}
	ec.PeerTLSInfo = transport.TLSInfo{CertFile: p.CertFile, KeyFile: p.KeyFile, TrustedCAFile: p.CAFile, ClientCertAuth: true}
	if p.InitialCluster == "" {
		ec.InitialCluster = p.Name + "=" + u.String()
		ec.ClusterState = embed.ClusterStateFlagNew
	} else {
		ec.InitialCluster = p.InitialCluster
		ec.ClusterState = embed.ClusterStateFlagExisting
	}
	return nil
}
