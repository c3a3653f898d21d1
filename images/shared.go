package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Catalog is what several servers of one cluster share about their image
// stores (docs/edge.md §4, "Several servers"): the image records, so that
// an image loaded on one server is known to all, and which server holds
// which blobs, so that a server lacking a blob knows whom to fetch it from.
// The server keeps it in etcd. Methods must be safe for concurrent use.
type Catalog interface {
	// PutRecord stores the record of image name (JSON of Image).
	PutRecord(ctx context.Context, name string, data []byte) error
	// GetRecord returns the record of name; ErrNotFound when absent.
	GetRecord(ctx context.Context, name string) ([]byte, error)
	// ListRecords returns every record.
	ListRecords(ctx context.Context) ([][]byte, error)
	// DeleteRecord removes the record of name; ErrNotFound when absent.
	DeleteRecord(ctx context.Context, name string) error
	// SetBlobs announces the digests this server holds now, replacing what
	// it announced before.
	SetBlobs(ctx context.Context, digests []string) error
	// BlobHolders returns the live servers (this one included) and the
	// digests each announced.
	BlobHolders(ctx context.Context) ([]ServerBlobs, error)
}

// ServerBlobs is one server's announced blobs.
type ServerBlobs struct {
	Name    string   // the server's name
	URL     string   // its API URL (https://address:port)
	Self    bool     // this server
	Digests []string // sorted
}

// Has reports whether the server announced digest d.
func (sb ServerBlobs) Has(d string) bool {
	_, ok := slices.BinarySearch(sb.Digests, d)
	return ok
}

// OpenShared returns the store in dir with its records in c rather than
// in dir (records already in dir, from before the server joined a
// cluster, are copied to c when c lacks them), and announces the blobs dir
// holds.
func OpenShared(ctx context.Context, dir string, c Catalog) (*Store, error) {
	s, err := Open(dir)
	if err != nil {
		return nil, err
	}
	local, err := s.List()
	if err != nil {
		return nil, err
	}
	s.catalog = c
	for _, im := range local {
		if _, err := c.GetRecord(ctx, im.Name); errors.Is(err, ErrNotFound) {
			data, err := json.Marshal(im)
			if err != nil {
				return nil, err
			}
			if err := c.PutRecord(ctx, im.Name, data); err != nil {
				return nil, fmt.Errorf("images: share the record of %s: %w", im.Name, err)
			}
		} else if err != nil {
			return nil, fmt.Errorf("images: read the shared record of %s: %w", im.Name, err)
		}
	}
	if err := s.announce(); err != nil {
		return nil, err
	}
	return s, nil
}

// catalogCtx bounds one catalog call made from a Store method (which takes
// no context).
func catalogCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), catalogTimeout)
}

// blobDigests lists the digests of the blobs on disk, sorted.
func (s *Store) blobDigests() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "blobs", "sha256"))
	if err != nil {
		return nil, fmt.Errorf("images: list blobs: %w", err)
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, "sha256:"+e.Name())
	}
	slices.Sort(out)
	return out, nil
}

// announce tells the catalog which blobs this store holds.
func (s *Store) announce() error {
	if s.catalog == nil {
		return nil
	}
	ds, err := s.blobDigests()
	if err != nil {
		return err
	}
	ctx, cancel := catalogCtx()
	defer cancel()
	if err := s.catalog.SetBlobs(ctx, ds); err != nil {
		return fmt.Errorf("images: announce this server's blobs: %w", err)
	}
	return nil
}

// Holders returns the live servers and the blobs each holds; nil when the
// store is not shared.
func (s *Store) Holders(ctx context.Context) ([]ServerBlobs, error) {
	if s.catalog == nil {
		return nil, nil
	}
	return s.catalog.BlobHolders(ctx)
}

// Descriptor returns the descriptor of blob d if a stored image names it.
func (s *Store) Descriptor(d string) (Descriptor, bool, error) {
	ims, err := s.List()
	if err != nil {
		return Descriptor{}, false, err
	}
	for _, im := range ims {
		for _, p := range im.Platforms {
			for _, x := range append([]Descriptor{p.Config}, p.Layers...) {
				if x.Digest == d {
					return x, true, nil
				}
			}
		}
	}
	return Descriptor{}, false, nil
}

// TransferError is a blob that arrived wrong: cut short, too long, or not
// matching its digest. Nothing of it is kept.
type TransferError struct {
	Digest string
	Reason string
}

func (e *TransferError) Error() string {
	return fmt.Sprintf("images: blob %s %s; nothing of it was kept", e.Digest, e.Reason)
}

// PutBlob stores blob d of size bytes read from r: hashed while it is
// written to a temporary file, then renamed into place only if exactly
// size bytes arrived and they match d. Any failure (a truncated or
// oversized transfer, a digest mismatch, a read error) leaves nothing
// behind. Storing a blob the store holds already is a no-op.
func (s *Store) PutBlob(d string, size int64, r io.Reader) error {
	dst, err := s.BlobPath(d)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "blob-")
	if err != nil {
		return fmt.Errorf("images: store blob %s: %w", d, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, size+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &TransferError{Digest: d, Reason: fmt.Sprintf("was cut short after %d of %d bytes (%v)", n, size, err)}
	}
	if err := checkBlob(d, size, n, h); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("images: store blob %s: %w", d, err)
	}
	return s.announce()
}

func checkBlob(d string, size, n int64, h hash.Hash) error {
	switch {
	case n < size:
		return &TransferError{Digest: d, Reason: fmt.Sprintf("was truncated: %d of %d bytes arrived", n, size)}
	case n > size:
		return &TransferError{Digest: d, Reason: fmt.Sprintf("is longer than the %d bytes its image names", size)}
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != d {
		return &TransferError{Digest: d, Reason: "arrived corrupt (digest mismatch: got " + strings.TrimPrefix(got, "sha256:")[:12] + "…)"}
	}
	return nil
}
