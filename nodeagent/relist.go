package nodeagent

import (
	"context"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// relistLoop lists the node's containers every RelistPeriod, and after
// every full list of desired pods, until ctx ends.
func (a *Agent) relistLoop(ctx context.Context) {
	t := a.clock.NewTicker(a.cfg.RelistPeriod)
	defer t.Stop()
	for {
		a.relist(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-a.relistNow:
		}
	}
}

// relist is kubelet's PLEG in miniature: it enqueues every pod whose
// containers changed since the last relist (an exit, a removal), every pod
// UID with containers but no desired pod (the sweep: its sync removes them),
// and removes containers of this node that name no pod at all.
func (a *Agent) relist(ctx context.Context) {
	list, err := a.rt.ListContainers(ctx, a.nodeLabels)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("relist failed", "err", err)
		}
		return
	}
	synced := a.pods.synced()
	byPod := make(map[types.UID][]string)
	for _, c := range list {
		uid := types.UID(c.Labels[runtime.LabelPodUID])
		if uid == "" {
			if synced {
				a.log.Info("removing stray container without pod label", "id", c.ID)
				if err := a.stopAndRemove(ctx, runtime.ContainerStatus{ID: c.ID, State: c.State}, 0); err != nil {
					a.log.Warn("remove stray container failed", "id", c.ID, "err", err)
				}
			}
			continue
		}
		byPod[uid] = append(byPod[uid], c.ID+"="+string(c.State))
	}
	a.relistMu.Lock()
	defer a.relistMu.Unlock()
	seen := make(map[types.UID]string, len(byPod))
	for uid, entries := range byPod {
		slices.Sort(entries)
		fp := strings.Join(entries, ",")
		seen[uid] = fp
		if a.lastSeen[uid] != fp || (synced && !a.pods.desires(uid)) {
			a.enqueue(uid)
		}
	}
	for uid := range a.lastSeen {
		if _, ok := seen[uid]; !ok {
			a.enqueue(uid)
		}
	}
	a.lastSeen = seen
}
