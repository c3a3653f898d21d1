package images

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Streamer sends an authenticated request and returns a 2xx response
// (client.HTTP.Stream).
type Streamer interface {
	Stream(ctx context.Context, method, path string, q url.Values, header http.Header, body io.Reader) (*http.Response, error)
}

// Loader loads a `docker save` tarball into the node's engine.
type Loader interface {
	LoadImage(ctx context.Context, r io.Reader) error
}

// WrongPlatformError is an image the servers hold, but not for this node's
// platform.
type WrongPlatformError struct {
	Image, Want, Have string
}

func (e *WrongPlatformError) Error() string {
	return fmt.Sprintf("the everynode servers hold %s only for %s, and this node is %s: load an image built for %s (docker save --platform %s IMAGE | everynode image load -)",
		Familiar(e.Image), e.Have, e.Want, e.Want, e.Want)
}

// Fetcher brings images from the servers' store into the node's engine:
// it downloads the blobs of its own platform into Dir (resuming partial
// files with HTTP Range requests, retrying a few times on a lossy link),
// verifies each against its digest, and streams a tarball to Loader.
type Fetcher struct {
	API    Streamer
	Loader Loader
	// Dir holds blobs being downloaded; emptied after each load.
	Dir string
	// OS, Arch and Variant are the node's platform.
	OS, Arch, Variant string
	Log               *slog.Logger
	// Attempts per blob (0: 5); a digest mismatch or a cut transfer counts.
	Attempts int
	// Peers, when PeerToken is set, fetches blobs from the nodes the servers
	// name as holders (PeerHandler) before asking the servers. Self is this
	// node's name, never asked.
	Peers     *http.Client
	PeerToken string
	Self      string
}

// Result is what one Fetch did.
type Result struct {
	Platform Platform
	// Downloaded is the bytes received (less than Platform.Size() when
	// blobs were kept from an earlier fetch), FromPeers the part of it
	// other nodes sent; the servers sent the rest.
	Downloaded, FromPeers int64
}

// Fetch loads ref from the servers into the engine. An image the servers
// do not hold is ErrNotFound; one not built for this node's platform is a
// *WrongPlatformError. progress (may be nil) is told the bytes done of the
// total after every blob.
func (f *Fetcher) Fetch(ctx context.Context, ref string, progress func(done, total int64)) (Result, error) {
	name, err := Normalize(ref)
	if err != nil {
		return Result{}, err
	}
	im, err := f.image(ctx, name)
	if err != nil {
		return Result{}, err
	}
	want := f.OS + "/" + f.Arch
	if f.Variant != "" {
		want += "/" + f.Variant
	}
	p, ok := im.Match(f.OS, f.Arch, f.Variant)
	if !ok {
		return Result{}, &WrongPlatformError{Image: name, Want: want, Have: im.PlatformList()}
	}
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return Result{}, fmt.Errorf("images: cannot create %s for downloads: %w", f.Dir, err)
	}
	res := Result{Platform: p}
	blobs := append([]Descriptor{p.Config}, p.Layers...)
	var done int64
	for _, d := range blobs {
		if peers := f.fromPeers(ctx, im.Holders, d); peers >= 0 {
			res.Downloaded += peers
			res.FromPeers += peers
		} else {
			n, err := f.blob(ctx, d)
			res.Downloaded += n
			if err != nil {
				return res, err
			}
		}
		done += d.Size
		if progress != nil {
			progress(done, p.Size())
		}
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(f.writeTarball(pw, name, p)) }()
	err = f.Loader.LoadImage(ctx, pr)
	pr.CloseWithError(errors.New("load ended"))
	if err != nil {
		return res, fmt.Errorf("images: the engine refused %s: %w", Familiar(name), err)
	}
	// The verified blobs stay in Dir: PeerHandler serves them to peers.
	return res, nil
}

func (f *Fetcher) image(ctx context.Context, name string) (Image, error) {
	resp, err := f.API.Stream(ctx, http.MethodGet, ImagesPath, url.Values{"name": {name}}, nil, nil)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return Image{}, fmt.Errorf("image %s: %w", Familiar(name), ErrNotFound)
		}
		return Image{}, fmt.Errorf("images: ask the servers for %s: %w", Familiar(name), err)
	}
	defer resp.Body.Close()
	var im Image
	if err := json.NewDecoder(resp.Body).Decode(&im); err != nil {
		return Image{}, fmt.Errorf("images: the servers' record of %s: %w", Familiar(name), err)
	}
	return im, nil
}

func (f *Fetcher) path(d string) string {
	return blobFile(f.Dir, d)
}

func blobFile(dir, d string) string { return filepath.Join(dir, "sha256-"+d[len("sha256:"):]) }

// blob makes the blob d complete and verified in Dir and returns the bytes
// it received.
func (f *Fetcher) blob(ctx context.Context, d Descriptor) (int64, error) {
	get := func(ctx context.Context, h http.Header) (*http.Response, error) {
		return f.API.Stream(ctx, http.MethodGet, BlobsPath+d.Digest, nil, h, nil)
	}
	if !isDigest(d.Digest) {
		return 0, fmt.Errorf("images: the servers named a bad digest %q", d.Digest)
	}
	attempts := f.Attempts
	if attempts <= 0 {
		attempts = 5
	}
	var got int64
	var last error
	for i := range attempts {
		if i > 0 {
			select {
			case <-ctx.Done():
				return got, ctx.Err()
			case <-time.After(time.Duration(i) * 500 * time.Millisecond):
			}
		}
		n, err := f.download(ctx, d, get)
		got += n
		if err == nil {
			return got, nil
		}
		last = err
		if ctx.Err() != nil {
			return got, err
		}
		f.log().Warn("image blob transfer failed, resuming", "digest", d.Digest, "attempt", i+1, "err", err)
	}
	return got, last
}

// download fetches what is missing of d into its .part file (a Range
// request from the partial file's size) through get, then checks the whole
// file's digest and moves it in place; a mismatch empties the file so the
// next attempt starts over. A blob already in place is not fetched again.
func (f *Fetcher) download(ctx context.Context, d Descriptor, get func(context.Context, http.Header) (*http.Response, error)) (int64, error) {
	p := f.path(d.Digest)
	if fi, err := os.Stat(p); err == nil && fi.Size() == d.Size {
		return 0, nil // verified when it was moved in place
	}
	part := p + ".part"
	file, err := os.OpenFile(part, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return 0, fmt.Errorf("images: %w", err)
	}
	defer file.Close()
	have, err := file.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	var n int64
	if have > d.Size {
		file.Truncate(0)
		file.Seek(0, io.SeekStart)
		have = 0
	}
	if have < d.Size {
		h := http.Header{}
		if have > 0 {
			h.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
		}
		resp, err := get(ctx, h)
		if err != nil {
			return 0, fmt.Errorf("images: fetch blob %s: %w", d.Digest, err)
		}
		if have > 0 && resp.StatusCode != http.StatusPartialContent {
			file.Truncate(0) // sent whole
			file.Seek(0, io.SeekStart)
		}
		n, err = io.Copy(file, io.LimitReader(resp.Body, d.Size+1))
		resp.Body.Close()
		if err != nil {
			return n, fmt.Errorf("images: blob %s cut after %d bytes: %w", d.Digest, n, err)
		}
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return n, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, file); err != nil {
		return n, err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != d.Digest {
		file.Truncate(0)
		return n, fmt.Errorf("images: blob %s arrived corrupt (digest mismatch: got %s); it is fetched again", d.Digest, got)
	}
	if err := os.Rename(part, p); err != nil {
		return n, fmt.Errorf("images: %w", err)
	}
	return n, nil
}

// fromPeers tries to get d from the holders, once each; it returns the
// bytes received, or -1 when no peer delivered it verified (a partial
// transfer stays in its .part file for the servers to complete).
func (f *Fetcher) fromPeers(ctx context.Context, holders []Holder, d Descriptor) int64 {
	if f.PeerToken == "" || f.Peers == nil || !isDigest(d.Digest) {
		return -1
	}
	for _, h := range holders {
		if h.Node == f.Self || h.URL == "" {
			continue
		}
		get := func(ctx context.Context, hdr http.Header) (*http.Response, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL+BlobsPath+d.Digest, nil)
			if err != nil {
				return nil, err
			}
			for k, v := range hdr {
				req.Header[k] = v
			}
			req.Header.Set("Authorization", "Bearer "+f.PeerToken)
			resp, err := f.Peers.Do(req)
			if err != nil {
				return nil, err
			}
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
				resp.Body.Close()
				return nil, fmt.Errorf("peer %s answered %s", h.Node, resp.Status)
			}
			return resp, nil
		}
		n, err := f.download(ctx, d, get)
		if err == nil {
			return n
		}
		f.log().Debug("peer did not deliver a blob", "peer", h.Node, "digest", d.Digest, "err", err)
	}
	return -1
}

// writeTarball writes Docker's manifest.json layout for p, named name,
// from the verified blobs in Dir.
func (f *Fetcher) writeTarball(w io.Writer, name string, p Platform) error {
	tw := tar.NewWriter(w)
	hexOf := func(d string) string { return d[len("sha256:"):] }
	m := dockerManifest{Config: hexOf(p.Config.Digest) + ".json", RepoTags: []string{Familiar(name)}}
	for _, l := range p.Layers {
		m.Layers = append(m.Layers, hexOf(l.Digest)+"/layer.tar")
	}
	data, err := json.Marshal([]dockerManifest{m})
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Size: int64(len(data))}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	files := append([]string{m.Config}, m.Layers...)
	for i, d := range append([]Descriptor{p.Config}, p.Layers...) {
		if err := copyInto(tw, files[i], f.path(d.Digest), d.Size); err != nil {
			return err
		}
	}
	return tw.Close()
}

func copyInto(tw *tar.Writer, name, path string, size int64) error {
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size}); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}

func (f *Fetcher) log() *slog.Logger {
	if f.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return f.Log
}
