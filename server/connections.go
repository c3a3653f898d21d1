package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/everynode/everynode/apiserver"
)

// peerQueryTimeout bounds the question to another server.
const peerQueryTimeout = time.Second

// clusterConnections is the controllers' nodelifecycle.Connections when
// servers share an etcd: the nodes connected to this server (in memory)
// and those connected to every other live server, which the leader asks at
// the URL each server publishes under its lease (serverAPIsPrefix) when it
// needs to know — on a membership round — over TLS verified against the
// cluster CA, with the admin credential all servers share. Nothing is
// written per node or per heartbeat. A server that does not answer within
// peerQueryTimeout vouches for no node: gossip's verdict then stands.
type clusterConnections struct {
	local *apiserver.ConnectedNodes
	etcd  *clientv3.Client
	self  string // this server's API URL
	token string
	hc    *http.Client
	log   *slog.Logger
}

func newClusterConnections(local *apiserver.ConnectedNodes, etcd *clientv3.Client, self string, caPEM []byte, token string, log *slog.Logger) (*clusterConnections, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("the cluster CA holds no certificate; check ca.crt in the data dir")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true, Proxy: nil}
	return &clusterConnections{local: local, etcd: etcd, self: self, token: token, hc: &http.Client{Transport: tr}, log: log}, nil
}

// Connected implements nodelifecycle.Connections.
func (c *clusterConnections) Connected() []string {
	nodes := c.local.Connected()
	ctx, cancel := context.WithTimeout(context.Background(), peerQueryTimeout)
	defer cancel()
	resp, err := c.etcd.Get(ctx, serverAPIsPrefix, clientv3.WithPrefix())
	if err != nil {
		c.log.Debug("cannot list the other servers; counting this server's connected nodes only", "err", err)
		return nodes
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, kv := range resp.Kvs {
		url := string(kv.Value)
		if url == c.self {
			continue
		}
		wg.Go(func() {
			peer, err := c.ask(ctx, url)
			if err != nil {
				c.log.Debug("another server did not say which nodes are connected to it", "server", url, "err", err)
				return
			}
			mu.Lock()
			nodes = append(nodes, peer...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(nodes)
	return slices.Compact(nodes)
}

func (c *clusterConnections) ask(ctx context.Context, url string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+apiserver.ConnectedNodesPath, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %s", resp.Status)
	}
	var list apiserver.ConnectedNodesList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	return list.Nodes, nil
}

// Changed implements nodelifecycle.Connections: this server's hints (the
// controllers poll while a node is disputed, for the other servers').
func (c *clusterConnections) Changed() <-chan struct{} { return c.local.Changed() }

// close releases the idle connections to other servers.
func (c *clusterConnections) close() { c.hc.CloseIdleConnections() }
