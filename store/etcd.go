package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

const (
	// etcdStartTimeout bounds how long Open waits for the embedded etcd to
	// elect itself leader and serve; a healthy single member takes well
	// under a second, a slow disk replaying a large WAL a few seconds.
	etcdStartTimeout = 60 * time.Second
	// etcdMaxRequestBytes is the largest etcd request the embedded server
	// accepts: above the API server's 3 MiB body limit, so every accepted
	// body can be stored (etcd's own default is 1.5 MiB).
	etcdMaxRequestBytes = 4 << 20
	// etcdCatchUpEntries is how many applied raft entries the embedded etcd
	// keeps in memory after each in-memory snapshot (etcd takes one every
	// 100 applied entries) for followers that fall behind. etcd's default,
	// 5,000, costs about 10 MiB of heap with pod-sized entries, and serves no
	// one here: the embedded etcd is always a one-member cluster (see
	// InitialCluster below), and several servers share an external etcd
	// cluster instead, whose own settings keep its followers able to catch
	// up. etcd's maintainers note that one entry suffices for a single
	// member (etcd-io/etcd#17098); 100 keeps a margin. SnapshotCount is left
	// at its default: since etcd 3.6 it only paces the on-disk snapshots,
	// not the in-memory log.
	etcdCatchUpEntries = 100
	// dialTimeout bounds connecting to an external etcd cluster.
	dialTimeout = 10 * time.Second
	// reconnectMaxDelay caps gRPC's back-off between reconnection attempts
	// to an external etcd (gRPC's default cap is 2 minutes): the watch
	// caches resume within seconds of etcd coming back.
	reconnectMaxDelay = 2 * time.Second
)

// embedded is a running embedded etcd server.
type embedded struct {
	etcd      *embed.Etcd
	clientURL string
	errDone   chan struct{} // closed when the Err() reader has exited
}

// startEmbedded starts a single-member etcd in dataDir and returns it with an
// in-process client (no sockets between the store and etcd). The listen URLs
// stay open for external clients (etcdctl, a second process).
//
// Serving failures and an unexpected stop of the server are logged and the
// first one is offered to failed without blocking; quiet is set while the
// owner is shutting the server down on purpose.
func startEmbedded(ctx context.Context, cfg Config, lg *slog.Logger, zlg *zap.Logger,
	quiet *atomic.Bool, failed chan<- error) (*embedded, *clientv3.Client, error) {
	clientURL, peerURL := cfg.ClientURL, cfg.PeerURL
	var err error
	if clientURL == "" {
		if clientURL, err = freeLoopbackURL(); err != nil {
			return nil, nil, err
		}
	}
	if peerURL == "" {
		if peerURL, err = freeLoopbackURL(); err != nil {
			return nil, nil, err
		}
	}
	cu, err := url.Parse(clientURL)
	if err != nil {
		return nil, nil, fmt.Errorf("store: client URL %q: %w", clientURL, err)
	}
	pu, err := url.Parse(peerURL)
	if err != nil {
		return nil, nil, fmt.Errorf("store: peer URL %q: %w", peerURL, err)
	}

	ec := embed.NewConfig()
	ec.Name = "everynode"
	ec.Dir = filepath.Join(cfg.DataDir, "etcd")
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	ec.InitialCluster = ec.Name + "=" + pu.String()
	ec.InitialClusterToken = "everynode"
	ec.EnableGRPCGateway = false
	ec.MaxRequestBytes = etcdMaxRequestBytes
	ec.SnapshotCatchUpEntries = etcdCatchUpEntries
	ec.UnsafeNoFsync = cfg.unsafeNoFsync
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zlg)

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, nil, fmt.Errorf("store: start embedded etcd in %s: %w", ec.Dir, err)
	}
	timer := time.NewTimer(etcdStartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, nil, fmt.Errorf("store: embedded etcd failed while starting: %w", err)
	case <-ctx.Done():
		e.Close()
		return nil, nil, fmt.Errorf("store: waiting for embedded etcd: %w", ctx.Err())
	case <-timer.C:
		e.Close()
		return nil, nil, fmt.Errorf("store: embedded etcd not ready after %s", etcdStartTimeout)
	}

	em := &embedded{etcd: e, clientURL: cu.String(), errDone: make(chan struct{})}
	go em.watchFailures(lg, quiet, failed)
	return em, v3client.New(e.Server), nil
}

// watchFailures reports serving errors and an unexpected stop until the
// server's error channel is closed by Close.
func (em *embedded) watchFailures(lg *slog.Logger, quiet *atomic.Bool, failed chan<- error) {
	defer close(em.errDone)
	report := func(err error) {
		if quiet.Load() {
			return
		}
		lg.Error("embedded etcd failed", "err", err)
		select {
		case failed <- err:
		default:
		}
	}
	errc, stopped := em.etcd.Err(), em.etcd.Server.StopNotify()
	for {
		select {
		case err, ok := <-errc:
			if !ok {
				return
			}
			if err != nil {
				report(fmt.Errorf("store: embedded etcd serving: %w", err))
			}
		case <-stopped:
			stopped = nil
			report(errors.New("store: embedded etcd stopped"))
		}
	}
}

// stop shuts the server down and waits for its error reader.
func (em *embedded) stop() {
	em.etcd.Close()
	<-em.errDone
}

// openExternal connects to an existing etcd cluster and checks that it answers.
func openExternal(ctx context.Context, endpoints []string, zlg *zap.Logger) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: dialTimeout,
		Logger:      zlg,
		Context:     context.WithoutCancel(ctx),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectMaxDelay},
			MinConnectTimeout: dialTimeout,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("store: connect to etcd %v: %w", endpoints, err)
	}
	pctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	if _, err := c.Get(pctx, "health-check", clientv3.WithCountOnly()); err != nil {
		c.Close()
		return nil, fmt.Errorf("store: etcd %v not answering: %w", endpoints, err)
	}
	return c, nil
}

// freeLoopbackURL returns an http URL on a loopback port that was free a
// moment ago. The port is released before etcd binds it; a collision makes
// StartEtcd fail with "address already in use" and Open retries.
func freeLoopbackURL() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("store: find a free port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("store: find a free port: %w", err)
	}
	return "http://" + addr, nil
}

// isAddrInUse reports whether err is a bind failure on a taken port.
func isAddrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }
