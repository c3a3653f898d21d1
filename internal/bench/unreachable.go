package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
	rolloutopts "github.com/everynode/everynode/rollout"
)

// DefaultUnreachableStatusWait is how long the unreachable rollout watches
// the DaemonSet's status, after every reachable node is updated, for it to
// read complete (under Kubernetes' rule it never does).
const DefaultUnreachableStatusWait = 90 * time.Second

// killAtFraction: the nodes are stopped once this fraction of the fleet
// runs the new image ("mid-rollout").
const killAtFraction = 5 // one fifth

// nodeState is one node's pods in the unreachable rollout's watch.
type nodeState struct {
	live    int // pods without a deletionTimestamp
	updated int // of those, Running and Ready with the new image
	newPods int // of those, with the new image (ready or not)
}

// rolloutUnreachable updates the DaemonSet's image (to whichever of
// ImageV1 and ImageV2 it does not run) and, once a fifth of the nodes run
// the new one, stops pct % of the nodes (rounded up) among those the
// rollout has not reached yet — their agents stop as in a crash and the
// membership calls them dead, so they turn Unknown. It measures the time
// until every other node runs one Ready pod of the new image, and until the
// DaemonSet's status reads complete as `kubectl rollout status` checks it
// (waiting at most cfg.UnreachableStatusWait after the first). With
// cfg.UnreachableBlocks the update carries annotation unreachable-blocks
// "true": Kubernetes' rule, for comparison. exclude is never stopped.
func rolloutUnreachable(ctx context.Context, srv *benchServer, fl agentFleet, names []string, exclude string, cfg Config, res *Result, log *slog.Logger) error {
	n := len(names)
	k := (n*cfg.RolloutUnreachable + 99) / 100
	res.UnreachablePct, res.UnreachableBlocks = cfg.RolloutUnreachable, cfg.UnreachableBlocks
	nodes := map[string]*nodeState{}
	pods := map[string]*corev1.Pod{}
	victims := map[string]bool{}
	done, reached := 0, 0 // reachable nodes done; nodes with a new pod
	var t0 time.Time
	image := ImageV2
	isDone := func(name string, s *nodeState) bool {
		return !victims[name] && s != nil && s.live == 1 && s.updated == 1
	}
	recount := func() {
		done = 0
		for name, s := range nodes {
			if isDone(name, s) {
				done++
			}
		}
	}
	apply := func(p *corev1.Pod, sign int) {
		name := p.Spec.NodeName
		s := nodes[name]
		if s == nil {
			s = &nodeState{}
			nodes[name] = s
		}
		wasDone, hadNew := isDone(name, s), s.newPods > 0
		if p.DeletionTimestamp == nil {
			s.live += sign
			if p.Spec.Containers[0].Image == image {
				s.newPods += sign
				if podReady(p) {
					s.updated += sign
				}
			}
		}
		if now := isDone(name, s); now != wasDone {
			if now {
				done++
			} else {
				done--
			}
		}
		if hasNew := s.newPods > 0; hasNew != hadNew {
			if hasNew {
				reached++
			} else {
				reached--
			}
		}
	}
	stop := func() error {
		var cands []string
		for _, name := range names {
			if s := nodes[name]; name != exclude && s != nil && s.live == 1 && s.newPods == 0 {
				cands = append(cands, name)
			}
		}
		slices.Sort(cands)
		if len(cands) < k {
			return fmt.Errorf("bench: only %d nodes left to stop, want %d", len(cands), k)
		}
		var stopped []string
		for i := range k {
			stopped = append(stopped, cands[i*len(cands)/k])
		}
		for _, name := range stopped {
			victims[name] = true
		}
		recount()
		res.UnreachableNodes = k
		res.UnreachableStoppedAtS = time.Since(t0).Seconds()
		log.Info("stopping nodes mid-rollout", "nodes", k, "updated", reached, "after_s", res.UnreachableStoppedAtS)
		for _, name := range stopped {
			if err := fl.kill(ctx, name); err != nil {
				return err
			}
		}
		return nil
	}
	err := watchUntil(ctx, srv.local, resources.Pods, Namespace, client.ListOptions{LabelSelector: "app=" + DSName}, cfg.Timeout,
		func() error {
			for {
				obj, err := srv.local.Get(ctx, resources.DaemonSets, Namespace, DSName)
				if err != nil {
					return fmt.Errorf("bench: get DaemonSet: %w", err)
				}
				ds := obj.(*appsv1.DaemonSet)
				if ds.Spec.Template.Spec.Containers[0].Image == ImageV2 {
					image = ImageV1
				}
				ds.Spec.Template.Spec.Containers[0].Image = image
				if ds.Annotations == nil {
					ds.Annotations = map[string]string{}
				}
				if cfg.UnreachableBlocks {
					ds.Annotations[rolloutopts.UnreachableBlocks] = "true"
				} else {
					delete(ds.Annotations, rolloutopts.UnreachableBlocks)
				}
				t0 = time.Now()
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
			if old := pods[p.Name]; old != nil {
				apply(old, -1)
				delete(pods, p.Name)
			}
			if ev.Type != watch.Deleted {
				pods[p.Name] = p
				apply(p, +1)
			}
			if len(victims) == 0 && !t0.IsZero() && reached*killAtFraction >= n {
				if err := stop(); err != nil {
					return false, err
				}
			}
			return len(victims) > 0 && done == n-len(victims), nil
		})
	res.UnreachableUpdated = done
	switch {
	case err == nil:
		res.RolloutReachableS = time.Since(t0).Seconds()
		log.Info("every reachable node updated", "s", res.RolloutReachableS)
	case cfg.UnreachableBlocks && len(victims) > 0 && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		// Kubernetes' rule with as many nodes away as maxUnavailable: the
		// rollout stalls; say how far it got.
		log.Info("the rollout stalled", "updated", done, "of", n-len(victims))
	default:
		return err
	}

	wait := cfg.UnreachableStatusWait
	if wait <= 0 {
		wait = DefaultUnreachableStatusWait
	}
	deadline := time.Now().Add(wait)
	for {
		obj, err := srv.local.Get(ctx, resources.DaemonSets, Namespace, DSName)
		if err != nil {
			return fmt.Errorf("bench: get DaemonSet: %w", err)
		}
		ds := obj.(*appsv1.DaemonSet)
		st := ds.Status
		res.UnreachableStatus = fmt.Sprintf("desired %d, updated %d, available %d", st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberAvailable)
		if c := rolloutopts.Condition(st, rolloutopts.ConditionProgressing); c != nil {
			res.UnreachableStatus += "; Progressing " + c.Reason
		}
		if ds.Generation <= st.ObservedGeneration && st.UpdatedNumberScheduled >= st.DesiredNumberScheduled && st.NumberAvailable >= st.DesiredNumberScheduled {
			res.RolloutStatusS = time.Since(t0).Seconds()
			log.Info("status complete", "s", res.RolloutStatusS, "status", res.UnreachableStatus)
			return nil
		}
		if time.Now().After(deadline) {
			res.UnreachableStatusWaitS = wait.Seconds()
			log.Info("status never complete", "waited_s", wait.Seconds(), "status", res.UnreachableStatus)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
