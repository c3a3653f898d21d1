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

// wait returns how long key must still wait at now for its next status-only
// sync, every after its last; zero when it may run.
func (p *pacer) wait(key string, now time.Time, every time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if last, ok := p.last[key]; ok {
		return max(last.Add(every).Sub(now), 0)
	}
	return 0
}

// ran records a status-only sync of key at now.
func (p *pacer) ran(key string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last[key] = now
}

// forget drops key (its DaemonSet is gone, or another took its name).
func (p *pacer) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, key)
}
