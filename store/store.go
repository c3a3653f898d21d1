package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/everynode/everynode/resources"
)

// DefaultCompactInterval is the compaction period when Config.CompactInterval
// is zero: the Kubernetes API server's default, long enough for any watcher
// that briefly disconnects to resume without re-listing.
const DefaultCompactInterval = 5 * time.Minute

// Config configures Open. The zero value except DataDir is a working
// single-node setup.
type Config struct {
	// DataDir holds the embedded etcd's data in DataDir/etcd. Required unless
	// Endpoints is set.
	DataDir string
	// Endpoints, if set, are the client URLs of an external etcd cluster;
	// nothing is embedded and DataDir and ClientURL are ignored.
	Endpoints []string
	// ClientURL is the unix socket the embedded etcd serves other clients
	// on, "unix:///absolute/path"; its directory must be private (0700) or
	// not exist yet. Empty means DataDir/SocketDir/SocketFile (SocketURL).
	// TCP URLs are refused: etcd's client port has no authentication.
	ClientURL string
	// CompactInterval is how often etcd history is compacted, to the revision
	// seen one interval earlier (so at least one interval of history is
	// always kept). Zero means DefaultCompactInterval; negative disables
	// periodic compaction.
	CompactInterval time.Duration
	// EventTTL is how long an Event is kept after its last write (etcd
	// deletes it, and watchers see it deleted). Zero means DefaultEventTTL;
	// negative keeps Events until they are deleted.
	EventTTL time.Duration
	// Logger receives the store's and etcd's warnings and errors; nil
	// discards them.
	Logger *slog.Logger
	// EncryptionKeyFile, if set, is the key file (EncryptionKeys, mode 0600)
	// under which Secrets are encrypted in etcd with AES-GCM, as
	// kube-apiserver's EncryptionConfiguration does; it is created with a
	// new key when missing and etcd holds no encrypted Secret. Empty stores
	// Secrets in plaintext.
	EncryptionKeyFile string

	// Peer, when set, makes the embedded etcd a member of a cluster of
	// servers with a mutual-TLS peer listener; nil keeps it a single member
	// with no peer listener.
	Peer *Peer

	// unsafeNoFsync disables etcd's fsync; tests only.
	unsafeNoFsync bool
	// wrapKV, if set, wraps the etcd client's KV (tests count requests).
	wrapKV func(clientv3.KV) clientv3.KV
	// ringSize and watchBuffer override the watch cache sizes; tests only.
	ringSize, watchBuffer int
	// leaseReuse overrides leaseReuse when positive; tests only.
	leaseReuse time.Duration
}

const (
	// defaultRingSize is the number of recent events each resource's watch
	// cache keeps for resuming watches (the Kubernetes watch cache keeps
	// between 100 and 100,000 depending on load; 10,000 covers a burst of a
	// pod update on every node of a large cluster). An event of a replaced
	// version costs about 200 bytes (its selector data, not the object), so
	// a full ring is about 2 MiB.
	defaultRingSize = 10000
	// defaultWatchBuffer is the number of events that may wait in a
	// watcher's queue (beyond its initial events) before it is closed: a
	// controller's watch of every pod absorbs a burst of a thousand pod
	// changes. A consumer also holds the batch it took last, so it may lag
	// by up to twice that. The queue holds memory only for the events
	// waiting in it (32 bytes each, plus the slice's growth; the objects are
	// the cache's), so idle watchers cost nothing for it.
	defaultWatchBuffer = 1024
)

// Store is typed object storage over etcd with one watch cache per resource.
// Its methods are safe for concurrent use.
type Store struct {
	lg       *slog.Logger
	client   *clientv3.Client
	embedded *embedded // nil with external endpoints
	caches   map[string]*cache
	leases   *leases // for Events, which expire
	atRest   *atRest // encrypts Secrets; nil: plaintext
	rotateMu sync.Mutex

	cancel    context.CancelFunc // ends the compactor and the caches' etcd watches
	wg        sync.WaitGroup     // the compactor
	closeOnce sync.Once
	quietEtcd atomic.Bool // set while closing: etcd logs its shutdown as errors
	failed    chan error  // see Err
}

// Open starts (or connects to) etcd, starts a watch cache for every resource
// in resources.All and returns when every cache holds the current state.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 && cfg.DataDir == "" {
		return nil, errors.New("store: Config.DataDir or Config.Endpoints is required")
	}
	if cfg.CompactInterval == 0 {
		cfg.CompactInterval = DefaultCompactInterval
	}
	if cfg.ringSize <= 0 {
		cfg.ringSize = defaultRingSize
	}
	if cfg.watchBuffer <= 0 {
		cfg.watchBuffer = defaultWatchBuffer
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	lg = lg.With("component", "store")
	s := &Store{lg: lg, caches: make(map[string]*cache), failed: make(chan error, 1)}
	zlg := newZapLogger(lg, &s.quietEtcd)
	if len(cfg.Endpoints) > 0 {
		c, err := openExternal(ctx, cfg.Endpoints, zlg)
		if err != nil {
			return nil, err
		}
		s.client = c
	} else {
		em, c, err := startEmbedded(ctx, cfg, lg, zlg, &s.quietEtcd, s.failed)
		if err != nil {
			return nil, err
		}
		s.embedded, s.client = em, c
	}
	if cfg.wrapKV != nil {
		s.client.KV = cfg.wrapKV(s.client.KV)
	}

	if cfg.EventTTL == 0 {
		cfg.EventTTL = DefaultEventTTL
	}
	if cfg.leaseReuse <= 0 {
		cfg.leaseReuse = leaseReuse
	}
	s.leases = newLeases(s.client, cfg.EventTTL, cfg.leaseReuse)
	if cfg.EncryptionKeyFile != "" {
		var a *atRest
		err := retryUnavailable(ctx, func() (err error) {
			a, err = openAtRest(ctx, s.client, cfg.EncryptionKeyFile, lg)
			return err
		})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("store: %w", err)
		}
		s.atRest = a
	}

	bg, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, r := range resources.All() {
		c := newCache(r, s.client, s.atRest, lg, cfg.ringSize, cfg.watchBuffer)
		if err := c.start(ctx, bg); err != nil {
			s.Close()
			return nil, err
		}
		s.caches[r.Name] = c
	}
	if cfg.CompactInterval > 0 {
		s.wg.Go(func() { s.compactLoop(bg, cfg.CompactInterval) })
	}
	return s, nil
}

// openRetry bounds how long Open retries the reads etcd refuses while it
// cannot serve (a member restarting into a leader election, as after a
// SIGKILL of the leading server): a server restarted with its unchanged
// command line then starts once the election is over, instead of exiting.
const openRetry = time.Minute

// retryUnavailable runs fn until it succeeds, fails otherwise than with
// etcd's "cannot serve now" (IsUnavailable), ctx ends, or openRetry has
// passed; it returns fn's last error. fn must be safe to run again.
func retryUnavailable(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(openRetry)
	for wait := retryMin; ; wait = min(2*wait, retryMax) {
		err := fn()
		if err == nil || !IsUnavailable(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// Close stops, in order: the compactor, every watch cache (closing all
// watchers' result channels), the etcd client and the embedded etcd. It waits
// for every goroutine the Store started. It is safe to call more than once
// and from several goroutines; later calls return nil at once.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		if s.cancel != nil {
			s.cancel()
		}
		s.wg.Wait()
		for _, c := range s.caches {
			c.stop()
		}
		if cerr := s.client.Close(); cerr != nil && !errors.Is(cerr, context.Canceled) {
			err = fmt.Errorf("store: close etcd client: %w", cerr)
		}
		if s.embedded != nil {
			s.quietEtcd.Store(true)
			s.embedded.stop()
		}
		close(s.failed)
	})
	return err
}

// Err reports a failure of the embedded etcd while the store is open (it
// stopped, or its listeners failed): the store is then unusable and its
// owner should shut down. At most one error is sent; the channel is closed
// by Close. With external endpoints nothing is sent: the etcd client
// reconnects by itself.
func (s *Store) Err() <-chan error { return s.failed }

// ClientURL is the embedded etcd's client URL (a unix socket), through
// which other processes of the same user may share it; empty with external
// endpoints.
func (s *Store) ClientURL() string {
	if s.embedded == nil {
		return ""
	}
	return s.embedded.clientURL
}

// RangesServed is how many ranges the etcd servers embedded in this process
// have served (etcd's own etcd_mvcc_range_total: the reads, and the key each
// conditional write compares); false if etcd's counter is not registered.
// Benchmarks and tests count reads with it.
func RangesServed() (int64, bool) {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_mvcc_range_total" && len(mf.GetMetric()) == 1 {
			return int64(mf.GetMetric()[0].GetCounter().GetValue()), true
		}
	}
	return 0, false
}

// Client returns the raw etcd client, for leader election and benchmarks.
// Writes through it under /registry/ bypass the store's encoding and are
// seen by the watch caches like any other write.
func (s *Store) Client() *clientv3.Client { return s.client }

// cacheFor returns r's watch cache.
func (s *Store) cacheFor(r *resources.Resource) (*cache, error) {
	if r == nil {
		return nil, newError(Invalid, nil, "", "", errors.New("resource is nil"))
	}
	c := s.caches[r.Name]
	if c == nil || c.r != r {
		return nil, newError(Invalid, r, "", "", fmt.Errorf("resource %q is not served", r.Name))
	}
	return c, nil
}

// currentRevision returns etcd's current revision with a linearizable read.
func (s *Store) currentRevision(ctx context.Context) (int64, error) {
	resp, err := s.client.Get(ctx, keyRoot, clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("store: read current revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// Compact discards etcd history before rev and makes the watch caches refuse
// (with Gone) watches that would need an event older than rev. Compacting to
// a revision already compacted is not an error.
func (s *Store) Compact(ctx context.Context, rev int64) error {
	if _, err := s.client.Compact(ctx, rev); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("store: compact to revision %d: %w", rev, err)
	}
	for _, c := range s.caches {
		c.compacted(rev)
	}
	return nil
}

// compactLoop compacts every interval to the revision read one interval
// earlier, so history younger than one interval always survives.
func (s *Store) compactLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur, err := s.currentRevision(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.lg.Warn("compaction skipped", "err", err)
			}
			continue
		}
		if last > 0 {
			if err := s.Compact(ctx, last); err != nil && ctx.Err() == nil {
				s.lg.Warn("compaction failed", "revision", last, "err", err)
			}
		}
		last = cur
	}
}
