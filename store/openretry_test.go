package store

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestRetryUnavailable: Open's reads are retried while etcd answers that it
// cannot serve now (a leader election under way), and not otherwise.
func TestRetryUnavailable(t *testing.T) {
	ctx := context.Background()
	calls := 0
	err := retryUnavailable(ctx, func() error {
		calls++
		if calls < 3 {
			return rpctypes.ErrLeaderChanged
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("through a leader change: err %v after %d calls, want nil after 3", err, calls)
	}

	calls = 0
	other := errors.New("secrets encryption key file does not hold the key")
	if err := retryUnavailable(ctx, func() error { calls++; return other }); !errors.Is(err, other) || calls != 1 {
		t.Errorf("another error: %v after %d calls, want it after 1", err, calls)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	calls = 0
	if err := retryUnavailable(cctx, func() error { calls++; return rpctypes.ErrNoLeader }); !errors.Is(err, rpctypes.ErrNoLeader) || calls != 1 {
		t.Errorf("ended context: %v after %d calls, want ErrNoLeader after 1", err, calls)
	}
}
