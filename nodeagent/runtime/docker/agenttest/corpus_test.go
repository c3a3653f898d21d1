package agenttest

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/everynode/everynode/images"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent/runtime"
	"github.com/everynode/everynode/resources"
)

// corpusOnDocker are the published manifests run on the engine, each with
// its DaemonSet and the image the stand-in is tagged as. The first names
// its image by a tag (pulled only if missing); the other two pull always
// (":latest", imagePullPolicy: Always), so the server's image store must
// serve them, as on an air-gapped fleet.
var corpusOnDocker = []struct{ file, namespace, ds, image string }{
	{"dcgm-exporter.yaml", "default", "dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"},
	{"otel-collector-agent.yaml", "default", "otel-agent", "otel/opentelemetry-collector:latest"},
	{"logdna-agent.yaml", "logdna-agent", "logdna-agent", "logdna/logdna-agent:3.11.2"},
}

// hostPathsOfCorpus are the hostPath directories those manifests mount
// that Docker creates when missing, parents first; the test removes the
// ones it made (children first, and only when empty).
var hostPathsOfCorpus = []string{"/var/lib/kubelet", "/var/lib/kubelet/pod-resources", "/var/data", "/var/lib/logdna", "/etc/logdna-hostname"}

// TestCorpusOnDocker: three published manifests of the shared corpus,
// unchanged, applied with real kubectl to a server whose agent runs on the
// real Docker engine, with a locally built stand-in image under each
// manifest's image name; the two that always pull get their image from the
// server's image store (loaded from a docker save, as `everynode image load`
// sends it). Each DaemonSet reaches desired == ready, its containers run on
// the engine with the manifest's capabilities, env from a Secret and a
// ConfigMap volume, and deleting the manifests removes them.
func TestCorpusOnDocker(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("EVERYNODE_REQUIRE_KUBECTL") == "1" {
			t.Fatalf("kubectl is required (EVERYNODE_REQUIRE_KUBECTL=1) but not on PATH: %v", err)
		}
		t.Skipf("SKIPPING: kubectl not on PATH (%v); set EVERYNODE_REQUIRE_KUBECTL=1 to fail instead", err)
	}
	n := newNode(t, "corpus", nil)
	ctx := context.Background()
	for _, p := range hostPathsOfCorpus {
		if _, err := os.Stat(p); os.IsNotExist(err) {
			t.Cleanup(func() { _ = os.Remove(p) }) // only if still empty
		}
	}
	buildStandIn(t)

	s, admin := n.startServer()

	// The images that always pull: stored on the server.
	rc, err := engine.cli.ImageSave(ctx, []string{corpusOnDocker[1].image, corpusOnDocker[2].image})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := admin.Stream(ctx, http.MethodPost, images.ImagesPath, nil, http.Header{"Content-Type": {"application/x-tar"}}, rc)
	rc.Close()
	if err != nil {
		t.Fatalf("load the stand-in images on the server: %v", err)
	}
	resp.Body.Close()

	kc := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", s.Kubeconfig(), "--cache-dir", filepath.Join(t.TempDir(), "cache")}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// What the corpus README says logdna-agent.yaml expects first.
	kc("create", "namespace", "logdna-agent")
	kc("create", "secret", "generic", "logdna-agent-key", "-n", "logdna-agent", "--from-literal=logdna-agent-key=stand-in-key")
	for _, m := range corpusOnDocker {
		kc("apply", "-f", filepath.Join("..", "..", "..", "..", "..", "shared", "corpus", m.file))
	}
	for _, m := range corpusOnDocker {
		testkit.Eventually(t, 3*time.Minute, func() error {
			o, err := admin.Get(ctx, resources.DaemonSets, m.namespace, m.ds)
			if err != nil {
				return err
			}
			st := o.(*appsv1.DaemonSet).Status
			if st.DesiredNumberScheduled != 1 || st.NumberReady != 1 {
				return fmt.Errorf("%s: desired %d ready %d", m.ds, st.DesiredNumberScheduled, st.NumberReady)
			}
			return nil
		})
	}

	// On the engine: one running container per DaemonSet, of the stand-in.
	running := map[string]container.Summary{}
	list, err := engine.cli.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", runtime.LabelNode+"="+n.name))})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		running[c.Labels[runtime.LabelContainer]] = c
	}
	for _, name := range []string{"dcgm-exporter", "otel-agent", "logdna-agent"} {
		if c, ok := running[name]; !ok || c.State != "running" {
			t.Fatalf("no running container %s on the engine: %+v", name, running)
		}
	}
	inspect := func(name string) container.InspectResponse {
		t.Helper()
		ci, err := engine.cli.ContainerInspect(ctx, running[name].ID)
		if err != nil {
			t.Fatal(err)
		}
		return ci
	}
	// dcgm-exporter: capabilities as its securityContext says.
	if ci := inspect("dcgm-exporter"); !strings.Contains(strings.Join(ci.HostConfig.CapAdd, ","), "SYS_ADMIN") ||
		!strings.Contains(strings.ToUpper(strings.Join(ci.HostConfig.CapDrop, ",")), "ALL") {
		t.Errorf("dcgm-exporter caps add %v drop %v", ci.HostConfig.CapAdd, ci.HostConfig.CapDrop)
	}
	// logdna-agent: its ingestion key from the Secret, its node name from
	// the downward API.
	env := strings.Join(inspect("logdna-agent").Config.Env, "\n")
	for _, want := range []string{"LOGDNA_INGESTION_KEY=stand-in-key", "NODE_NAME=" + n.name, "POD_APP_LABEL=logdna-agent"} {
		if !strings.Contains(env, want) {
			t.Errorf("logdna-agent env lacks %s:\n%s", want, env)
		}
	}
	// otel-agent: its command, and its ConfigMap mounted as a file.
	if ci := inspect("otel-agent"); ci.Path+" "+strings.Join(ci.Args, " ") != "/otelcol --config=/conf/otel-agent-config.yaml" {
		t.Errorf("otel-agent runs %s %v", ci.Path, ci.Args)
	}
	code, out, err := n.rt.Exec(ctx, running["otel-agent"].ID, []string{"/standin", "cat", "/conf/otel-agent-config.yaml"})
	if err != nil || code != 0 || !strings.Contains(string(out), "receivers:") {
		t.Errorf("otel-agent's config file: exit %d, %v:\n%s", code, err, out)
	}

	for _, m := range corpusOnDocker {
		kc("delete", "-f", filepath.Join("..", "..", "..", "..", "..", "shared", "corpus", m.file), "--wait=false")
	}
	testkit.Eventually(t, 2*time.Minute, func() error {
		left, err := engine.cli.ContainerList(ctx, container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", runtime.LabelNode+"="+n.name))})
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("%d containers left after kubectl delete", len(left))
		}
		return nil
	})
}

// buildStandIn builds the stand-in program (testdata/standin) into an
// image FROM scratch, as /standin (its entrypoint) and as /otelcol (the
// collector manifest's command), tagged with every image name of
// corpusOnDocker; the tags are removed when the test ends.
func buildStandIn(t *testing.T) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "standin")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Dir = filepath.Join("..", "testdata", "standin")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build standin: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, []byte("FROM scratch\nCOPY standin /standin\nCOPY standin /otelcol\nENTRYPOINT [\"/standin\"]\n")},
		{"standin", 0o755, data},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, m := range corpusOnDocker {
		tags = append(tags, m.image)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resp, err := engine.cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: tags, Remove: true, ForceRemove: true,
		Labels: map[string]string{"everynode-test.run": engine.run}})
	if err != nil {
		t.Fatalf("build the stand-in image: %v", err)
	}
	defer resp.Body.Close()
	if err := jsonmessage.DisplayJSONMessagesStream(resp.Body, io.Discard, 0, false, nil); err != nil {
		t.Fatalf("build the stand-in image: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, tag := range tags {
			if _, err := engine.cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
				t.Errorf("remove %s: %v", tag, err)
			}
		}
	})
}
