// Package testimage builds the image the Docker runtime's tests run: the
// static test daemon (nodeagent/runtime/docker/testdata/testdaemon) copied
// into an empty image, built on the engine itself so no registry is needed.
// It also holds the engine check the Docker tests share: skip when no engine
// answers, fail instead when EVERYNODE_REQUIRE_DOCKER=1.
package testimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
)

// RequireEnv set to "1" turns a missing engine from a skip into a failure.
const RequireEnv = "EVERYNODE_REQUIRE_DOCKER"

// RunLabel marks images (and, by the tests' choice, containers) of one test
// run.
const RunLabel = "everynode-test.run"

// RunID returns a short random ID naming one test run.
func RunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Connect returns a client for the engine of the environment (DOCKER_HOST or
// the local socket) once it answers a ping within a few seconds.
func Connect(ctx context.Context) (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx); err != nil {
		cli.Close()
		return nil, err
	}
	return cli, nil
}

// Build compiles the Go program in srcDir as a static Linux binary and builds
// it into a FROM scratch image as /testdaemon (the entrypoint), tagged
// everynode-test/daemon:<binary hash>-<run> and labelled RunLabel=run.
func Build(ctx context.Context, cli *client.Client, srcDir, run string) (string, error) {
	dir, err := os.MkdirTemp("", "everynode-testdaemon-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "testdaemon")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Dir = srcDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testimage: go build %s: %v\n%s", srcDir, err, out)
	}
	binData, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(binData)
	tag := fmt.Sprintf("everynode-test/daemon:%s-%s", hex.EncodeToString(sum[:6]), run)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, []byte("FROM scratch\nCOPY testdaemon /testdaemon\nENTRYPOINT [\"/testdaemon\"]\nCMD [\"-exit-after\", \"0\"]\n")},
		{"testdaemon", 0o755, binData},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data))}); err != nil {
			return "", err
		}
		if _, err := tw.Write(f.data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	resp, err := cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{
		Tags: []string{tag}, Remove: true, ForceRemove: true,
		Labels: map[string]string{RunLabel: run},
	})
	if err != nil {
		return "", fmt.Errorf("testimage: build %s: %w", tag, err)
	}
	defer resp.Body.Close()
	if err := jsonmessage.DisplayJSONMessagesStream(resp.Body, io.Discard, 0, false, nil); err != nil {
		return "", fmt.Errorf("testimage: build %s: %w", tag, err)
	}
	return tag, nil
}

// Remove deletes the image tag.
func Remove(ctx context.Context, cli *client.Client, tag string) error {
	if _, err := cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
		return fmt.Errorf("testimage: remove %s: %w", tag, err)
	}
	return nil
}
