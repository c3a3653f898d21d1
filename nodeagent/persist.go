package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// assignedFile is where the pods assigned through the API are kept, under
// DataDir/pods/ beside the pods' own directories (named by UID).
const assignedFile = "assigned.json"

// podStore keeps the last desired set from the API on disk, so the agent
// runs its pods again after a restart while the server is unreachable.
type podStore struct {
	path, node string
}

// storedPods is the file's content.
type storedPods struct {
	// Node is the node the pods were assigned to; a data dir reused under
	// another node name is not trusted.
	Node string        `json:"node"`
	Pods []*corev1.Pod `json:"pods"`
}

func newPodStore(dataDir, node string) *podStore {
	return &podStore{path: filepath.Join(dataDir, "pods", assignedFile), node: node}
}

// load returns the stored pods; ok is false when there is no usable copy.
func (s *podStore) load() (pods []*corev1.Pod, ok bool, err error) {
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("nodeagent: read %s: %w", s.path, err)
	}
	var sp storedPods
	if err := json.Unmarshal(b, &sp); err != nil {
		return nil, false, fmt.Errorf("nodeagent: read %s: %w", s.path, err)
	}
	if sp.Node != s.node {
		return nil, false, fmt.Errorf("nodeagent: %s holds the pods of node %q, not %q", s.path, sp.Node, s.node)
	}
	return sp.Pods, true, nil
}

// save writes pods atomically: a synced temporary file renamed over the
// old copy, so a crash or power loss leaves the old or the new set, never
// a torn file.
func (s *podStore) save(pods map[types.UID]*corev1.Pod) error {
	sp := storedPods{Node: s.node, Pods: make([]*corev1.Pod, 0, len(pods))}
	for _, p := range pods {
		c := *p // shallow: only read while encoding
		c.ManagedFields = nil
		sp.Pods = append(sp.Pods, &c)
	}
	sort.Slice(sp.Pods, func(i, j int) bool { return podRef(sp.Pods[i]) < podRef(sp.Pods[j]) })
	b, err := json.Marshal(sp)
	if err != nil {
		return fmt.Errorf("nodeagent: encode pods: %w", err)
	}
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("nodeagent: save pods: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+assignedFile+".*.tmp")
	if err != nil {
		return fmt.Errorf("nodeagent: save pods: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("nodeagent: save pods to %s: %w", s.path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable; best effort
		_ = d.Close()
	}
	return nil
}

// diskSource wraps the API source: it first hands the sink the pods kept on
// disk (so they run even when the server is down at start), then lets the
// API source feed the sink, saving every change to disk before passing it
// on, so a pod is on disk before its containers are created.
type diskSource struct {
	inner PodSource
	store *podStore
	log   *slog.Logger
}

func (d *diskSource) Run(ctx context.Context, sink PodSink) error {
	ps := &persistSink{sink: sink, store: d.store, log: d.log, pods: make(map[types.UID]*corev1.Pod)}
	pods, ok, err := d.store.load()
	if err != nil {
		d.log.Warn("ignoring the pods kept on disk", "err", err)
	}
	if ok {
		d.log.Info("pods restored from disk until the API answers", "pods", len(pods))
		for _, p := range pods {
			ps.pods[p.UID] = p
		}
		sink.Replace(pods)
	}
	return d.inner.Run(ctx, ps)
}

// persistSink saves the set to disk, then forwards each change.
type persistSink struct {
	sink  PodSink
	store *podStore
	log   *slog.Logger

	mu      sync.Mutex
	pods    map[types.UID]*corev1.Pod
	failing bool // the last save failed (logged once)
}

func (p *persistSink) Replace(pods []*corev1.Pod) {
	p.mu.Lock()
	p.pods = make(map[types.UID]*corev1.Pod, len(pods))
	for _, pod := range pods {
		p.pods[pod.UID] = pod
	}
	p.saveLocked()
	p.mu.Unlock()
	p.sink.Replace(pods)
}

func (p *persistSink) Update(pod *corev1.Pod) {
	p.mu.Lock()
	p.pods[pod.UID] = pod
	p.saveLocked()
	p.mu.Unlock()
	p.sink.Update(pod)
}

func (p *persistSink) Remove(uid types.UID) {
	p.mu.Lock()
	_, had := p.pods[uid]
	delete(p.pods, uid)
	if had {
		p.saveLocked()
	}
	p.mu.Unlock()
	p.sink.Remove(uid)
}

func (p *persistSink) saveLocked() {
	err := p.store.save(p.pods)
	switch {
	case err != nil && !p.failing:
		p.log.Error("cannot keep the pods on disk; they will not come back if the agent restarts while the server is down", "err", err)
	case err == nil && p.failing:
		p.log.Info("pods kept on disk again")
	}
	p.failing = err != nil
}
