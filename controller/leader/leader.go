// Package leader makes sure only one everynode server runs the controllers
// at a time: the servers campaign in an etcd election
// (go.etcd.io/etcd/client/v3/concurrency) and the winner runs the work
// function until it loses its session or is stopped; then the others
// campaign again.
//
// The work function is called anew for every term and must return when its
// context ends. Controllers can be Run only once, so it builds fresh ones
// each term.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// DefaultPrefix is the election key prefix of everynode's controllers.
const DefaultPrefix = "/everynode/leader/controllers"

// DefaultTTL is the session lease in seconds: a crashed leader's term ends
// at most this long after its last keep-alive.
const DefaultTTL = 10

// Config configures Run.
type Config struct {
	// Client is the etcd client. Required.
	Client *clientv3.Client
	// Identity names this candidate; required. It must be unique per server
	// and stable across its restarts: a new run releases the election key an
	// earlier run with the same identity left behind (see releaseStale).
	Identity string
	// Prefix is the election key prefix; empty means DefaultPrefix.
	Prefix string
	// TTL is the session lease in seconds; 0 means DefaultTTL.
	TTL int
	// RetryDelay is the pause after a failed session or campaign; 0 means 1s.
	RetryDelay time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// Run campaigns until ctx ends. Each time this candidate wins it calls
// work with a context that ends when leadership is lost (session expired)
// or ctx ends, waits for work to return, resigns, and campaigns again.
// Run returns nil when ctx ends, or an error for an invalid Config.
func Run(ctx context.Context, cfg Config, work func(ctx context.Context)) error {
	if cfg.Client == nil || cfg.Identity == "" || work == nil {
		return errors.New("leader: Config.Client, Config.Identity and work are required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger.With("identity", cfg.Identity, "election", cfg.Prefix)
	for ctx.Err() == nil {
		if err := term(ctx, cfg, log, work); err != nil && ctx.Err() == nil {
			log.Warn("leader election failed; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(cfg.RetryDelay):
			}
		}
	}
	return nil
}

// releaseStale ends a term still held under our own identity by an earlier
// run of this candidate (a server restarted after a crash or SIGKILL):
// without it the restarted server waits up to a whole TTL for its own dead
// session's lease to expire before it can lead. It revokes the lease of every
// election key whose value is cfg.Identity; a live process holding that key
// (two servers wrongly sharing an identity) sees its session end and stops
// leading, as it would on a lost lease. Identities must therefore be unique
// per server and stable across its restarts.
func releaseStale(ctx context.Context, cfg Config, log *slog.Logger) error {
	resp, err := cfg.Client.Get(ctx, cfg.Prefix+"/", clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("leader: list election keys: %w", err)
	}
	for _, kv := range resp.Kvs {
		if string(kv.Value) != cfg.Identity || kv.Lease == 0 {
			continue
		}
		if _, err := cfg.Client.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("leader: revoke stale lease %x of %s: %w", kv.Lease, kv.Key, err)
		}
		log.Info("released the election key of this candidate's previous run", "key", string(kv.Key))
	}
	return nil
}

// term is one session: campaign, lead, resign.
func term(ctx context.Context, cfg Config, log *slog.Logger, work func(context.Context)) error {
	if err := releaseStale(ctx, cfg, log); err != nil {
		return err
	}
	session, err := concurrency.NewSession(cfg.Client, concurrency.WithTTL(cfg.TTL), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("leader: new session: %w", err)
	}
	defer session.Close()
	election := concurrency.NewElection(session, cfg.Prefix)

	// Campaign until elected, the session dies, or ctx ends.
	campaignCtx, stopCampaign := context.WithCancel(ctx)
	go func() {
		select {
		case <-session.Done():
			stopCampaign()
		case <-campaignCtx.Done():
		}
	}()
	err = election.Campaign(campaignCtx, cfg.Identity)
	elected := err == nil && campaignCtx.Err() == nil
	stopCampaign()
	if !elected {
		if err == nil {
			err = errors.New("leader: session ended during campaign")
		}
		return fmt.Errorf("leader: campaign: %w", err)
	}

	log.Info("elected leader")
	leadCtx, stopLead := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-session.Done():
			log.Warn("leader session lost")
		case <-leadCtx.Done():
		}
		stopLead()
	}()
	work(leadCtx)
	stopLead()
	<-done

	resignCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := election.Resign(resignCtx); err != nil {
		log.Debug("resign", "err", err)
	}
	log.Info("leadership ended")
	return nil
}
