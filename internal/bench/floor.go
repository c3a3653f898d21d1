package bench

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// podWrites is the work convergence has to do for one pod, whatever the
// system: its create and one status update, with the sizes convergence
// wrote (the pod as created, and as last written).
type podWrites struct {
	key                string
	createSize, status int
}

// floorWork returns, per pod created during convergence, its create's and
// its last write's sizes.
func floorWork(seqs map[string][]write) []podWrites {
	var out []podWrites
	for key, seq := range seqs {
		if !strings.HasPrefix(key, registryPrefix+"pods/") || !seq[0].create {
			continue
		}
		last := seq[len(seq)-1]
		if last.delete {
			continue
		}
		out = append(out, podWrites{key: key, createSize: seq[0].size, status: last.size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// floorConcurrencies returns the numbers of concurrent writers the fixed
// floor tries for n pods: 16, 64, 256 and so on below n, and n (one writer
// per pod, as many as the agents).
func floorConcurrencies(n int) []int {
	var cs []int
	for c := 16; c < n; c *= 4 {
		cs = append(cs, c)
	}
	return append(cs, n)
}

// floorRounds is how many times the fixed floor tries each concurrency:
// the first round also warms etcd up (its first trial is the slowest).
const floorRounds = 2

// fixedFloor writes pods' work straight to etcd (under floorPrefix): each
// pod created with a create-if-absent transaction, then updated with a
// put, of the sizes in pods. It does so floorRounds times per concurrency
// of floorConcurrencies, each writer taking the next pod, and returns the
// fastest time, its concurrency and each concurrency's best seconds. The
// keys are removed after each trial.
func (s *benchServer) fixedFloor(ctx context.Context, pods []podWrites) (time.Duration, int, map[int]float64, error) {
	if len(pods) == 0 {
		return 0, 0, nil, nil
	}
	maxSize := 0
	for _, p := range pods {
		maxSize = max(maxSize, p.createSize, p.status)
	}
	val := strings.Repeat("x", maxSize)
	trials := map[int]float64{}
	best, bestC := time.Duration(0), 0
	var cs []int
	for range floorRounds {
		cs = append(cs, floorConcurrencies(len(pods))...)
	}
	for _, c := range cs {
		prefix := fmt.Sprintf("%sfixed-%d/", floorPrefix, c)
		var next atomic.Int64
		d, err := s.timedWrites(ctx, prefix, c, func(int) error {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(pods) {
					return nil
				}
				p := pods[i]
				k := prefix + strings.TrimPrefix(p.key, registryPrefix)
				err := retryBusy(ctx, func() error { return s.createIfAbsent(ctx, k, val[:p.createSize]) })
				if err == nil {
					err = retryBusy(ctx, func() error {
						_, err := s.etcd.Put(ctx, k, val[:p.status])
						return err
					})
				}
				if err != nil {
					return fmt.Errorf("bench: fixed floor write %s: %w", k, err)
				}
			}
		})
		if err != nil {
			return 0, 0, nil, err
		}
		if t, ok := trials[c]; !ok || d.Seconds() < t {
			trials[c] = d.Seconds()
		}
		if bestC == 0 || d < best {
			best, bestC = d, c
		}
	}
	return best, bestC, trials, nil
}

// retryBusy runs fn until it succeeds, fails with an error floorRetry does
// not retry, or has waited a minute. etcd sheds load when
// its apply falls far behind its commit (thousands of writers at once; at
// 5,000 nodes for seconds): the floor backs off and retries, as the store's
// callers would, and the wait is part of the floor; at 10,000 nodes some
// requests also time out in its queue. A create that timed out but was
// applied finds its key and does nothing; a repeated put or delete writes
// once more.
func retryBusy(ctx context.Context, fn func() error) error {
	var err error
	for wait, waited := 10*time.Millisecond, time.Duration(0); ; wait = min(2*wait, 200*time.Millisecond) {
		err = fn()
		if !floorRetry(ctx, err) || waited >= time.Minute {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		waited += wait
	}
}

// floorRetry reports whether a floor write that failed with err is retried:
// etcd shedding load, or timing a request out in its queue (which a starved
// etcd reports as a deadline of its own, while ctx is live).
func floorRetry(ctx context.Context, err error) bool {
	return errors.Is(err, rpctypes.ErrTooManyRequests) || errors.Is(err, rpctypes.ErrTimeout) ||
		(errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil)
}

// timedWrites runs writer(0) … writer(n-1) at once, straight to etcd, and
// returns how long they took together, or the first error one returned.
// The keys under prefix are removed afterwards.
func (s *benchServer) timedWrites(ctx context.Context, prefix string, n int, writer func(i int) error) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := writer(i); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	if _, err := s.etcd.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
		return 0, fmt.Errorf("bench: clean floor keys: %w", err)
	}
	return d, nil
}

// createIfAbsent writes k = v unless k exists, as the store creates an
// object.
func (s *benchServer) createIfAbsent(ctx context.Context, k, v string) error {
	_, err := s.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, v)).Commit()
	return err
}
