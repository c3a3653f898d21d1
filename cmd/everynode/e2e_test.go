package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"

	"github.com/everynode/everynode/cmd/everynode/internal/cli"
	"github.com/everynode/everynode/internal/testkit"
)

// runningServer is an in-process "everynode server".
type runningServer struct {
	cancel     context.CancelFunc
	done       chan error
	out, log   *testkit.Buffer
	kubeconfig string
}

// startServer runs "everynode server --no-agent" on free loopback ports.
func startServer(t *testing.T, dataDir string) *runningServer {
	t.Helper()
	return startServerArgs(t, dataDir, "--listen", "127.0.0.1:0", "--no-agent", "--gossip", "127.0.0.1:0", "--gossip-profile", "local", "--log-level", "warn")
}

func (s *runningServer) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			t.Errorf("server exited with %v\nlog:\n%s", err, s.log.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("server did not stop within 30s; log:\n%s", s.log.String())
	}
}

// run executes one client verb against the server and returns stdout and the error.
func (s *runningServer) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	m := &cli.Main{Getenv: func(k string) string {
		if k == "KUBECONFIG" {
			return s.kubeconfig
		}
		return ""
	}}
	err := m.Run(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return out.String(), err
}

func (s *runningServer) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := s.run(t, args...)
	if err != nil {
		t.Fatalf("everynode %s: %s", strings.Join(args, " "), cli.FormatError(err))
	}
	return out
}

func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	dataDir := t.TempDir()
	srv := startServer(t, dataDir)
	// The welcome text follows the kubeconfig startServer waits for.
	testkit.Eventually(t, 30*time.Second, func() error {
		if out := srv.out.String(); !strings.Contains(out, "everynode agent --server https://127.0.0.1:") || !strings.Contains(out, "join-token") {
			return fmt.Errorf("welcome text lacks the join command:\n%s", out)
		}
		return nil
	})

	out := srv.mustRun(t, "apply", "-f", "testdata")
	if want := "daemonset.apps/fluentd-elasticsearch created\ndaemonset.apps/redis-ds created\n"; out != want {
		t.Fatalf("apply printed %q, want %q", out, want)
	}
	out = srv.mustRun(t, "apply", "-f", "testdata/redis-ds.yaml")
	if want := "daemonset.apps/redis-ds unchanged\n"; out != want {
		t.Fatalf("second apply printed %q, want %q", out, want)
	}

	// Read back: every field of each manifest is kept, plus the defaults.
	var list struct {
		Kind  string             `json:"kind"`
		Items []appsv1.DaemonSet `json:"items"`
	}
	if err := json.Unmarshal([]byte(srv.mustRun(t, "get", "ds", "-A", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if list.Kind != "List" || len(list.Items) != 2 {
		t.Fatalf("get -A -o json: kind %q, %d items", list.Kind, len(list.Items))
	}
	for _, want := range []struct{ file, ns, name string }{
		{"testdata/fluentd-elasticsearch.yaml", "kube-system", "fluentd-elasticsearch"},
		{"testdata/redis-ds.yaml", "default", "redis-ds"},
	} {
		var got *appsv1.DaemonSet
		for i := range list.Items {
			if list.Items[i].Namespace == want.ns && list.Items[i].Name == want.name {
				got = &list.Items[i]
			}
		}
		if got == nil {
			t.Fatalf("%s/%s not in get -A output", want.ns, want.name)
		}
		checkContainsManifest(t, want.file, got)
		if got.UID == "" || got.Generation != 1 || got.Spec.RevisionHistoryLimit == nil || *got.Spec.RevisionHistoryLimit != 10 ||
			got.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType ||
			got.Spec.Template.Spec.RestartPolicy != "Always" || got.Spec.Template.Spec.Containers[0].ImagePullPolicy == "" {
			t.Errorf("%s: server fields or defaults missing: %+v", want.name, got.Spec)
		}
	}

	// get -w on one object prints it, then each change.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watchOut, watchDone := &testkit.Buffer{}, make(chan error, 1)
	go func() {
		m := &cli.Main{Getenv: func(string) string { return "" }}
		watchDone <- m.Run(watchCtx, []string{"get", "ds", "fluentd-elasticsearch", "-n", "kube-system", "-w", "-o", "name", "--kubeconfig", srv.kubeconfig},
			nil, watchOut, io.Discard)
	}()
	testkit.EventuallyTrue(t, 30*time.Second, "get -w to print the object", func() bool { return watchOut.String() != "" })
	changed := filepath.Join(t.TempDir(), "fluentd.yaml")
	y, _ := os.ReadFile("testdata/fluentd-elasticsearch.yaml")
	os.WriteFile(changed, bytes.Replace(y, []byte("memory: 200Mi\n          requests"), []byte("memory: 300Mi\n          requests"), 1), 0o600)
	if out := srv.mustRun(t, "apply", "-f", changed); out != "daemonset.apps/fluentd-elasticsearch configured\n" {
		t.Errorf("apply of a change printed %q", out)
	}
	testkit.EventuallyTrue(t, 30*time.Second, "get -w to print the change", func() bool { return strings.Count(watchOut.String(), "\n") >= 2 })
	stopWatch()
	if err := <-watchDone; err != nil {
		t.Errorf("get -w ended with %v", err)
	}
	// The server's controllers also write the DaemonSet's status, so there
	// may be more changes than the apply: each is the same object's name.
	if got := watchOut.String(); strings.Count(got, "\n") < 2 || strings.ReplaceAll(got, "daemonset.apps/fluentd-elasticsearch\n", "") != "" {
		t.Errorf("get -w printed %q, want at least two lines of daemonset.apps/fluentd-elasticsearch", got)
	}

	out = srv.mustRun(t, "get", "ds", "-n", "kube-system")
	if !strings.HasPrefix(out, "NAME                    DESIRED   CURRENT   READY   UP-TO-DATE   AVAILABLE   NODE SELECTOR   AGE\nfluentd-elasticsearch   ") {
		t.Errorf("get ds -n kube-system:\n%s", out)
	}
	if out := srv.mustRun(t, "describe", "ds", "redis-ds"); !strings.Contains(out, "redis:5-alpine") || !strings.Contains(out, "Events:") {
		t.Errorf("describe:\n%s", out)
	}
	if out := srv.mustRun(t, "version"); !strings.Contains(out, "Server Version: v1.32") {
		t.Errorf("version:\n%s", out)
	}

	if out := srv.mustRun(t, "delete", "ds", "redis-ds"); out != "daemonset.apps \"redis-ds\" deleted\n" {
		t.Errorf("delete printed %q", out)
	}
	_, err := srv.run(t, "get", "ds", "redis-ds")
	if got := cli.FormatError(err); got != `Error from server (NotFound): daemonsets.apps "redis-ds" not found` {
		t.Errorf("get after delete: %q", got)
	}

	// Restart on the same data dir: same CA, data kept.
	ca1, err := os.ReadFile(filepath.Join(dataDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	srv.stop(t)
	srv = startServer(t, dataDir)
	ca2, err := os.ReadFile(filepath.Join(dataDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ca1, ca2) {
		t.Fatal("restart changed ca.crt")
	}
	if out := srv.mustRun(t, "get", "ds", "-A", "-o", "name"); out != "daemonset.apps/fluentd-elasticsearch\n" {
		t.Errorf("after restart, get -o name printed %q", out)
	}
}

// checkContainsManifest asserts that got holds every field of the manifest:
// merging the manifest onto got changes nothing.
func checkContainsManifest(t *testing.T, file string, got *appsv1.DaemonSet) {
	t.Helper()
	y, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	gotJSON, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := strategicpatch.StrategicMergePatch(gotJSON, manifest, appsv1.DaemonSet{})
	if err != nil {
		t.Fatal(err)
	}
	var after appsv1.DaemonSet
	if err := json.Unmarshal(merged, &after); err != nil {
		t.Fatal(err)
	}
	after.TypeMeta = got.TypeMeta
	if !apiequality.Semantic.DeepEqual(&after, got) {
		a, _ := json.MarshalIndent(&after, "", " ")
		b, _ := json.MarshalIndent(got, "", " ")
		t.Errorf("%s: read-back object lacks manifest fields\nmanifest merged:\n%s\nread back:\n%s", file, a, b)
	}
}
