package images

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/everynode/everynode/internal/testkit"
)

// memCatalog is a Catalog in memory, shared by the stores of several
// "servers" (views with their own self).
type memCatalog struct {
	mu      sync.Mutex
	records map[string][]byte
	urls    map[string]string   // server → URL
	blobs   map[string][]string // server → digests
}

type catalogView struct {
	c    *memCatalog
	self string
}

func newMemCatalog() *memCatalog {
	return &memCatalog{records: map[string][]byte{}, urls: map[string]string{}, blobs: map[string][]string{}}
}

func (v catalogView) PutRecord(_ context.Context, name string, data []byte) error {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	v.c.records[name] = data
	return nil
}

func (v catalogView) GetRecord(_ context.Context, name string) ([]byte, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	d, ok := v.c.records[name]
	if !ok {
		return nil, ErrNotFound
	}
	return d, nil
}

func (v catalogView) ListRecords(context.Context) ([][]byte, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	var out [][]byte
	for _, d := range v.c.records {
		out = append(out, d)
	}
	return out, nil
}

func (v catalogView) DeleteRecord(_ context.Context, name string) error {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	if _, ok := v.c.records[name]; !ok {
		return ErrNotFound
	}
	delete(v.c.records, name)
	return nil
}

func (v catalogView) SetBlobs(_ context.Context, ds []string) error {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	v.c.blobs[v.self] = slices.Clone(ds)
	return nil
}

func (v catalogView) BlobHolders(context.Context) ([]ServerBlobs, error) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	var out []ServerBlobs
	for name, u := range v.c.urls {
		out = append(out, ServerBlobs{Name: name, URL: u, Self: name == v.self, Digests: v.c.blobs[name]})
	}
	slices.SortFunc(out, func(a, b ServerBlobs) int { return cmpString(a.Name, b.Name) })
	return out, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func openShared(t *testing.T, c *memCatalog, name string) *Store {
	t.Helper()
	s, err := OpenShared(context.Background(), t.TempDir(), catalogView{c: c, self: name})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// assertNothingKept checks that blob d is not in s and nothing is left
// in its staging folder.
func assertNothingKept(t *testing.T, s *Store, d string) {
	t.Helper()
	if f, err := s.OpenBlob(d); err == nil {
		f.Close()
		t.Errorf("blob %s was kept", d)
	}
	ents, err := os.ReadDir(filepath.Join(s.dir, "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("tmp/ holds %d leftovers", len(ents))
	}
}

// cutReader returns n bytes of data, then err.
type cutReader struct {
	data []byte
	err  error
}

func (r *cutReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestPutBlobRefusesBadTransfers(t *testing.T) {
	s := openStore(t)
	good := bytes.Repeat([]byte("layer bytes "), 1000)
	d := digestOf(good)
	corrupt := slices.Clone(good)
	corrupt[len(corrupt)/2] ^= 1
	for _, tc := range []struct {
		name string
		r    io.Reader
	}{
		{"digest mismatch", bytes.NewReader(corrupt)},
		{"truncated, clean EOF", bytes.NewReader(good[:len(good)/2])},
		{"truncated, connection cut", &cutReader{data: good[:len(good)/2], err: io.ErrUnexpectedEOF}},
		{"too long", io.MultiReader(bytes.NewReader(good), bytes.NewReader([]byte("more")))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.PutBlob(d, int64(len(good)), tc.r)
			var te *TransferError
			if !errors.As(err, &te) {
				t.Fatalf("PutBlob = %v, want a TransferError", err)
			}
			assertNothingKept(t, s, d)
		})
	}
	if err := s.PutBlob(d, int64(len(good)), bytes.NewReader(good)); err != nil {
		t.Fatal(err)
	}
	f, err := s.OpenBlob(d)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, _ := io.ReadAll(f); !bytes.Equal(got, good) {
		t.Error("stored blob differs")
	}
}

// blobServer serves a store's blobs as a server does to its peers,
// counting requests per digest; corrupt flips a byte of every answer.
type blobServer struct {
	*httptest.Server
	mu      sync.Mutex
	served  map[string]int
	gate    chan struct{} // when set, each answer waits for it to close
	corrupt bool
}

func newBlobServer(t *testing.T, s *Store) *blobServer {
	bs := &blobServer{served: map[string]int{}}
	inner := ServerBlobHandler(s)
	bs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		bs.mu.Lock()
		bs.served[req.URL.Path]++
		gate, corrupt := bs.gate, bs.corrupt
		bs.mu.Unlock()
		if gate != nil {
			<-gate
		}
		if !corrupt {
			inner.ServeHTTP(w, req)
			return
		}
		rec := httptest.NewRecorder()
		inner.ServeHTTP(rec, req)
		b := rec.Body.Bytes()
		if len(b) > 0 {
			b[len(b)/2] ^= 1
		}
		w.WriteHeader(rec.Code)
		w.Write(b)
	}))
	t.Cleanup(bs.Close)
	return bs
}

func (bs *blobServer) count(d string) int {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return bs.served[ServerBlobsPath+d]
}

// TestServerPeersFetchOnce: an image loaded on server a is known to
// server b (shared records) and its blobs are served by b, which fetches
// each from a once however many requests ask at the same time; the list
// says which server holds what.
func TestServerPeersFetchOnce(t *testing.T) {
	c := newMemCatalog()
	a, b := openShared(t, c, "a"), openShared(t, c, "b")
	if _, err := a.Load(bytes.NewReader(dockerTarball(t, "app:1", "amd64", "hello from a"))); err != nil {
		t.Fatal(err)
	}
	srvA := newBlobServer(t, a)
	c.urls["a"], c.urls["b"] = srvA.URL, "https://b.invalid"
	im, err := b.Get("app:1")
	if err != nil {
		t.Fatalf("server b does not know the image loaded on a: %v", err)
	}
	layer := im.Platforms[0].Layers[0]
	want, err := os.ReadFile(filepath.Join(a.dir, "blobs", "sha256", layer.Digest[len("sha256:"):]))
	if err != nil {
		t.Fatal(err)
	}

	peers := &ServerPeers{Store: b, Client: srvA.Client()}
	hb := httptest.NewServer(Handler(b, nil, nil, peers))
	defer hb.Close()
	gate := make(chan struct{})
	srvA.mu.Lock()
	srvA.gate = gate
	srvA.mu.Unlock()
	const n = 6
	var wg sync.WaitGroup
	var ok atomic.Int32
	started := make(chan struct{}, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			resp, err := http.Get(hb.URL + BlobsPath + layer.Digest)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || !bytes.Equal(got, want) {
				t.Errorf("GET through b: %s, %d bytes", resp.Status, len(got))
				return
			}
			ok.Add(1)
		}()
	}
	for range n {
		<-started
	}
	// a's answer waits until every request waits for the one transfer.
	testkit.EventuallyTrue(t, 30*time.Second, "every request waits for the transfer", func() bool {
		return peers.waiting(layer.Digest) == n
	})
	close(gate)
	wg.Wait()
	if ok.Load() != n {
		t.Fatalf("%d of %d requests served", ok.Load(), n)
	}
	if got := srvA.count(layer.Digest); got != 1 {
		t.Errorf("a served the layer %d times, want 1", got)
	}
	ims, err := b.List()
	if err != nil {
		t.Fatal(err)
	}
	hs, _ := b.Holders(context.Background())
	got := ims[0].withServers(hs).Servers
	wantServers := []ServerCopy{{Server: "a", Blobs: 2, Total: 2}, {Server: "b", Blobs: 1, Total: 2}}
	if !slices.Equal(got, wantServers) {
		t.Errorf("servers = %+v, want %+v", got, wantServers)
	}
	// A digest no image names is not fetched: 404 without asking a.
	resp, err := http.Get(hb.URL + BlobsPath + digestOf([]byte("nobody")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unnamed blob: %s, want 404", resp.Status)
	}
}

// TestServerPeersRefuseCorruptPeer: a server that sends a corrupt blob is
// refused and nothing of it is kept; the next server that holds it gives
// it; with only the corrupt one the answer is 503.
func TestServerPeersRefuseCorruptPeer(t *testing.T) {
	c := newMemCatalog()
	a, bad, b := openShared(t, c, "a"), openShared(t, c, "bad"), openShared(t, c, "b")
	tarball := dockerTarball(t, "app:1", "amd64", "hello")
	for _, s := range []*Store{a, bad} {
		if _, err := s.Load(bytes.NewReader(tarball)); err != nil {
			t.Fatal(err)
		}
	}
	srvA, srvBad := newBlobServer(t, a), newBlobServer(t, bad)
	srvBad.corrupt = true
	c.urls["bad"], c.urls["b"] = srvBad.URL, "https://b.invalid"
	im, err := b.Get("app:1")
	if err != nil {
		t.Fatal(err)
	}
	layer := im.Platforms[0].Layers[0]
	peers := &ServerPeers{Store: b, Client: http.DefaultClient}
	hb := httptest.NewServer(Handler(b, nil, nil, peers))
	defer hb.Close()

	resp, err := http.Get(hb.URL + BlobsPath + layer.Digest)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("only a corrupt peer: %s, want 503", resp.Status)
	}
	if srvBad.count(layer.Digest) != 1 {
		t.Errorf("the corrupt peer was asked %d times", srvBad.count(layer.Digest))
	}
	assertNothingKept(t, b, layer.Digest)

	c.mu.Lock()
	c.urls["a"] = srvA.URL
	c.mu.Unlock()
	resp, err = http.Get(hb.URL + BlobsPath + layer.Digest)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || digestOf(got) != layer.Digest {
		t.Fatalf("with a good peer too: %s, digest %s", resp.Status, digestOf(got))
	}
	if srvA.count(layer.Digest) != 1 {
		t.Errorf("the good peer was asked %d times, want 1", srvA.count(layer.Digest))
	}
}
