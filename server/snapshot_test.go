package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

func copyKeys(t *testing.T, from, to string) {
	t.Helper()
	for _, f := range []string{pki.CACertFile, pki.CAKeyFile, pki.SecretFile, store.EncryptionKeyFile} {
		b, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSnapshotSaveRestore: a snapshot of a server restored onto a fresh
// data dir (with the old key material) brings every object back with its
// resourceVersion; a damaged copy is refused with one line and writes
// nothing; scheduled snapshots are kept to the retention.
func TestSnapshotSaveRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	defer testkit.LeakCheck(t)()
	ctx := context.Background()
	c1 := clusterConfig(t, "snap")
	c1.SnapshotInterval, c1.SnapshotRetention = 100*time.Millisecond, 2
	s1, err := Start(ctx, c1)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keep", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	cm.Kind, cm.APIVersion = "ConfigMap", "v1"
	created, err := s1.Admin().Create(ctx, cm, client.WriteOptions{})
	if err != nil {
		s1.Close()
		t.Fatal(err)
	}
	nsBefore, _, err := s1.Admin().List(ctx, resources.Namespaces, "", client.ListOptions{})
	if err != nil {
		s1.Close()
		t.Fatal(err)
	}
	path, err := SaveSnapshot(ctx, s1.Etcd(), s1.DataDir(), "manual")
	if err != nil {
		s1.Close()
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		all, err := ListSnapshots(s1.DataDir())
		if err != nil {
			return err
		}
		n := 0
		for _, si := range all {
			if strings.HasPrefix(si.Name, scheduledPrefix) {
				n++
			}
		}
		if n != 2 {
			return fmt.Errorf("%d scheduled snapshots, want the retention, 2", n)
		}
		return nil
	})
	s1.Close()
	all, _ := ListSnapshots(s1.DataDir())
	if n := len(all); n > 3 {
		t.Fatalf("%d snapshots kept, want manual + 2 scheduled", n)
	}

	// A damaged copy: refused, nothing written.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	bad := filepath.Join(t.TempDir(), "bad.db")
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	badDir := t.TempDir()
	err = RestoreSnapshot(bad, badDir, RestoreOptions{})
	if err == nil || !strings.Contains(err.Error(), "damaged") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("restoring a damaged snapshot: %v", err)
	}
	if ents, _ := os.ReadDir(badDir); len(ents) != 0 {
		t.Fatalf("a refused restore left %v", ents)
	}

	dir2 := t.TempDir()
	if err := RestoreSnapshot(path, dir2, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := RestoreSnapshot(path, dir2, RestoreOptions{}); err == nil || !strings.Contains(err.Error(), "fresh data dir") {
		t.Fatalf("restoring over etcd data: %v", err)
	}
	copyKeys(t, c1.DataDir, dir2)
	c2 := clusterConfig(t, "restored")
	c2.DataDir = dir2
	s2, err := Start(ctx, c2)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := s2.Admin().Get(ctx, resources.ConfigMaps, "default", "keep")
	if err != nil {
		t.Fatal(err)
	}
	if got.GetResourceVersion() != created.GetResourceVersion() || got.GetUID() != created.GetUID() {
		t.Fatalf("restored object rv %s uid %s, want %s %s", got.GetResourceVersion(), got.GetUID(), created.GetResourceVersion(), created.GetUID())
	}
	nsAfter, _, err := s2.Admin().List(ctx, resources.Namespaces, "", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nsAfter) != len(nsBefore) {
		t.Fatalf("namespaces after restore: %d, before: %d", len(nsAfter), len(nsBefore))
	}
	if s2.AdminToken() != s1.AdminToken() {
		t.Fatal("the restored server has other credentials")
	}
}

// TestSnapshotRestoreClusterInit: a snapshot restored as the first server
// of a cluster serves its objects, and another server joins it.
func TestSnapshotRestoreClusterInit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	defer testkit.LeakCheck(t)()
	ctx := context.Background()
	c1 := clusterConfig(t, "orig")
	s1, err := Start(ctx, c1)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keep", Namespace: "default"}}
	cm.Kind, cm.APIVersion = "ConfigMap", "v1"
	if _, err := s1.Admin().Create(ctx, cm, client.WriteOptions{}); err != nil {
		s1.Close()
		t.Fatal(err)
	}
	path, err := SaveSnapshot(ctx, s1.Etcd(), s1.DataDir(), "x")
	s1.Close()
	if err != nil {
		t.Fatal(err)
	}
	c2 := clusterConfig(t, "first")
	if err := RestoreSnapshot(path, c2.DataDir, RestoreOptions{Name: "first", PeerURL: fmt.Sprintf("https://127.0.0.1:%d", c2.PeerPort)}); err != nil {
		t.Fatal(err)
	}
	copyKeys(t, c1.DataDir, c2.DataDir)
	s2 := startServer(ctx, t, c2)
	defer s2.Close()
	s3 := startServer(ctx, t, joinConfig(t, "second", s2, s2.JoinToken()))
	defer s3.Close()
	if got := voters(t, s2); len(got) != 2 {
		t.Fatalf("members %v", got)
	}
	if _, err := s3.Admin().Get(ctx, resources.ConfigMaps, "default", "keep"); err != nil {
		t.Fatal(err)
	}
}
