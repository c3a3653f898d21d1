package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
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
	lock      *os.File      // flock held while etcd serves on the socket
	errDone   chan struct{} // closed when the Err() reader has exited
}

// startEmbedded starts a single-member etcd in dataDir and returns it with an
// in-process client (no sockets between the store and etcd). etcd serves
// other clients (etcdctl, a second server sharing it) on a unix socket only,
// in a 0700 directory and itself 0600: no other local user can connect, and
// nothing listens on the network (docs/security.md, "Local users"). No peer
// listener runs: the member is alone in its cluster.
//
// Serving failures and an unexpected stop of the server are logged and the
// first one is offered to failed without blocking; quiet is set while the
// owner is shutting the server down on purpose.
func startEmbedded(ctx context.Context, cfg Config, lg *slog.Logger, zlg *zap.Logger,
	quiet *atomic.Bool, failed chan<- error) (_ *embedded, _ *clientv3.Client, err error) {
	sock, err := socketPath(cfg.DataDir, cfg.ClientURL)
	if err != nil {
		return nil, nil, err
	}
	// The directory is private before the socket exists, so the socket is
	// never reachable by others, not even between its bind and its chmod.
	if err := privateDir(filepath.Dir(sock), cfg.ClientURL == ""); err != nil {
		return nil, nil, err
	}
	lock, err := lockSocket(sock)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	cu := url.URL{Scheme: "unix", Path: sock}
	ec := embed.NewConfig()
	ec.Name = "everynode"
	ec.Dir = filepath.Join(cfg.DataDir, "etcd")
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	if cfg.Peer == nil {
		// etcd requires the member's peer URL to bootstrap (it names the
		// member in the initial cluster, and the member's ID is derived
		// from it), but a one-member cluster never dials it, so nothing
		// listens on it: it names a socket beside the client's that is
		// never bound.
		pu := url.URL{Scheme: "unix", Path: filepath.Join(filepath.Dir(sock), "etcd-peer.sock")}
		ec.ListenPeerUrls, ec.AdvertisePeerUrls = nil, []url.URL{pu}
		ec.InitialCluster = ec.Name + "=" + pu.String()
		// Alone, the member elects itself once its randomized election
		// timeout passes: 1 to 10 heartbeats after start with etcd's
		// 1-second default, most of a server's start-up. With no other
		// member to miss a heartbeat of, the shortest timeout etcd allows
		// (5 heartbeats) is safe; the heartbeat itself is unchanged.
		ec.ElectionMs = 5 * ec.TickMs
	} else if err := cfg.Peer.apply(ec); err != nil {
		return nil, nil, err
	}
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
	// etcd binds with the process umask; only this user may connect.
	if err := os.Chmod(sock, 0o600); err != nil {
		e.Close()
		return nil, nil, fmt.Errorf("store: restrict the etcd socket: %w", err)
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

	if cfg.Peer != nil && cfg.Peer.Promote != nil && e.Server.IsLearner() {
		// A learner serves no linearizable reads: the store's caches can
		// start only once it is a voting member.
		if err := cfg.Peer.Promote(ctx); err != nil {
			e.Close()
			return nil, nil, fmt.Errorf("store: promote the etcd learner %s: %w", ec.Name, err)
		}
	}
	em := &embedded{etcd: e, clientURL: socketURL(sock), lock: lock, errDone: make(chan struct{})}
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

// stop shuts the server down, waits for its error reader and releases the
// socket's lock.
func (em *embedded) stop() {
	em.etcd.Close()
	<-em.errDone
	em.lock.Close()
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
