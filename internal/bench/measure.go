package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/server"
)

// registryPrefix is where the store keeps objects in etcd; floorPrefix is
// where the floor replays them.
const (
	registryPrefix = "/registry/"
	floorPrefix    = "/everynode-bench-floor/"
)

// write is one etcd write as convergence made it.
type write struct {
	size   int
	create bool
	delete bool
}

// WriteStats counts the etcd writes of convergence by kind.
type WriteStats struct {
	PodCreates      int   `json:"pod_creates"`
	PodUpdates      int   `json:"pod_updates"`
	DaemonSetWrites int   `json:"daemonset_writes"`
	Other           int   `json:"other"`
	Total           int   `json:"total"`
	Bytes           int64 `json:"bytes"`
	// Keys is how many distinct keys were written; KeysPerPod and
	// WritesPerPod divide Keys and Total by PodCreates: what each pod cost.
	Keys         int     `json:"keys"`
	KeysPerPod   float64 `json:"keys_per_pod"`
	WritesPerPod float64 `json:"writes_per_pod"`
	// ByResource counts the writes per resource (the key's segment after
	// /registry/: "pods", "events", ...); EventReasons the Event writes
	// per reason, "+" marking updates of an existing Event (client-go's
	// correlator raising its count) rather than new ones.
	ByResource   map[string]int `json:"by_resource"`
	EventReasons map[string]int `json:"event_reasons,omitempty"`
	// PodCreateBytes and PodStatusBytes are the mean value sizes of the
	// pod creates and of the pods' last writes: what the floor writes.
	PodCreateBytes int `json:"pod_create_bytes"`
	PodStatusBytes int `json:"pod_status_bytes"`
	// Ranges is how many ranges etcd served meanwhile (its own
	// etcd_mvcc_range_total): the server's reads, and the key compared by
	// each conditional write; RangesPerPod divides it as KeysPerPod.
	Ranges       int64   `json:"ranges"`
	RangesPerPod float64 `json:"ranges_per_pod"`

	seqs map[string][]write // per key, in order
}

// converge creates the DaemonSet and waits until every simulated node's pod
// is Running and Ready. It returns the span of etcd revisions it took, for
// collectWrites, which the caller runs once it has read the server's memory:
// the harness's copy of the history is not the server's.
func converge(ctx context.Context, srv *benchServer, fl agentFleet, cfg Config, res *Result, log *slog.Logger) (history, error) {
	etcd := srv.etcd
	before, err := etcd.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		return history{}, fmt.Errorf("bench: etcd revision: %w", err)
	}
	ranges0 := etcdRanges()
	ready := map[string]bool{}
	count := 0
	var t0, lastCreate time.Time
	seen := map[string]time.Time{}
	var lags []time.Duration
	if err := fl.record(ctx, true); err != nil {
		return history{}, err
	}
	err = watchUntil(ctx, srv.local, resources.Pods, Namespace, client.ListOptions{LabelSelector: "app=" + DSName}, cfg.Timeout,
		func() error {
			t0 = time.Now()
			if _, err := srv.local.Create(ctx, daemonSet(), client.WriteOptions{}); err != nil {
				return fmt.Errorf("bench: create DaemonSet: %w", err)
			}
			return nil
		},
		func(ev watch.Event) (bool, error) {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				return false, nil
			}
			if _, ok := seen[p.Name]; !ok {
				lastCreate = time.Now()
				seen[p.Name] = lastCreate
			}
			now := ev.Type != watch.Deleted && podReady(p)
			if now != ready[p.Name] {
				ready[p.Name] = now
				if now {
					count++
					lags = append(lags, time.Since(seen[p.Name]))
				} else {
					count--
				}
			}
			return count >= cfg.Nodes, nil
		})
	// Recording stays on (Run turns it off): the last status writes'
	// answers arrive after their watch events.
	if err != nil {
		return history{}, err
	}
	res.ConvergeS = time.Since(t0).Seconds()
	res.PodsRunning = count
	res.CreatesDoneS = lastCreate.Sub(t0).Seconds()
	if len(lags) > 0 {
		slices.Sort(lags)
		res.ReadyLagP50Ms = float64(lags[len(lags)/2]) / float64(time.Millisecond)
		res.ReadyLagMaxMs = float64(lags[len(lags)-1]) / float64(time.Millisecond)
	}
	log.Info("converged", "nodes", cfg.Nodes, "s", res.ConvergeS)
	ranges := rangesSince(ranges0)
	after, err := etcd.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		return history{}, fmt.Errorf("bench: etcd revision: %w", err)
	}
	return history{from: before.Header.Revision, to: after.Header.Revision, ranges: ranges}, nil
}

// history is a span of etcd revisions (exclusive, inclusive) whose writes
// collectWrites reads.
type history struct {
	from, to int64
	ranges   int64 // etcd ranges served between from and to (etcdRanges)
}

// etcdRanges is server.EtcdRangesServed (the benchmark's process runs one
// etcd), -1 when it is unknown.
func etcdRanges() int64 {
	n, ok := server.EtcdRangesServed()
	if !ok {
		return -1
	}
	return n
}

// rangesSince is etcdRanges() - before, or -1 when either is unknown.
func rangesSince(before int64) int64 {
	now := etcdRanges()
	if before < 0 || now < 0 {
		return -1
	}
	return now - before
}

// collectWrites reads etcd's history between two revisions (exclusive,
// inclusive) and returns the writes under the registry prefix, per key.
func collectWrites(ctx context.Context, etcd *clientv3.Client, from, to int64) (WriteStats, error) {
	ws := WriteStats{seqs: map[string][]write{}, ByResource: map[string]int{}, EventReasons: map[string]int{}}
	if to <= from {
		return ws, nil
	}
	// The last registry write at or before to ends the history read (writes
	// outside the registry, if any, never arrive on this watch).
	last, err := etcd.Get(ctx, registryPrefix, clientv3.WithPrefix(), clientv3.WithRev(to), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		return ws, fmt.Errorf("bench: read etcd history: %w", err)
	}
	if len(last.Kvs) == 0 || last.Kvs[0].ModRevision <= from {
		return ws, nil
	}
	to = last.Kvs[0].ModRevision
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), time.Minute)
	defer cancel()
	wc := etcd.Watch(wctx, registryPrefix, clientv3.WithPrefix(), clientv3.WithRev(from+1))
	for resp := range wc {
		if err := resp.Err(); err != nil {
			return ws, fmt.Errorf("bench: read etcd history: %w", err)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision > to {
				return ws, nil
			}
			key := string(ev.Kv.Key)
			w := write{size: len(ev.Kv.Value), create: ev.IsCreate(), delete: ev.Type == clientv3.EventTypeDelete}
			ws.seqs[key] = append(ws.seqs[key], w)
			ws.Total++
			ws.Bytes += int64(w.size)
			res, _, _ := strings.Cut(strings.TrimPrefix(key, registryPrefix), "/")
			ws.ByResource[res]++
			if res == "events" {
				// The store writes Kubernetes' protobuf (docs/api.md, "Storage").
				obj, _ := resources.Events.DecodeProto(ev.Kv.Value)
				if e, ok := obj.(*corev1.Event); ok {
					r := e.Reason
					if !w.create {
						r = "+" + r
					}
					ws.EventReasons[r]++
				}
			}
			switch {
			case strings.HasPrefix(key, registryPrefix+"pods/") && w.create:
				ws.PodCreates++
			case strings.HasPrefix(key, registryPrefix+"pods/"):
				ws.PodUpdates++
			case strings.HasPrefix(key, registryPrefix+"daemonsets/"):
				ws.DaemonSetWrites++
			default:
				ws.Other++
			}
			if ev.Kv.ModRevision == to {
				return ws, nil
			}
		}
	}
	return ws, fmt.Errorf("bench: read etcd history: watch ended early: %v", wctx.Err())
}

// summarise fills in the figures derived from the per-key writes.
func (ws *WriteStats) summarise() {
	ws.Keys = len(ws.seqs)
	if ws.PodCreates == 0 {
		return
	}
	ws.KeysPerPod = float64(ws.Keys) / float64(ws.PodCreates)
	ws.WritesPerPod = float64(ws.Total) / float64(ws.PodCreates)
	ws.RangesPerPod = float64(ws.Ranges) / float64(ws.PodCreates)
	if pods := floorWork(ws.seqs); len(pods) > 0 {
		var creates, statuses int
		for _, p := range pods {
			creates += p.createSize
			statuses += p.status
		}
		ws.PodCreateBytes, ws.PodStatusBytes = creates/len(pods), statuses/len(pods)
	}
}

// summariseRollout fills in the per-pod figures of a rollout's writes, per
// node (each node's pod replaced once).
func (ws *WriteStats) summariseRollout(nodes int) {
	ws.Keys = len(ws.seqs)
	if nodes > 0 {
		ws.KeysPerPod = float64(ws.Keys) / float64(nodes)
		ws.WritesPerPod = float64(ws.Total) / float64(nodes)
		ws.RangesPerPod = float64(ws.Ranges) / float64(nodes)
	}
}

// replay issues the same writes (same keys under another prefix, same value
// sizes, creates as create-if-absent transactions) straight to etcd, one
// writer per key as the agents and controllers are, and returns how long
// it took. The replayed keys are removed afterwards.
func (s *benchServer) replay(ctx context.Context, seqs map[string][]write) (time.Duration, error) {
	maxSize := 0
	keys := make([]string, 0, len(seqs))
	for key, seq := range seqs {
		keys = append(keys, key)
		for _, w := range seq {
			maxSize = max(maxSize, w.size)
		}
	}
	buf := strings.Repeat("x", maxSize)
	return s.timedWrites(ctx, floorPrefix, len(keys), func(i int) error {
		k := floorPrefix + strings.TrimPrefix(keys[i], registryPrefix)
		for _, w := range seqs[keys[i]] {
			err := retryBusy(ctx, func() error {
				var err error
				switch {
				case w.delete:
					_, err = s.etcd.Delete(ctx, k)
				case w.create:
					err = s.createIfAbsent(ctx, k, buf[:w.size])
				default:
					_, err = s.etcd.Put(ctx, k, buf[:w.size])
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("bench: floor write %s: %w", k, err)
			}
		}
		return nil
	})
}

// rollout updates the DaemonSet's image and waits until every simulated
// node runs exactly one pod, Ready, with the new image.
func rollout(ctx context.Context, srv *benchServer, n int, timeout time.Duration) (float64, error) {
	type state struct{ updated bool }
	pods := map[string]state{}
	updated := 0
	var t0 time.Time
	err := watchUntil(ctx, srv.local, resources.Pods, Namespace, client.ListOptions{LabelSelector: "app=" + DSName}, timeout,
		func() error {
			t0 = time.Now()
			for {
				obj, err := srv.local.Get(ctx, resources.DaemonSets, Namespace, DSName)
				if err != nil {
					return fmt.Errorf("bench: get DaemonSet: %w", err)
				}
				ds := obj.(*appsv1.DaemonSet)
				ds.Spec.Template.Spec.Containers[0].Image = ImageV2
				_, err = srv.local.Update(ctx, ds, client.WriteOptions{})
				if apierrors.IsConflict(err) {
					continue
				}
				if err != nil {
					return fmt.Errorf("bench: update DaemonSet: %w", err)
				}
				return nil
			}
		},
		func(ev watch.Event) (bool, error) {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				return false, nil
			}
			if pods[p.Name].updated {
				updated--
			}
			if ev.Type == watch.Deleted {
				delete(pods, p.Name)
			} else {
				st := state{updated: p.Spec.Containers[0].Image == ImageV2 && podReady(p)}
				pods[p.Name] = st
				if st.updated {
					updated++
				}
			}
			return updated == n && len(pods) == n, nil
		})
	if err != nil {
		return 0, err
	}
	return time.Since(t0).Seconds(), nil
}

// detect kills the simulated node victim (its gossip member closed without
// a leave, its agent stopped) and waits until its Node is Ready≠True. It
// returns that time and, when the server has a gossip member, the time until
// that member listed the victim Dead (failure detection alone, before the
// node lifecycle controller's write).
func detect(ctx context.Context, srv *benchServer, fl agentFleet, victim string, timeout time.Duration) (node, member float64, err error) {
	var t0 time.Time
	memberDone := make(chan float64, 1)
	pctx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	err = watchUntil(ctx, srv.local, resources.Nodes, "", client.ListOptions{FieldSelector: "metadata.name=" + victim}, timeout,
		func() error {
			t0 = time.Now()
			if err := fl.kill(ctx, victim); err != nil {
				return err
			}
			if srv.member != nil {
				go func() { memberDone <- waitMemberDead(pctx, srv.member, victim, t0) }()
			} else {
				memberDone <- 0
			}
			return nil
		},
		func(ev watch.Event) (bool, error) {
			node, ok := ev.Object.(*corev1.Node)
			return ok && ev.Type != watch.Deleted && !nodeReady(node), nil
		})
	if err != nil {
		return 0, 0, err
	}
	node = time.Since(t0).Seconds()
	// The member saw it first or sees it soon (the Node went NotReady
	// because of it): give it the same bound.
	select {
	case member = <-memberDone:
	case <-time.After(timeout):
	}
	return node, member, nil
}

// waitMemberDead polls m every 10 ms until it lists name neither alive nor
// suspect, and returns the seconds since t0; 0 if ctx ends first.
func waitMemberDead(ctx context.Context, m *gossip.Member, name string, t0 time.Time) float64 {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		for _, mi := range m.Members() {
			if mi.Name == name && (mi.State == gossip.Dead || mi.State == gossip.Left) {
				return time.Since(t0).Seconds()
			}
		}
		select {
		case <-ctx.Done():
			return 0
		case <-t.C:
		}
	}
}
