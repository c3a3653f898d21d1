package server

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/images"
	"github.com/everynode/everynode/internal/testkit"
)

// imageTarball is what `docker save` (before Docker 25) writes for an
// amd64 image tag with one layer holding content.
func imageTarball(t *testing.T, tag, content string) []byte {
	t.Helper()
	var lb bytes.Buffer
	lw := tar.NewWriter(&lb)
	lw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: int64(len(content))})
	lw.Write([]byte(content))
	lw.Close()
	layer := lb.Bytes()
	cfg, _ := json.Marshal(map[string]any{"os": "linux", "architecture": "amd64",
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{fmt.Sprintf("sha256:%x", sha256.Sum256(layer))}}})
	cfgName := fmt.Sprintf("%x.json", sha256.Sum256(cfg))
	m, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{tag}, "Layers": []string{"l/layer.tar"}}})
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range []struct {
		name string
		data []byte
	}{{cfgName, cfg}, {"l/layer.tar", layer}, {"manifest.json", m}} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data))})
		tw.Write(f.data)
	}
	tw.Close()
	return b.Bytes()
}

func adminHTTP(t *testing.T, s *Server) *client.HTTP {
	t.Helper()
	cfg, err := client.LoadKubeconfigFrom([]string{s.Kubeconfig()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := client.NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// TestImageLoadedOnOneServerServedByAnother: with two servers of one
// cluster, an image loaded on s1 is listed by s2 and its blobs are served
// through s2, which fetches them from s1 over the servers' mutual TLS and
// keeps them; image ls says where the blobs are; s1's server-to-server
// blob path refuses anyone without a server's peer certificate, even the
// admin; image rm through s2 removes the image everywhere.
func TestImageLoadedOnOneServerServedByAnother(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two embedded etcds")
	}
	defer testkit.LeakCheck(t)()
	ctx := context.Background()
	s1, s2 := startPair(ctx, t)
	defer s1.Close()
	defer s2.Close()
	h1, h2 := adminHTTP(t, s1), adminHTTP(t, s2)

	resp, err := h1.Stream(ctx, http.MethodPost, images.ImagesPath, nil, http.Header{"Content-Type": {"application/x-tar"}},
		bytes.NewReader(imageTarball(t, "app:1", "loaded on s1 only")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("load on s1: %s", resp.Status)
	}

	// s2 knows the image (the record is in etcd) but has none of its blobs.
	data, code := getImage(t, h2, "app:1")
	if code != http.StatusOK {
		t.Fatalf("s2 does not know the image loaded on s1: %d %s", code, data)
	}
	var im images.Image
	if err := json.Unmarshal(data, &im); err != nil {
		t.Fatal(err)
	}
	blobs := im.Blobs()
	if len(blobs) != 2 {
		t.Fatalf("image blobs %v", blobs)
	}
	for _, d := range blobs {
		if _, err := os.Stat(blobFileOf(s2, d)); err == nil {
			t.Fatalf("s2 holds %s before anyone asked it", d)
		}
	}

	// Every blob through s2: s2 fetches it from s1 (once s1's API URL is
	// published in etcd), verifies it and keeps it.
	for _, d := range blobs {
		testkit.Eventually(t, 30*time.Second, func() error {
			b, err := h2.RawGet(ctx, images.BlobsPath+d)
			if err != nil {
				return err
			}
			if got := fmt.Sprintf("sha256:%x", sha256.Sum256(b)); got != d {
				return fmt.Errorf("blob %s through s2 has digest %s", d, got)
			}
			return nil
		})
		if _, err := os.Stat(blobFileOf(s2, d)); err != nil {
			t.Errorf("s2 did not keep %s: %v", d, err)
		}
	}

	// image ls (through either server) shows both servers holding it all.
	testkit.Eventually(t, 10*time.Second, func() error {
		data, err := h1.RawGet(ctx, images.ImagesPath)
		if err != nil {
			return err
		}
		var l images.List
		if err := json.Unmarshal(data, &l); err != nil {
			return err
		}
		if len(l.Items) != 1 {
			return fmt.Errorf("%d images", len(l.Items))
		}
		got := fmt.Sprint(l.Items[0].Servers)
		if want := "[{s1 2 2} {s2 2 2}]"; got != want {
			return fmt.Errorf("servers %s, want %s", got, want)
		}
		return nil
	})

	// The server-to-server path: no certificate (even with the admin
	// token) or another CA's certificate is refused; s2's peer
	// certificate is served.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s1.CAPEM())
	otherDir := t.TempDir()
	if _, err := pki.Load(otherDir); err != nil {
		t.Fatal(err)
	}
	otherCert, otherKey, err := pki.PeerCert(otherDir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		cert, key  string // "": no client certificate
		token      bool
		wantStatus int
	}{
		{name: "no certificate", wantStatus: http.StatusUnauthorized},
		{name: "admin token, no certificate", token: true, wantStatus: http.StatusUnauthorized},
		{name: "another cluster's peer certificate", cert: otherCert, key: otherKey, wantStatus: http.StatusUnauthorized},
		{name: "s2's peer certificate", cert: filepath.Join(s2.DataDir(), pki.PeerCertFile), key: filepath.Join(s2.DataDir(), pki.PeerKeyFile), wantStatus: http.StatusOK},
	} {
		cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if tc.cert != "" {
			c, err := tls.LoadX509KeyPair(tc.cert, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		req, _ := http.NewRequest(http.MethodGet, s1.URL()+images.ServerBlobsPath+blobs[0], nil)
		if tc.token {
			req.Header.Set("Authorization", "Bearer "+s1.AdminToken())
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		hc.CloseIdleConnections()
		if resp.StatusCode != tc.wantStatus {
			t.Errorf("%s: %s, want %d", tc.name, resp.Status, tc.wantStatus)
		}
	}

	// image rm through s2 removes the record for both.
	resp, err = h2.Stream(ctx, http.MethodDelete, images.ImagesPath, map[string][]string{"name": {"app:1"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("rm through s2: %s", resp.Status)
	}
	if data, code := getImage(t, h1, "app:1"); code != http.StatusNotFound {
		t.Errorf("s1 after rm through s2: %d %s, want 404", code, data)
	}
}

// getImage is GET ImagesPath?name=ref: the body and the status code.
func getImage(t *testing.T, h *client.HTTP, ref string) ([]byte, int) {
	t.Helper()
	resp, err := h.Stream(context.Background(), http.MethodGet, images.ImagesPath, url.Values{"name": {ref}}, nil, nil)
	if apierrors.IsNotFound(err) {
		return []byte(err.Error()), http.StatusNotFound
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return b, resp.StatusCode
}

func blobFileOf(s *Server, d string) string {
	return filepath.Join(s.DataDir(), "images", "blobs", "sha256", strings.TrimPrefix(d, "sha256:"))
}
