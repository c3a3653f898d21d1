package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

func digestOf(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }

// layerTar is an uncompressed layer holding one file.
func layerTar(t *testing.T, content string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: int64(len(content))})
	tw.Write([]byte(content))
	tw.Close()
	return b.Bytes()
}

func configJSON(arch string, layers ...[]byte) []byte {
	var ids []string
	for _, l := range layers {
		ids = append(ids, digestOf(l))
	}
	b, _ := json.Marshal(map[string]any{"os": "linux", "architecture": arch,
		"rootfs": map[string]any{"type": "layers", "diff_ids": ids}})
	return b
}

type file struct {
	name string
	data []byte
}

func tarOf(t *testing.T, files ...file) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.data)
	}
	tw.Close()
	return b.Bytes()
}

// dockerTarball is what docker save (before Docker 25) writes for tag.
func dockerTarball(t *testing.T, tag, arch, content string) []byte {
	t.Helper()
	layer := layerTar(t, content)
	cfg := configJSON(arch, layer)
	cfgName := strings.TrimPrefix(digestOf(cfg), "sha256:") + ".json"
	m, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{tag}, "Layers": []string{"abc/layer.tar"}}})
	return tarOf(t, file{cfgName, cfg}, file{"abc/layer.tar", layer}, file{"manifest.json", m})
}

// ociTarball is an OCI layout with a two-platform index named tag.
func ociTarball(t *testing.T, tag string) []byte {
	t.Helper()
	var files []file
	blob := func(b []byte) map[string]any {
		files = append(files, file{"blobs/sha256/" + strings.TrimPrefix(digestOf(b), "sha256:"), b})
		return map[string]any{"digest": digestOf(b), "size": len(b)}
	}
	var manifests []map[string]any
	for _, arch := range []string{"amd64", "arm64"} {
		layer := layerTar(t, "layer for "+arch)
		cfg := configJSON(arch, layer)
		cd, ld := blob(cfg), blob(layer)
		cd["mediaType"], ld["mediaType"] = "application/vnd.oci.image.config.v1+json", "application/vnd.oci.image.layer.v1.tar"
		m, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
			"config": cd, "layers": []any{ld}})
		md := blob(m)
		md["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
		md["platform"] = map[string]any{"os": "linux", "architecture": arch}
		manifests = append(manifests, md)
	}
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests})
	id := blob(idx)
	id["mediaType"] = "application/vnd.oci.image.index.v1+json"
	id["annotations"] = map[string]string{containerdNameKey: tag}
	top, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{id}})
	files = append(files, file{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)}, file{"index.json", top})
	return tarOf(t, files...)
}

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func blobCount(t *testing.T, s *Store) int {
	ents, err := os.ReadDir(filepath.Join(s.dir, "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestLoadDockerLayoutAndRemove(t *testing.T) {
	s := openStore(t)
	ims, err := s.Load(bytes.NewReader(dockerTarball(t, "app:1", "amd64", "hello")))
	if err != nil {
		t.Fatal(err)
	}
	if len(ims) != 1 || ims[0].Name != "docker.io/library/app:1" || ims[0].PlatformList() != "linux/amd64" {
		t.Fatalf("loaded %+v", ims)
	}
	got, err := s.Get("docker.io/library/app:1")
	if err != nil || len(got.Platforms[0].Layers) != 1 {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	if n := blobCount(t, s); n != 2 {
		t.Fatalf("%d blobs stored, want 2 (config, layer)", n)
	}
	if err := s.Remove("app:1"); err != nil {
		t.Fatal(err)
	}
	if n := blobCount(t, s); n != 0 {
		t.Fatalf("%d blobs left after rm, want 0", n)
	}
	if err := s.Remove("app:1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second rm: %v, want ErrNotFound", err)
	}
}

func TestLoadOCIMultiPlatformKeepsAll(t *testing.T) {
	s := openStore(t)
	ims, err := s.Load(bytes.NewReader(ociTarball(t, "docker.io/example/multi:2")))
	if err != nil {
		t.Fatal(err)
	}
	if len(ims) != 1 || ims[0].PlatformList() != "linux/amd64, linux/arm64" {
		t.Fatalf("loaded %+v", ims)
	}
	if _, ok := ims[0].Match("linux", "arm64", "v8"); !ok {
		t.Fatal("linux/arm64/v8 does not match the arm64 platform")
	}
}

func TestLoadRefusesBadTarballs(t *testing.T) {
	good := dockerTarball(t, "app:1", "amd64", strings.Repeat("x", 4096))
	corrupt := bytes.Clone(good)
	i := bytes.Index(corrupt, []byte("xxxx"))
	corrupt[i] = 'y'
	oci := ociTarball(t, "multi:1")
	ociCorrupt := bytes.Clone(oci)
	j := bytes.Index(ociCorrupt, []byte("layer for arm64"))
	ociCorrupt[j] = 'L'
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"truncated":     {good[:len(good)/2], "is truncated"},
		"corrupt layer": {corrupt, "does not match its digest"},
		"corrupt blob":  {ociCorrupt, "does not match its digest"},
		"not a tarball": {[]byte("hello, I am not a tar file at all, but a long enough sentence to fill a header block? no."), "not a tar archive"},
		"no manifest":   {tarOf(t, file{"x.txt", []byte("x")}), "neither manifest.json nor index.json"},
	} {
		t.Run(name, func(t *testing.T) {
			s := openStore(t)
			_, err := s.Load(bytes.NewReader(tc.data))
			var bt *BadTarballError
			if !errors.As(err, &bt) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "docker save") {
				t.Fatalf("Load: %v, want a BadTarballError saying %q and naming docker save", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("the error is more than one line: %q", err)
			}
			if ims, _ := s.List(); len(ims) != 0 || blobCount(t, s) != 0 {
				t.Fatalf("a refused load left %d images and %d blobs", len(ims), blobCount(t, s))
			}
		})
	}
}

// recordingLoader is a fake Loader: it keeps the tarball it was given.
type recordingLoader struct{ got []byte }

func (l *recordingLoader) LoadImage(_ context.Context, r io.Reader) error {
	b, err := io.ReadAll(r)
	l.got = b
	return err
}

// streamer is client.HTTP's Stream over a plain httptest server.
type streamer struct{ base string }

func (s streamer) Stream(ctx context.Context, method, path string, q url.Values, h http.Header, body io.Reader) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, method, s.base+path+"?"+q.Encode(), body)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		resp.Body.Close()
		return nil, errNotFoundStatus{}
	}
	if resp.StatusCode >= 300 {
		resp.Body.Close()
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return resp, nil
}

type errNotFoundStatus struct{}

func (errNotFoundStatus) Error() string { return "not found" }

// A flaky link: the first answer for each blob is cut half way, the
// second has a flipped byte (a digest mismatch), the third is good.
// The fetch resumes, notices the mismatch, and loads the right bytes.
func TestFetchResumesAndVerifies(t *testing.T) {
	s := openStore(t)
	if _, err := s.Load(bytes.NewReader(dockerTarball(t, "app:1", "amd64", strings.Repeat("payload ", 8192)))); err != nil {
		t.Fatal(err)
	}
	h := Handler(s, nil, nil, nil)
	var calls, ranges atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, BlobsPath) {
			h.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("Range") != "" {
			ranges.Add(1)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		switch calls.Add(1) {
		case 1: // cut: promise everything, send half
			w.WriteHeader(rec.Code)
			w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case 2: // corrupt
			body = bytes.Clone(body)
			body[len(body)-1] ^= 0xff
		}
		w.WriteHeader(rec.Code)
		w.Write(body)
	}))
	defer srv.Close()
	ld := &recordingLoader{}
	f := &Fetcher{API: streamer{srv.URL}, Loader: ld, Dir: t.TempDir(), OS: "linux", Arch: "amd64"}
	res, err := f.Fetch(context.Background(), "app:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ranges.Load() == 0 {
		t.Fatal("the cut transfer was not resumed with a Range request")
	}
	// The engine got a tarball the store itself accepts, with the same image.
	again := openStore(t)
	ims, err := again.Load(bytes.NewReader(ld.got))
	if err != nil {
		t.Fatalf("the assembled tarball does not load: %v", err)
	}
	if ims[0].Platforms[0].Config.Digest != res.Platform.Config.Digest || ims[0].Platforms[0].Layers[0].Digest != res.Platform.Layers[0].Digest {
		t.Fatalf("assembled %+v, fetched %+v", ims[0].Platforms[0], res.Platform)
	}
	ents, _ := os.ReadDir(f.Dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".part") {
			t.Errorf("partial download %s left behind", e.Name())
		}
	}
	if len(ents) != 2 {
		t.Errorf("%d blobs kept for peers, want 2", len(ents))
	}
}

func TestFetchWrongPlatformAndMissing(t *testing.T) {
	s := openStore(t)
	if _, err := s.Load(bytes.NewReader(dockerTarball(t, "armonly:1", "arm64", "x"))); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(s, nil, nil, nil))
	defer srv.Close()
	f := &Fetcher{API: streamer{srv.URL}, Loader: &recordingLoader{}, Dir: t.TempDir(), OS: "linux", Arch: "amd64"}
	_, err := f.Fetch(context.Background(), "armonly:1", nil)
	var wp *WrongPlatformError
	if !errors.As(err, &wp) || !strings.Contains(err.Error(), "docker save --platform linux/amd64") {
		t.Fatalf("Fetch: %v, want a WrongPlatformError naming the fix", err)
	}
}

func TestBlobRange(t *testing.T) {
	s := openStore(t)
	ims, err := s.Load(bytes.NewReader(dockerTarball(t, "app:1", "amd64", "0123456789")))
	if err != nil {
		t.Fatal(err)
	}
	d := ims[0].Platforms[0].Layers[0]
	srv := httptest.NewServer(Handler(s, nil, nil, nil))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+BlobsPath+d.Digest, nil)
	req.Header.Set("Range", "bytes=10-")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || int64(len(b)) != d.Size-10 {
		t.Fatalf("range answer %d with %d bytes, want 206 with %d", resp.StatusCode, len(b), d.Size-10)
	}
	resp, _ = http.Get(srv.URL + BlobsPath + "sha256:" + strings.Repeat("0", 64))
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown blob: %d", resp.StatusCode)
	}
}

// A node that has the image serves its blobs to a peer holding the
// cluster's peer token: the second fetch takes nothing from the servers.
// Without the token, the peer answers 401.
func TestFetchFromPeer(t *testing.T) {
	s := openStore(t)
	if _, err := s.Load(bytes.NewReader(dockerTarball(t, "app:1", "amd64", strings.Repeat("peer ", 4096)))); err != nil {
		t.Fatal(err)
	}
	token := PeerToken([]byte("cluster key"))
	first := &Fetcher{Loader: &recordingLoader{}, Dir: t.TempDir(), OS: "linux", Arch: "amd64"}
	peer := httptest.NewServer(PeerHandler(first.Dir, token))
	defer peer.Close()
	h := Handler(s, nil, func(context.Context, string) []Holder { return []Holder{{Node: "n1", URL: peer.URL}} }, nil)
	var blobBytes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, BlobsPath) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			blobBytes.Add(int64(rec.Body.Len()))
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	first.API, first.Self = streamer{srv.URL}, "n1"
	first.Peers, first.PeerToken = peer.Client(), token
	r1, err := first.Fetch(context.Background(), "app:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r1.FromPeers != 0 || blobBytes.Load() != r1.Platform.Size() {
		t.Fatalf("first fetch: %+v, servers sent %d", r1, blobBytes.Load())
	}
	second := &Fetcher{API: streamer{srv.URL}, Loader: &recordingLoader{}, Dir: t.TempDir(), OS: "linux", Arch: "amd64",
		Self: "n2", Peers: peer.Client(), PeerToken: token}
	r2, err := second.Fetch(context.Background(), "app:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r2.FromPeers != r2.Platform.Size() || blobBytes.Load() != r1.Platform.Size() {
		t.Fatalf("second fetch: %+v, servers sent %d in all", r2, blobBytes.Load())
	}
	resp, err := http.Get(peer.URL + BlobsPath + r1.Platform.Config.Digest)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a blob without the peer token: %d, want 401", resp.StatusCode)
	}
}
