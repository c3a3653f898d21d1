package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrNotFound is returned for an image name or blob the store does not hold.
var ErrNotFound = errors.New("not found")

// Store keeps images on disk under one directory: blobs/sha256/<hex>,
// records/<sha256 of the name>.json, and tmp/ for loads in progress. The
// methods are safe for concurrent use.
type Store struct {
	dir string
	now func() time.Time
	mu  sync.Mutex // orders record writes and blob garbage collection
	// catalog, when set (OpenShared), holds the records instead of
	// records/ and hears which blobs this store holds.
	catalog Catalog
}

// catalogTimeout bounds one call to the Catalog.
const catalogTimeout = 10 * time.Second

// Open returns the store in dir, creating its folders (mode 0700).
func Open(dir string) (*Store, error) {
	for _, d := range []string{"blobs/sha256", "records", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("images: cannot create the image store in %s: %w", dir, err)
		}
	}
	// A load cut short by a crash leaves its staging folder; nothing else
	// reads tmp/.
	if ents, err := os.ReadDir(filepath.Join(dir, "tmp")); err == nil {
		for _, e := range ents {
			os.RemoveAll(filepath.Join(dir, "tmp", e.Name()))
		}
	}
	return &Store{dir: dir, now: time.Now}, nil
}

// BlobPath is where the blob with digest d ("sha256:<hex>") lives; it
// errors for anything but a well-formed sha256 digest.
func (s *Store) BlobPath(d string) (string, error) {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%q is not a sha256 digest", d)
	}
	return filepath.Join(s.dir, "blobs", "sha256", h), nil
}

// OpenBlob opens the blob with digest d; ErrNotFound when absent.
func (s *Store) OpenBlob(d string) (*os.File, error) {
	p, err := s.BlobPath(d)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("blob %s: %w", d, ErrNotFound)
	}
	return f, err
}

func (s *Store) recordPath(name string) string {
	sum := sha256.Sum256([]byte(name))
	return filepath.Join(s.dir, "records", hex.EncodeToString(sum[:])+".json")
}

// Get returns the image named ref; ErrNotFound when absent.
func (s *Store) Get(ref string) (Image, error) {
	name, err := Normalize(ref)
	if err != nil {
		return Image{}, err
	}
	var data []byte
	if s.catalog != nil {
		ctx, cancel := catalogCtx()
		data, err = s.catalog.GetRecord(ctx, name)
		cancel()
	} else {
		data, err = os.ReadFile(s.recordPath(name))
	}
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, ErrNotFound) {
		return Image{}, fmt.Errorf("image %s: %w", Familiar(name), ErrNotFound)
	}
	if err != nil {
		return Image{}, fmt.Errorf("images: read the record of %s: %w", name, err)
	}
	var im Image
	if err := json.Unmarshal(data, &im); err != nil {
		return Image{}, fmt.Errorf("images: the record of %s is damaged (remove it with `everynode image rm` and load it again): %w", name, err)
	}
	return im, nil
}

// List returns every stored image, by name.
func (s *Store) List() ([]Image, error) {
	recs, err := s.records()
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, data := range recs {
		var im Image
		if json.Unmarshal(data, &im) == nil {
			out = append(out, im)
		}
	}
	slices.SortFunc(out, func(a, b Image) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// records returns every record's JSON, from the catalog or records/.
func (s *Store) records() ([][]byte, error) {
	if s.catalog != nil {
		ctx, cancel := catalogCtx()
		defer cancel()
		recs, err := s.catalog.ListRecords(ctx)
		if err != nil {
			return nil, fmt.Errorf("images: list the shared records: %w", err)
		}
		return recs, nil
	}
	ents, err := os.ReadDir(filepath.Join(s.dir, "records"))
	if err != nil {
		return nil, fmt.Errorf("images: list records: %w", err)
	}
	var out [][]byte
	for _, e := range ents {
		if data, err := os.ReadFile(filepath.Join(s.dir, "records", e.Name())); err == nil { // else removed meanwhile
			out = append(out, data)
		}
	}
	return out, nil
}

// putRecord writes the record of name, to the catalog or records/.
func (s *Store) putRecord(name string, data []byte) error {
	if s.catalog != nil {
		ctx, cancel := catalogCtx()
		defer cancel()
		return s.catalog.PutRecord(ctx, name, data)
	}
	return writeAtomic(s.recordPath(name), data)
}

// Remove deletes the image named ref and the blobs no other image uses;
// ErrNotFound when absent.
func (s *Store) Remove(ref string) error {
	name, err := Normalize(ref)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.catalog != nil {
		ctx, cancel := catalogCtx()
		err = s.catalog.DeleteRecord(ctx, name)
		cancel()
	} else {
		err = os.Remove(s.recordPath(name))
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, ErrNotFound) {
			return fmt.Errorf("image %s: %w", Familiar(name), ErrNotFound)
		}
		return fmt.Errorf("images: remove %s: %w", name, err)
	}
	return s.collect()
}

// collect removes the blobs no record names. Callers hold mu.
func (s *Store) collect() error {
	ims, err := s.List()
	if err != nil {
		return err
	}
	used := map[string]bool{}
	for _, im := range ims {
		for _, p := range im.Platforms {
			used[p.Config.Digest] = true
			for _, l := range p.Layers {
				used[l.Digest] = true
			}
		}
	}
	dir := filepath.Join(s.dir, "blobs", "sha256")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("images: list blobs: %w", err)
	}
	for _, e := range ents {
		if !used["sha256:"+e.Name()] {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return s.announce()
}

// commit moves the staged blobs of ims into place and writes their
// records, replacing images of the same names.
func (s *Store) commit(st *staging, ims []Image) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, im := range ims {
		for _, p := range im.Platforms {
			for _, d := range append([]Descriptor{p.Config}, p.Layers...) {
				if err := s.place(st, d.Digest); err != nil {
					return err
				}
			}
		}
	}
	for _, im := range ims {
		im.Loaded = s.now().UTC().Truncate(time.Second)
		data, err := json.Marshal(im)
		if err != nil {
			return err
		}
		if err := s.putRecord(im.Name, data); err != nil {
			return fmt.Errorf("images: write the record of %s: %w", im.Name, err)
		}
	}
	return s.collect()
}

// place moves the staged file holding digest d to its blob path, unless
// the store has it already.
func (s *Store) place(st *staging, d string) error {
	dst, err := s.BlobPath(d)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	src, ok := st.byDigest[d]
	if !ok {
		return fmt.Errorf("images: blob %s is named by the tarball but not in it: the tarball is incomplete; save it again with docker save", d)
	}
	if err := os.Rename(src, dst); err != nil {
		return fmt.Errorf("images: store blob %s: %w", d, err)
	}
	return nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// staging is one load's unpacked tarball: every regular file, stored under
// a sequence number, with its sha256.
type staging struct {
	dir      string
	byPath   map[string]stagedFile
	byDigest map[string]string // digest → file
}

type stagedFile struct {
	file   string
	digest string
	size   int64
}

func (st *staging) read(path string) ([]byte, error) {
	f, ok := st.byPath[path]
	if !ok {
		return nil, fmt.Errorf("%s is missing", path)
	}
	return os.ReadFile(f.file)
}

// stageFile copies r into the staging folder, hashing it on the way.
func (st *staging) stageFile(path string, r io.Reader) error {
	name := filepath.Join(st.dir, fmt.Sprintf("%06d", len(st.byPath)))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	d := "sha256:" + hex.EncodeToString(h.Sum(nil))
	st.byPath[path] = stagedFile{file: name, digest: d, size: n}
	st.byDigest[d] = name
	return nil
}
