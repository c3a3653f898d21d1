// Package exepages gives back the pages of the running executable that
// start-up touched and steady work does not use.
//
// A Go program maps its executable's code and read-only data (for the
// server, 73 MB). The kernel maps file pages in windows around each page
// fault, and start-up runs hundreds of package initializers spread over the
// whole file, so a server that has only started holds most of its
// executable as resident memory, counted in its RSS though little of it
// runs again. Release unmaps those read-only mappings (never one that holds
// pages the process changed, such as data the loader relocated): the pages
// stay in the kernel's page cache (reclaimable, shared, not counted in the
// process's RSS) and the ones the program runs again map back at their
// next use, without reading the disk while the cache keeps them.
package exepages

import (
	"context"
	"log/slog"
	"time"
)

// Settle is how long after a program is ready ReleaseStartup releases the
// pages a second time: the first lists and syncs, which touch code nothing
// runs again, are over by then.
const Settle = 5 * time.Second

// ReleaseStartup releases the executable's pages now, when the program has
// started, and again settle later, unless ctx ends first; it returns after
// the second release or when ctx ends. Failing to release costs memory, not
// correctness: it is logged.
func ReleaseStartup(ctx context.Context, settle time.Duration, log *slog.Logger) {
	release := func() {
		var before int64
		if log.Enabled(ctx, slog.LevelDebug) {
			before, _ = Resident()
		}
		if _, err := Release(); err != nil {
			log.Warn("cannot release the executable's start-up pages", "err", err)
			return
		}
		log.Debug("released the executable's start-up pages", "residentMiB", before>>20)
	}
	release()
	t := time.NewTimer(settle)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
		release()
	}
}
