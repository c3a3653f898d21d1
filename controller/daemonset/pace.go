package daemonset

import (
	"sync"
	"time"
)

// StatusOnlyInterval is the least time between two status-only syncs of one
// DaemonSet: syncs that find the controller still waiting to observe its own
// creates or deletes, so that all they can do is recount the status
// (docs/controller-rules.md §2.2 step 6). Such a sync costs a pass over
// every node and pod of the DaemonSet, and while a large DaemonSet converges
// or rolls out its pods' status changes would otherwise run them back to
// back; the sync that observes the last create or delete is not paced.
const StatusOnlyInterval = time.Second

// pacer remembers when each DaemonSet key last had a status-only sync.
type pacer struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func newPacer() *pacer { return &pacer{last: map[string]time.Time{}} }

// wait returns how long key must wait for its next status-only sync at now;
// when that is zero it records now as key's last.
func (p *pacer) wait(key string, now time.Time, every time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if last, ok := p.last[key]; ok {
		if d := last.Add(every).Sub(now); d > 0 {
			return d
		}
	}
	p.last[key] = now
	return 0
}

// forget drops key (its DaemonSet is gone).
func (p *pacer) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, key)
}
