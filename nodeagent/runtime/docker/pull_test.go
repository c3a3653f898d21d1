package docker

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// registry is a minimal Docker registry (API v2, schema 2 manifests) serving
// one single-layer image, so pulls can succeed with no real registry.
type registry struct {
	repo, tag string
	manifest  []byte
	blobs     map[string][]byte // by digest
}

func digest(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }

func newRegistry(t *testing.T, repo, tag string) *httptest.Server {
	t.Helper()
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	content := bytes.Repeat([]byte("everynode\n"), 1<<16)
	if err := tw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: int64(len(content))}); err != nil {
		t.Fatal(err)
	}
	tw.Write(content)
	tw.Close()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(layer.Bytes())
	zw.Close()

	config, _ := json.Marshal(map[string]any{
		"architecture": goruntime.GOARCH, "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/hello.txt"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(layer.Bytes())}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.docker.distribution.manifest.v2+json",
		"config": map[string]any{
			"mediaType": "application/vnd.docker.container.image.v1+json",
			"size":      len(config), "digest": digest(config),
		},
		"layers": []map[string]any{{
			"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
			"size":      gz.Len(), "digest": digest(gz.Bytes()),
		}},
	})
	reg := &registry{repo: repo, tag: tag, manifest: manifest, blobs: map[string][]byte{
		digest(config): config, digest(gz.Bytes()): gz.Bytes(),
	}}
	srv := httptest.NewServer(reg)
	t.Cleanup(srv.Close)
	return srv
}

func (reg *registry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	p := strings.TrimPrefix(r.URL.Path, "/v2/")
	if p == "" {
		w.Write([]byte("{}"))
		return
	}
	unknown := func(code string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"errors":[{"code":%q,"message":"%s"}]}`, code, strings.ToLower(strings.ReplaceAll(code, "_", " ")))
	}
	if name, ref, ok := strings.Cut(p, "/manifests/"); ok {
		if name != reg.repo || (ref != reg.tag && ref != digest(reg.manifest)) {
			unknown("MANIFEST_UNKNOWN")
			return
		}
		w.Header().Set("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
		w.Header().Set("Docker-Content-Digest", digest(reg.manifest))
		w.Header().Set("Content-Length", fmt.Sprint(len(reg.manifest)))
		if r.Method != http.MethodHead {
			w.Write(reg.manifest)
		}
		return
	}
	if name, d, ok := strings.Cut(p, "/blobs/"); ok && name == reg.repo {
		if b, ok := reg.blobs[d]; ok {
			w.Header().Set("Content-Length", fmt.Sprint(len(b)))
			w.Header().Set("Docker-Content-Digest", d)
			if r.Method != http.MethodHead {
				w.Write(b)
			}
			return
		}
		unknown("BLOB_UNKNOWN")
		return
	}
	unknown("NAME_UNKNOWN")
}

// TestPull pulls from a local registry: success with progress logged, an
// image the registry does not know (ImageNotFound), and a registry that does
// not answer (PullFailed).
func TestPull(t *testing.T) {
	r := newRuntime(t, "pull")
	var logs bytes.Buffer
	r.log = slogTo(&logs)
	srv := newRegistry(t, "everynode-test/pulled", engine.run)
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/everynode-test/pulled:" + engine.run

	id, err := r.PullImage(ctxT(t), ref)
	if err != nil {
		t.Fatalf("PullImage(%s): %v\nlog:\n%s", ref, err, logs.String())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := engine.cli.ImageRemove(ctx, id, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			t.Errorf("cleanup: remove pulled image: %v", err)
		}
	})
	img, err := r.ImageStatus(ctxT(t), ref)
	if err != nil || img.ID != id {
		t.Errorf("ImageStatus after pull = %+v, %v; want ID %s", img, err, id)
	}
	t.Logf("pull log:\n%s", logs.String())
	if l := logs.String(); !strings.Contains(l, "msg=\"pulled image\"") || !strings.Contains(l, "layers_done=1 layers=1") {
		t.Errorf("pull log lacks the summary:\n%s", l)
	}
	if n := strings.Count(logs.String(), "\n"); n > 4 {
		t.Errorf("pull logged %d lines, want a summary:\n%s", n, logs.String())
	}

	_, err = r.PullImage(ctxT(t), host+"/everynode-test/unknown:v1")
	if !runtime.IsImageNotFound(err) {
		t.Errorf("pull of an image the registry does not know: %v, want ImageNotFound", err)
	}
	_, err = r.PullImage(ctxT(t), "127.0.0.1:1/everynode-test/unreachable:v1")
	if !runtime.IsPullFailed(err) || !strings.Contains(err.Error(), "no registry answered") {
		t.Errorf("pull from a registry that does not answer: %v, want PullFailed", err)
	}
}
