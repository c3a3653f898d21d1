package daemonset

import (
	"context"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestBurstReplicas: one sync creates (and deletes) at most 250 pods; the
// rest follow in the next sync (docs/controller-rules.md §2.6).
func TestBurstReplicas(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	addNodes(tc.nodeStore, 0, 300, nil)
	tc.dsStore.Add(ds)
	expectSyncDaemonSets(t, tc, ds, BurstReplicas, 0, 0)
	tc.resetCounters()
	expectSyncDaemonSets(t, tc, ds, 50, 0, 0)
	tc.resetCounters()
	expectSyncDaemonSets(t, tc, ds, 0, 0, 0)
}

// TestSlowStartStopsAfterFailedBatch: a failing batch stops further creates
// and lowers the expectations by the skipped count.
func TestSlowStartStopsAfterFailedBatch(t *testing.T) {
	ds := newDaemonSet("foo")
	tc := newTestController(t, ds)
	tc.podControl.CreateLimit = 2 // batch 1 ok, batch 2 (2 pods) half fails
	addNodes(tc.nodeStore, 0, 20, nil)
	tc.dsStore.Add(ds)
	if err := tc.sync(context.Background(), dsKey(ds)); err == nil {
		t.Fatal("sync with failing creates returned nil")
	}
	if n := tc.podControl.CreateCallCount; n != 3 {
		t.Errorf("%d create calls, want 3 (batches 1 and 2)", n)
	}
	if !tc.expectations.Satisfied(dsKey(ds)) {
		add, del, _ := tc.expectations.get(dsKey(ds))
		t.Errorf("expectations left add=%d del=%d", add, del)
	}
}

// TestImportBoundaries polices the layering: the controller talks to the API
// only through client.Interface (no apiserver, no store, no Docker).
func TestImportBoundaries(t *testing.T) {
	forbidden := []string{"/apiserver", "/store", "github.com/docker/", "go.etcd.io/etcd/server"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if strings.Contains(path, bad) && strings.HasPrefix(path, "github.com/everynode/") || strings.HasPrefix(path, bad) {
					t.Errorf("%s imports %s", f, path)
				}
			}
		}
	}
}

// Interface guards.
var (
	_ statusWriter  = (*fakeStatusWriter)(nil)
	_ podControl    = (*fakePodControl)(nil)
	_ eventRecorder = (*fakeRecorder)(nil)
)
