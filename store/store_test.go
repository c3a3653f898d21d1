package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

func TestCloseIsIdempotentAndLeakFree(t *testing.T) {
	checkLeaks := testkit.LeakCheck(t)
	s, err := Open(testCtx(t), Config{DataDir: t.TempDir(), Logger: testLogger(), unsafeNoFsync: true, CompactInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	mustCreate(t, s, resources.Pods, newPod("default", "p", "n1", nil))
	// Watchers in every state: unread with pending events, indexed, stopped.
	var ws []watch.Interface
	for _, sel := range []string{"", "spec.nodeName=n1", "spec.nodeName=n2"} {
		var s2 Selector
		if sel != "" {
			s2.Field = mustField(t, sel)
		}
		w, err := s.Watch(ctx, resources.Pods, "", 0, s2)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	ws[2].Stop()

	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Errorf("Close again: %v", err)
	}
	for _, w := range ws {
		for range w.ResultChan() {
		}
		w.Stop()
	}
	if _, err := s.Watch(ctx, resources.Pods, "", 0, Selector{}); err == nil {
		t.Error("Watch after Close succeeded")
	}
	checkLeaks()
}

func TestExternalEndpoints(t *testing.T) {
	s1 := openTest(t)
	ctx := testCtx(t)
	s2, err := Open(ctx, Config{Endpoints: []string{s1.embedded.clientURL}, Logger: testLogger(), CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.embedded != nil {
		t.Fatal("external mode embedded an etcd")
	}

	w, err := s2.Watch(ctx, resources.Pods, "", 0, Selector{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	p := mustCreate(t, s1, resources.Pods, newPod("default", "from-s1", "", nil))
	expectEvents(t, w, want{watch.Added, "from-s1", rvOf(t, p)})
	got, err := s2.Get(ctx, resources.Pods, "default", "from-s1")
	if err != nil || got.GetResourceVersion() != p.GetResourceVersion() {
		t.Fatalf("Get through s2: %v %v", got, err)
	}
	q := mustCreate(t, s2, resources.Pods, newPod("default", "from-s2", "", nil))
	items, rv, err := s1.List(ctx, resources.Pods, "", Selector{})
	if err != nil || len(items) != 2 || rv < rvOf(t, q) {
		t.Fatalf("List through s1: %v rv=%d err=%v", names(items), rv, err)
	}
	// Progress notifications over a real gRPC stream: a write to another
	// resource is reflected in the pods list's resourceVersion.
	n := &corev1.Node{}
	n.Name = "n1"
	nrv := rvOf(t, mustCreate(t, s1, resources.Nodes, n))
	if _, rv, err := s2.List(ctx, resources.Pods, "", Selector{}); err != nil || rv < nrv {
		t.Fatalf("s2 List pods after node write: rv %d < %d (%v)", rv, nrv, err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	// Closing the external client leaves the cluster running.
	if _, err := s1.Get(ctx, resources.Pods, "default", "from-s2"); err != nil {
		t.Fatalf("s1 after s2 closed: %v", err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Logger: testLogger(), unsafeNoFsync: true, CompactInterval: -1}
	ctx := testCtx(t)
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	created := mustCreate(t, s, resources.DaemonSets, appsDaemonSet())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, cfg) // new free ports, same data
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	got, err := s.Get(ctx, resources.DaemonSets, "kube-system", "agent")
	if err != nil || got.GetResourceVersion() != created.GetResourceVersion() {
		t.Fatalf("after reopen: %v %v", got, err)
	}
	items, _, err := s.List(ctx, resources.DaemonSets, "", Selector{})
	if err != nil || len(items) != 1 {
		t.Fatalf("List after reopen: %v %v", names(items), err)
	}
}

func TestOpenRequiresDataDirOrEndpoints(t *testing.T) {
	if _, err := Open(testCtx(t), Config{}); err == nil {
		t.Fatal("Open with empty config succeeded")
	}
}

func TestPeriodicCompaction(t *testing.T) {
	s := openTest(t, func(c *Config) { c.CompactInterval = 50 * time.Millisecond })
	ctx := testCtx(t)
	old := mustCreate(t, s, resources.Pods, newPod("default", "p", "", nil))
	mustCreate(t, s, resources.Pods, newPod("default", "q", "", nil))
	// The compactor needs two ticks: one to note the revision, one to compact.
	testkit.Eventually(t, 10*time.Second, func() error {
		_, err := s.Client().Get(ctx, "/registry/pods/default/p", clientv3.WithRev(rvOf(t, old)))
		if errors.Is(err, rpctypes.ErrCompacted) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return errors.New("revision not compacted yet")
	})
	if _, err := s.Watch(ctx, resources.Pods, "", rvOf(t, old)-1, Selector{}); !IsGone(err) {
		t.Fatalf("Watch from before compaction: got %v, want Gone", err)
	}
}

func TestFieldSet(t *testing.T) {
	pod := newPod("ns", "p", "n1", nil)
	pod.Status.Phase = corev1.PodRunning
	node := &corev1.Node{}
	node.Name = "n1"
	node.Spec.Unschedulable = true
	ev := &corev1.Event{Reason: "Started", Type: "Normal", InvolvedObject: corev1.ObjectReference{
		Kind: "Pod", Namespace: "ns", Name: "p", UID: "u1", FieldPath: "spec.containers{c}"}}
	ev.Namespace, ev.Name = "ns", "p.1"
	tests := []struct {
		r    *resources.Resource
		obj  resources.Object
		want map[string]string
	}{
		{resources.Pods, pod, map[string]string{"metadata.name": "p", "metadata.namespace": "ns",
			"spec.nodeName": "n1", "status.phase": "Running"}},
		{resources.Nodes, node, map[string]string{"metadata.name": "n1", "metadata.namespace": "", "spec.unschedulable": "true"}},
		{resources.Events, ev, map[string]string{"metadata.name": "p.1", "metadata.namespace": "ns",
			"involvedObject.kind": "Pod", "involvedObject.namespace": "ns", "involvedObject.name": "p",
			"involvedObject.uid": "u1", "involvedObject.fieldPath": "spec.containers{c}", "reason": "Started", "type": "Normal"}},
		{resources.DaemonSets, appsDaemonSet(), map[string]string{"metadata.name": "agent", "metadata.namespace": "kube-system"}},
	}
	for _, tc := range tests {
		got := FieldSet(tc.r, tc.obj)
		if fmt.Sprint(map[string]string(got)) != fmt.Sprint(tc.want) {
			t.Errorf("FieldSet(%s) = %v, want %v", tc.r.Name, got, tc.want)
		}
		for f := range got {
			if !supportedFields(tc.r)[f] {
				t.Errorf("%s: field %s provided but not accepted in selectors", tc.r.Name, f)
			}
		}
		if len(supportedFields(tc.r)) != len(got) {
			t.Errorf("%s: selectors accept fields FieldSet does not provide", tc.r.Name)
		}
		// The watch cache's compact form answers the same.
		of := &objectFields{names: fieldNames(tc.r), values: fieldValues(tc.r, tc.obj)}
		for f, v := range tc.want {
			if !of.Has(f) || of.Get(f) != v {
				t.Errorf("%s: objectFields %s = %q (has %v), want %q", tc.r.Name, f, of.Get(f), of.Has(f), v)
			}
		}
		if of.Has("spec.other") || of.Get("spec.other") != "" {
			t.Errorf("%s: objectFields has an unknown field", tc.r.Name)
		}
	}
}

// An external-mode store keeps its watch caches across an etcd restart: the
// etcd client reconnects and resumes the cache's watch where it stopped, so
// open watchers see the writes made after the restart.
func TestExternalSurvivesEtcdRestart(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Logger: testLogger(), unsafeNoFsync: true, CompactInterval: -1}
	ctx := testCtx(t)
	etcd1, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ext, err := Open(ctx, Config{Endpoints: []string{etcd1.ClientURL()}, Logger: testLogger(), CompactInterval: -1})
	if err != nil {
		etcd1.Close()
		t.Fatal(err)
	}
	defer ext.Close()
	w, err := ext.Watch(ctx, resources.Pods, "", 0, Selector{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	before := mustCreate(t, etcd1, resources.Pods, newPod("default", "before", "", nil))
	expectEvents(t, w, want{watch.Added, "before", rvOf(t, before)})

	if err := etcd1.Close(); err != nil {
		t.Fatal(err)
	}
	etcd2, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("restart etcd: %v", err)
	}
	defer etcd2.Close()
	after := mustCreate(t, etcd2, resources.Pods, newPod("default", "after", "", nil))
	expectEvents(t, w, want{watch.Added, "after", rvOf(t, after)})
	items, rv, err := ext.List(ctx, resources.Pods, "", Selector{})
	if err != nil || len(items) != 2 || rv < rvOf(t, after) {
		t.Fatalf("List after restart: %v rv=%d err=%v", names(items), rv, err)
	}
}

// If a watch cache's etcd watch cannot resume because the history it missed
// was compacted, the cache re-lists, closes its watchers (they cannot be
// told what they missed) and answers Gone for the old resourceVersions.
func TestCacheRelistsAfterMissedCompaction(t *testing.T) {
	urlA := socketURL(filepath.Join(t.TempDir(), "a", "etcd.sock")) // a new dir: made 0700
	urlB := socketURL(filepath.Join(t.TempDir(), "b", "etcd.sock"))
	cfg := Config{DataDir: t.TempDir(), ClientURL: urlA, Logger: testLogger(), unsafeNoFsync: true, CompactInterval: -1}
	ctx := testCtx(t)
	etcd, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler) // the cache logs the expected lost history
	ext, err := Open(ctx, Config{Endpoints: []string{urlA}, Logger: quiet, CompactInterval: -1})
	if err != nil {
		etcd.Close()
		t.Fatal(err)
	}
	defer ext.Close()
	old := mustCreate(t, etcd, resources.Pods, newPod("default", "old", "", nil))
	w, err := ext.Watch(ctx, resources.Pods, "", 0, Selector{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	expectEvents(t, w, want{watch.Added, "old", rvOf(t, old)})

	// Behind ext's back (etcd on another URL): write and compact.
	if err := etcd.Close(); err != nil {
		t.Fatal(err)
	}
	cfgB := cfg
	cfgB.ClientURL = urlB
	if etcd, err = Open(ctx, cfgB); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, etcd, resources.Pods, newPod("default", "missed-1", "", nil))
	missed := mustCreate(t, etcd, resources.Pods, newPod("default", "missed-2", "", nil))
	if err := etcd.Compact(ctx, rvOf(t, missed)); err != nil {
		t.Fatal(err)
	}
	if err := etcd.Close(); err != nil {
		t.Fatal(err)
	}
	if etcd, err = Open(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()

	select {
	case e, ok := <-w.ResultChan():
		if ok {
			t.Fatalf("event %s %s after missed history; want the watch closed", e.Type, objName(e.Object))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("watch not closed after the cache lost history")
	}
	if _, err := ext.Watch(ctx, resources.Pods, "", rvOf(t, old), Selector{}); !IsGone(err) {
		t.Fatalf("Watch from before the re-list: got %v, want Gone", err)
	}
	items, _, err := ext.List(ctx, resources.Pods, "", Selector{})
	if err != nil || len(items) != 3 {
		t.Fatalf("List after re-list: %v %v", names(items), err)
	}
}

func TestErrReportsEmbeddedEtcdStop(t *testing.T) {
	s, err := Open(testCtx(t), Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler), unsafeNoFsync: true, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	s.embedded.etcd.Server.Stop() // as if etcd died under the store
	select {
	case err := <-s.Err():
		if err == nil {
			t.Fatal("nil error on Err")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no error on Err after etcd stopped")
	}
	if err := s.Close(); err != nil {
		t.Logf("Close after failure: %v", err)
	}
	if _, ok := <-s.Err(); ok {
		t.Fatal("Err not closed by Close")
	}
}

// TestEndedContextWritesNothing: a write whose context has already ended is
// not sent to etcd, so a caller told "deadline exceeded" knows it did not
// happen.
func TestEndedContextWritesNothing(t *testing.T) {
	s := openTest(t)
	ctx := testCtx(t)
	kept := mustCreate(t, s, resources.Pods, newPod("default", "kept", "n0", nil))
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Create(ended, resources.Pods, newPod("default", "late", "n0", nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("create with an ended context: %v", err)
	}
	changed := kept.DeepCopyObject().(*corev1.Pod)
	changed.Labels = map[string]string{"changed": "yes"}
	if _, err := s.Update(ended, resources.Pods, changed); !errors.Is(err, context.Canceled) {
		t.Fatalf("update with an ended context: %v", err)
	}
	if _, err := s.Delete(ended, resources.Pods, "default", "kept", nil); err == nil {
		t.Fatal("delete with an ended context succeeded")
	}
	if _, err := s.Get(ctx, resources.Pods, "default", "late"); !IsNotFound(err) {
		t.Fatalf("the cancelled create happened: %v", err)
	}
	got, err := s.Get(ctx, resources.Pods, "default", "kept")
	if err != nil || got.GetResourceVersion() != kept.GetResourceVersion() {
		t.Fatalf("kept pod changed or gone: %v %v", got, err)
	}
}
