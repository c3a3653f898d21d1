// Package ctxtime waits for a duration or a context, whichever ends first.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends, and reports whether d passed with ctx
// still live. Its timer is stopped when ctx ends first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}
