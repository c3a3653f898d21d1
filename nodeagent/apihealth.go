package nodeagent

import (
	"context"
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
)

const (
	// apiCallTimeout bounds one API call made by a pod worker, so a server
	// that stopped answering (a cut network, not a refused connection)
	// cannot hold the workers that restart crashed containers.
	apiCallTimeout = 10 * time.Second
	// apiPause is how long pod workers skip their API writes after one
	// failed for want of the server, unless the pod source lists again
	// sooner; the writes are retried afterwards, recomputed from the actual
	// state.
	apiPause = 5 * time.Second
)

// errAPIPaused is returned for a write skipped while the server is
// believed unreachable.
var errAPIPaused = errors.New("nodeagent: the API server is unreachable; write deferred")

// apiHealth remembers that the API server was recently unreachable, so the
// pod workers do not each wait for it in turn. Safe for concurrent use.
type apiHealth struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	until time.Time
}

// paused reports whether writes should be skipped for now.
func (h *apiHealth) paused() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clock.Now().Before(h.until)
}

// observe records the outcome of a call: an error that says the server
// could not be reached pauses the writes for apiPause.
func (h *apiHealth) observe(err error) {
	if !unreachable(err) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.until = h.clock.Now().Add(apiPause)
}

// answered ends a pause: the server answered another call (the pod
// source's list after it reconnects), so the deferred writes need not wait
// out apiPause. The source's list also requeues every pod, which retries
// them at once.
func (h *apiHealth) answered() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.until = time.Time{}
}

// unreachable reports whether err means the server did not answer (as
// opposed to an answer such as NotFound or Conflict).
func unreachable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // transport error: refused, reset, DNS, TLS
	}
	switch status.Status().Code {
	case 502, 503, 504:
		return true
	}
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}
