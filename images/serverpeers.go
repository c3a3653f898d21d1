package images

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// ServerBlobsPath is the prefix under which a server serves the blobs it
// holds to the other servers of its cluster (ServerBlobsPath +
// "sha256:<hex>"): only what is on its own disk, never fetched on demand,
// and only to a peer presenting a server certificate (the server checks
// it before ServerBlobHandler runs).
const ServerBlobsPath = "/everynode/v1/server-blobs/"

// ServerBlobHandler serves s's own blobs under ServerBlobsPath; the caller
// authenticates the peer.
func ServerBlobHandler(s *Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		d, _ := strings.CutPrefix(req.URL.Path, ServerBlobsPath)
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		f, err := s.OpenBlob(d)
		if err != nil {
			http.NotFound(w, req)
			return
		}
		serveBlobFile(w, req, d, f)
	})
}

// ServerPeers fetches the blobs a server's store lacks from the other
// servers of its cluster: a blob a stored image names (its record is
// shared through the Catalog) but that was loaded on another server. It
// asks the live servers that announced the blob (then any other live
// server), over Client (mutual TLS with the servers' peer certificate),
// verifies size and digest while storing (Store.PutBlob), and fetches each
// blob once however many requests ask for it at the same time.
type ServerPeers struct {
	Store  *Store
	Client *http.Client
	Log    *slog.Logger
	// Timeout bounds one blob's fetch from one server; 0: 10 min.
	Timeout time.Duration
	// Ctx ends every transfer when it ends (the server stops); nil:
	// context.Background(). Set it before the first Fetch.
	Ctx context.Context

	mu       sync.Mutex
	inflight map[string]*blobFetch
}

type blobFetch struct {
	done    chan struct{}
	err     error
	waiters int // callers sharing it; guarded by ServerPeers.mu
}

// waiting returns how many callers wait for blob d's transfer now.
func (p *ServerPeers) waiting(d string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.inflight[d]; ok {
		return f.waiters
	}
	return 0
}

// ErrNoServerHasBlob is returned when no live server could give a blob.
var ErrNoServerHasBlob = errors.New("no live server holds the blob")

// Fetch makes sure the store holds blob d (size bytes), fetching it from
// another server if not. Concurrent calls for the same digest share one
// transfer; a caller whose ctx ends stops waiting, the transfer goes on.
func (p *ServerPeers) Fetch(ctx context.Context, d string, size int64) error {
	p.mu.Lock()
	if p.inflight == nil {
		p.inflight = map[string]*blobFetch{}
	}
	f, ok := p.inflight[d]
	if !ok {
		f = &blobFetch{done: make(chan struct{})}
		p.inflight[d] = f
		go func() {
			f.err = p.fetch(d, size)
			p.mu.Lock()
			delete(p.inflight, d)
			p.mu.Unlock()
			close(f.done)
		}()
	}
	f.waiters++
	p.mu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *ServerPeers) log() *slog.Logger {
	if p.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Log
}

// fetch tries the servers that announced d first, then the others.
func (p *ServerPeers) fetch(d string, size int64) error {
	if f, err := p.Store.OpenBlob(d); err == nil { // arrived meanwhile
		f.Close()
		return nil
	}
	ctx, cancel := catalogCtx()
	holders, err := p.Store.Holders(ctx)
	cancel()
	if err != nil {
		return fmt.Errorf("images: which servers hold blob %s: %w", d, err)
	}
	var first, rest []ServerBlobs
	for _, h := range holders {
		switch {
		case h.Self:
		case h.Has(d):
			first = append(first, h)
		default:
			rest = append(rest, h)
		}
	}
	var errs []error
	for _, h := range append(first, rest...) {
		err := p.fetchFrom(h, d, size)
		if err == nil {
			p.log().Info("image blob fetched from another server", "blob", d, "bytes", size, "server", h.Name)
			return nil
		}
		p.log().Warn("cannot fetch an image blob from another server; trying the next", "blob", d, "server", h.Name, "err", err)
		errs = append(errs, fmt.Errorf("%s: %w", h.Name, err))
	}
	if len(errs) == 0 {
		return fmt.Errorf("blob %s: %w (no other server is live)", d, ErrNoServerHasBlob)
	}
	return fmt.Errorf("blob %s: %w: %w", d, ErrNoServerHasBlob, errors.Join(errs...))
}

func (p *ServerPeers) fetchFrom(h ServerBlobs, d string, size int64) error {
	timeout := p.Timeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	base := p.Ctx
	if base == nil {
		base = context.Background()
	}
	ctx, cancel := context.WithTimeout(base, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(h.URL, "/")+ServerBlobsPath+d, nil)
	if err != nil {
		return err
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return p.Store.PutBlob(d, size, resp.Body)
}

// openOrFetch opens blob d, fetching it from another server first when the
// store lacks it but a stored image names it.
func (p *ServerPeers) openOrFetch(ctx context.Context, d string) (*os.File, error) {
	f, err := p.Store.OpenBlob(d)
	if !errors.Is(err, ErrNotFound) {
		return f, err
	}
	desc, named, derr := p.Store.Descriptor(d)
	if derr != nil || !named {
		return nil, err
	}
	if ferr := p.Fetch(ctx, d, desc.Size); ferr != nil {
		return nil, ferr
	}
	return p.Store.OpenBlob(d)
}
