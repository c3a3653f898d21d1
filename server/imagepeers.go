package server

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/images"
)

// With several servers the image records live in etcd and every server
// announces there which blobs it holds on its disk; a server asked for a
// blob it lacks fetches it from one that has it (docs/edge.md §4).
const (
	// imageRecordsPrefix + sha256(name) holds an image's record (JSON).
	imageRecordsPrefix = "/everynode/images/records/"
	// imageServerBlobsPrefix + url.PathEscape(API URL) holds the digests a
	// server holds (JSON list); keyed by the API URL, which survives
	// restarts and is what serverAPIsPrefix lists for live servers.
	imageServerBlobsPrefix = "/everynode/images/server-blobs/"
)

// etcdCatalog is images.Catalog on etcd.
type etcdCatalog struct {
	c    *clientv3.Client
	self string // this server's API URL
}

var _ images.Catalog = (*etcdCatalog)(nil)

func recordKey(name string) string {
	sum := sha256.Sum256([]byte(name))
	return imageRecordsPrefix + hex.EncodeToString(sum[:])
}

func (e *etcdCatalog) PutRecord(ctx context.Context, name string, data []byte) error {
	_, err := e.c.Put(ctx, recordKey(name), string(data))
	return err
}

func (e *etcdCatalog) GetRecord(ctx context.Context, name string) ([]byte, error) {
	resp, err := e.c.Get(ctx, recordKey(name))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, images.ErrNotFound
	}
	return resp.Kvs[0].Value, nil
}

func (e *etcdCatalog) ListRecords(ctx context.Context) ([][]byte, error) {
	resp, err := e.c.Get(ctx, imageRecordsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = kv.Value
	}
	return out, nil
}

func (e *etcdCatalog) DeleteRecord(ctx context.Context, name string) error {
	resp, err := e.c.Delete(ctx, recordKey(name))
	if err != nil {
		return err
	}
	if resp.Deleted == 0 {
		return images.ErrNotFound
	}
	return nil
}

func (e *etcdCatalog) SetBlobs(ctx context.Context, digests []string) error {
	data, err := json.Marshal(digests)
	if err != nil {
		return err
	}
	_, err = e.c.Put(ctx, imageServerBlobsPrefix+url.PathEscape(e.self), string(data))
	return err
}

// BlobHolders lists the live servers (those whose API URL is published
// under their lease, serverAPIsPrefix) with the blobs each announced.
func (e *etcdCatalog) BlobHolders(ctx context.Context) ([]images.ServerBlobs, error) {
	resp, err := e.c.Txn(ctx).Then(
		clientv3.OpGet(serverAPIsPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(imageServerBlobsPrefix, clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, err
	}
	blobs := map[string][]string{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		u, err := url.PathUnescape(strings.TrimPrefix(string(kv.Key), imageServerBlobsPrefix))
		if err != nil {
			continue
		}
		var ds []string
		if json.Unmarshal(kv.Value, &ds) == nil {
			blobs[u] = ds
		}
	}
	var out []images.ServerBlobs
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		u := string(kv.Value)
		out = append(out, images.ServerBlobs{Name: strings.TrimPrefix(string(kv.Key), serverAPIsPrefix), URL: u,
			Self: u == e.self, Digests: blobs[u]})
	}
	return out, nil
}

// serverPeerClient is the HTTP client a server fetches blobs from the
// others with: it presents the server's etcd peer certificate (mutual TLS,
// as etcd's peer traffic) and trusts only the cluster CA.
func serverPeerClient(dataDir string, ca *x509.Certificate) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dataDir, pki.PeerCertFile), filepath.Join(dataDir, pki.PeerKeyFile))
	if err != nil {
		return nil, fmt.Errorf("load the peer certificate for image blobs: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true, Proxy: nil}
	return &http.Client{Transport: tr}, nil
}

// serverPeersOnly admits a request only when its TLS client certificate
// is a server's peer certificate: signed by the cluster CA (whose key only
// servers hold), for client authentication, with the peer common name.
// Anything else is 401 with one line.
func serverPeersOnly(ca *x509.Certificate, next http.Handler, log *slog.Logger) http.Handler {
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if err := verifyServerPeer(req.TLS, pool); err != nil {
			log.Info("image blob request refused", "remote", req.RemoteAddr, "err", err)
			http.Error(w, "Unauthorized: only the cluster's servers may fetch blobs here, with their peer certificate", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, req)
	})
}

func verifyServerPeer(cs *tls.ConnectionState, pool *x509.CertPool) error {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("no client certificate")
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("client certificate: %w", err)
	}
	if leaf.Subject.CommonName != pki.PeerCommonName {
		return fmt.Errorf("client certificate %q is not a server's peer certificate", leaf.Subject.CommonName)
	}
	return nil
}

// openImages opens the image store. With an embedded etcd cluster the
// records are shared in etcd and a blob loaded on another server is
// fetched from it on demand: it then also returns the fetcher and the
// handler that serves this server's blobs to the others.
func (s *Server) openImages(ctx context.Context) (*images.Store, *images.ServerPeers, http.Handler, error) {
	dir := filepath.Join(s.dataDir, "images")
	if s.members == nil {
		st, err := images.Open(dir)
		return st, nil, nil, err
	}
	log := s.log.With("component", "images")
	st, err := images.OpenShared(ctx, dir, &etcdCatalog{c: s.st.Client(), self: s.url})
	if err != nil {
		return nil, nil, nil, err
	}
	hc, err := serverPeerClient(s.dataDir, s.cluster.CACert())
	if err != nil {
		return nil, nil, nil, err
	}
	return st, &images.ServerPeers{Store: st, Client: hc, Log: log},
		serverPeersOnly(s.cluster.CACert(), images.ServerBlobHandler(st), log), nil
}
