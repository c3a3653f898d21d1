package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// The watch fan-out phase: every simulated agent opens one more watch, on
// the Services of Namespace, through its own client (its node credential,
// its process's shared HTTP/2 transport), as a kubelet's Service informer
// does on every node. Then the harness writes one Service fanoutWrites
// times and each agent records when each write's event reached it: one
// write, N node watches.
const (
	fanoutService = "bench-fanout"
	fanoutWrites  = 3
	// fanoutWaitTimeout bounds the wait for one write to reach every
	// watch; a watch it did not reach by then counts as missing.
	fanoutWaitTimeout = 60 * time.Second
	// fanoutOpenBatch is how many watches of one process open at a time.
	fanoutOpenBatch = 64
)

// fanoutWatches are the fan-out watches of one fleet's agents.
type fanoutWatches struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	seen []map[string]int64 // per agent: resourceVersion → receipt, Unix ns
}

// openFanout opens one Services watch per client and returns once every
// watch is established (the server registered it).
func openFanout(ctx context.Context, apis []client.Interface, log *slog.Logger) (*fanoutWatches, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &fanoutWatches{cancel: cancel, seen: make([]map[string]int64, len(apis))}
	errs := make([]error, len(apis))
	var opened sync.WaitGroup
	sem := make(chan struct{}, fanoutOpenBatch)
	for i, api := range apis {
		f.seen[i] = map[string]int64{}
		opened.Add(1)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			sem <- struct{}{}
			w, err := api.Watch(wctx, resources.Services, Namespace, client.ListOptions{})
			<-sem
			opened.Done()
			if err != nil {
				errs[i] = fmt.Errorf("bench: fan-out watch: %w", err)
				return
			}
			f.follow(wctx, api, i, w, log)
		}()
	}
	opened.Wait()
	if err := errors.Join(errs...); err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

// follow records the events of agent i's watch until ctx ends; a watch the
// server ends (a slow consumer) is resumed from the last version seen.
func (f *fanoutWatches) follow(ctx context.Context, api client.Interface, i int, w watch.Interface, log *slog.Logger) {
	rv := ""
	for {
		for ev := range w.ResultChan() {
			now := time.Now().UnixNano()
			o, ok := ev.Object.(resources.Object)
			if !ok || ev.Type == watch.Error || o.GetResourceVersion() == "" {
				continue
			}
			rv = o.GetResourceVersion()
			f.mu.Lock()
			if _, dup := f.seen[i][rv]; !dup {
				f.seen[i][rv] = now
			}
			f.mu.Unlock()
		}
		w.Stop()
		if ctx.Err() != nil {
			return
		}
		var err error
		if w, err = api.Watch(ctx, resources.Services, Namespace, client.ListOptions{ResourceVersion: rv}); err != nil {
			if ctx.Err() == nil {
				log.Warn("fan-out watch ended", "err", err)
			}
			return
		}
	}
}

// wait waits until every watch saw rv or timeout passed, and returns the
// receipt times (Unix ns) of the watches that saw it and how many did not.
func (f *fanoutWatches) wait(ctx context.Context, rv string, timeout time.Duration) ([]int64, int, error) {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		f.mu.Lock()
		got := make([]int64, 0, len(f.seen))
		for _, s := range f.seen {
			if at, ok := s[rv]; ok {
				got = append(got, at)
			}
		}
		f.mu.Unlock()
		if len(got) == len(f.seen) || time.Now().After(deadline) {
			return got, len(f.seen) - len(got), nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-t.C:
		}
	}
}

// close ends the watches and waits for their goroutines.
func (f *fanoutWatches) close() {
	f.cancel()
	f.wg.Wait()
}

// fanoutObject returns the Service the fan-out phase writes; gen changes
// a label so each write is a real change.
func fanoutObject(gen int) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: fanoutService, Namespace: Namespace,
			Labels: map[string]string{"bench.everynode.io/write": strconv.Itoa(gen)}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
}

// fanout measures the watch fan-out (see Result.FanoutP50Ms): the agents
// open their watches, the harness writes the Service fanoutWrites times and
// waits each time until every watch saw the write, then the watches close.
// profile, when set, is called with true before the first write and false
// after the last (Config.FanoutProfile).
func fanout(ctx context.Context, srv *benchServer, fl agentFleet, nodes int, profile func(on bool), res *Result, log *slog.Logger) error {
	log.Info("fan-out: opening a Services watch per agent", "watches", nodes)
	if err := fl.fanoutWatch(ctx, true); err != nil {
		return err
	}
	defer func() {
		if err := fl.fanoutWatch(context.WithoutCancel(ctx), false); err != nil {
			log.Warn("fan-out: closing the watches", "err", err)
		}
	}()
	if profile != nil {
		profile(true)
		defer profile(false)
	}
	cpu0 := cpuSeconds()
	var lat []time.Duration
	var writes []time.Duration
	missing := 0
	for gen := range fanoutWrites {
		t0 := time.Now()
		var obj client.Object
		var err error
		if gen == 0 {
			obj, err = srv.local.Create(ctx, fanoutObject(gen), client.WriteOptions{})
		} else {
			var cur client.Object
			if cur, err = srv.local.Get(ctx, resources.Services, Namespace, fanoutService); err == nil {
				svc := cur.(*corev1.Service).DeepCopy()
				svc.Labels = fanoutObject(gen).Labels
				obj, err = srv.local.Update(ctx, svc, client.WriteOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("bench: fan-out write %d: %w", gen+1, err)
		}
		writes = append(writes, time.Since(t0))
		rv := obj.GetResourceVersion()
		got, miss, err := fl.fanoutWait(ctx, rv, fanoutWaitTimeout)
		if err != nil {
			return err
		}
		missing += miss
		for _, at := range got {
			lat = append(lat, time.Duration(at-t0.UnixNano()))
		}
		log.Info("fan-out write seen", "write", gen+1, "watches", len(got), "missing", miss)
	}
	res.FanoutCPUS = cpuSeconds() - cpu0
	res.FanoutWatches, res.FanoutWrites, res.FanoutMissing = nodes, fanoutWrites, missing
	res.FanoutP50Ms, res.FanoutP99Ms, _ = quantiles(lat)
	if len(lat) > 0 {
		res.FanoutMaxMs = float64(lat[len(lat)-1]) / float64(time.Millisecond) // sorted by quantiles
	}
	res.FanoutWriteMs = float64(slices.Max(writes)) / float64(time.Millisecond)
	log.Info("fan-out", "p50_ms", res.FanoutP50Ms, "p99_ms", res.FanoutP99Ms, "max_ms", res.FanoutMaxMs, "missing", missing)
	return nil
}
