package server

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/everynode/everynode/gossip"
)

// Servers sharing one etcd find each other's gossip members through it, so
// that all servers and agents form one pool and whichever server leads the
// controllers sees every node.
const (
	// serverPeersPrefix holds one key per live server member: its gossip address.
	serverPeersPrefix = "/everynode/servers/"
	// serverAPIsPrefix holds one key per live server, under the same lease:
	// its API URL, where the leader asks which nodes are connected to it
	// (connections.go).
	serverAPIsPrefix = "/everynode/server-apis/"
	// serverPeersTTL is the lease of a server's key, in seconds.
	serverPeersTTL = 15
	// serverPeersInterval is how often a server joins peers it does not gossip with.
	serverPeersInterval = 5 * time.Second
)

// joinServerPeers publishes member's gossip address and the server's API
// URL in etcd under a lease and, until ctx ends, joins the servers listed there that are not live
// members of its pool. Failures are logged and retried.
func joinServerPeers(ctx context.Context, etcd *clientv3.Client, member *gossip.Member, name, apiURL string, log *slog.Logger) {
	key := serverPeersPrefix + name
	var lease clientv3.LeaseID
	var lost chan struct{} // closed when the lease's keep-alive ends
	t := time.NewTimer(0)
	defer t.Stop()
	defer func() {
		if lease != 0 {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_, _ = etcd.Revoke(rctx, lease)
			cancel()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(serverPeersInterval)
		if lease == 0 {
			l, err := etcd.Grant(ctx, serverPeersTTL)
			if err != nil {
				log.Warn("cannot publish this server's gossip address in etcd; will retry", "err", err)
				continue
			}
			if _, err := etcd.Txn(ctx).Then(clientv3.OpPut(key, member.LocalAddr(), clientv3.WithLease(l.ID)),
				clientv3.OpPut(serverAPIsPrefix+name, apiURL, clientv3.WithLease(l.ID))).Commit(); err != nil {
				log.Warn("cannot publish this server's gossip address in etcd; will retry", "err", err)
				continue
			}
			ka, err := etcd.KeepAlive(ctx, l.ID)
			if err != nil {
				log.Warn("cannot keep this server's etcd lease; will retry", "err", err)
				continue
			}
			lease, lost = l.ID, make(chan struct{})
			go func(lost chan struct{}) {
				defer close(lost)
				for range ka { // drained until the lease is lost or ctx ends
				}
			}(lost)
		}
		select {
		case <-lost:
			lease = 0 // expired (etcd unreachable for a while): publish again next round
			continue
		default:
		}
		resp, err := etcd.Get(ctx, serverPeersPrefix, clientv3.WithPrefix())
		if err != nil {
			continue
		}
		live := map[string]bool{}
		for _, mi := range member.Members() {
			if mi.State == gossip.Alive {
				live[mi.Addr] = true
			}
		}
		var missing []string
		for _, kv := range resp.Kvs {
			if addr := string(kv.Value); string(kv.Key) != key && !live[addr] {
				missing = append(missing, addr)
			}
		}
		if len(missing) > 0 {
			if _, err := member.Join(missing); err != nil {
				log.Debug("cannot join other servers' gossip members yet", "peers", missing, "err", err)
			} else {
				log.Info("gossiping with the other servers", "peers", missing)
			}
		}
	}
}
