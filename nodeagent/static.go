package nodeagent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"
)

// DefaultManifestPoll is how often the manifest directory is re-read: an
// edit shows within a couple of seconds without a file-notification
// dependency.
const DefaultManifestPoll = 2 * time.Second

// Annotations of static and mirror pods, as kubelet sets them.
const (
	// AnnotationConfigSource says where a pod came from: "file" for static
	// pods, "api" for the others.
	AnnotationConfigSource = "kubernetes.io/config.source"
	// AnnotationConfigHash is a static pod's hash (its UID).
	AnnotationConfigHash = "kubernetes.io/config.hash"
	// AnnotationConfigMirror marks a mirror pod; its value is the static
	// pod's hash.
	AnnotationConfigMirror = "kubernetes.io/config.mirror"
)

// isMirrorPod reports whether p is the API's mirror of a static pod.
func isMirrorPod(p *corev1.Pod) bool {
	_, ok := p.Annotations[AnnotationConfigMirror]
	return ok
}

// staticPods reads the manifest directory into the static pod set and holds
// what the mirror loop publishes.
//
// A static pod is named <name>-<node> (the name its mirror pod has in the
// API), runs in the manifest's namespace ("default" when none), and has a
// UID derived from the node, the file and the pod's content: an edit makes
// a new UID, so the old pod is stopped and the new one started.
type staticPods struct {
	dir, node string
	log       *slog.Logger
	pokeC     chan struct{} // wakes the mirror loop

	// files is the last read of each manifest, missing whether the
	// directory was absent; touched only by run.
	files   map[string]manifestFile
	missing bool

	mu     sync.Mutex
	status map[types.UID]corev1.PodStatus // latest status of each static pod

	// Mirror loop state, touched only by the mirror loop.
	mirrors    map[string]*mirrorState // by namespace/name
	swept      bool                    // stale mirrors of earlier runs removed
	mirrorsErr bool                    // last pass failed (logged once)
}

// manifestFile is one file's last read: its content hash and the pods of
// its last good content.
type manifestFile struct {
	sum  [sha256.Size]byte
	pods []*corev1.Pod
}

func newStaticPods(dir, node string, log *slog.Logger) *staticPods {
	return &staticPods{
		dir: dir, node: node, log: log.With("manifestDir", dir),
		pokeC:   make(chan struct{}, 1),
		files:   make(map[string]manifestFile),
		status:  make(map[types.UID]corev1.PodStatus),
		mirrors: make(map[string]*mirrorState),
	}
}

// poke wakes the mirror loop; it never blocks.
func (s *staticPods) poke() {
	select {
	case s.pokeC <- struct{}{}:
	default:
	}
}

func (s *staticPods) setStatus(uid types.UID, status corev1.PodStatus) {
	s.mu.Lock()
	s.status[uid] = status
	s.mu.Unlock()
	s.poke()
}

func (s *staticPods) statusOf(uid types.UID) (corev1.PodStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.status[uid]
	return st, ok
}

// keepStatus drops the statuses of UIDs no longer static.
func (s *staticPods) keepStatus(pods []*corev1.Pod) {
	keep := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		keep[p.UID] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid := range s.status {
		if !keep[uid] {
			delete(s.status, uid)
		}
	}
}

// run re-reads the directory every period and replaces the static set in
// sink when a file changed (and once at start), until ctx ends.
func (s *staticPods) run(ctx context.Context, clk clock.Clock, period time.Duration, sink PodSink) {
	first := true
	for {
		if pods, changed := s.scan(); changed || first {
			first = false
			sink.Replace(pods)
			s.keepStatus(pods)
			s.poke()
		}
		select {
		case <-ctx.Done():
			return
		case <-clk.After(period):
		}
	}
}

// scan reads the directory. It returns the static pods and whether any
// file was added, changed or removed since the last scan. A file that does
// not parse keeps the pods of its last good content (an editor's half-saved
// file does not stop a pod); a directory that cannot be read keeps the last
// set.
func (s *staticPods) scan() ([]*corev1.Pod, bool) {
	entries, err := os.ReadDir(s.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !s.missing {
			s.log.Info("the manifest directory does not exist (yet); no static pods")
			s.missing = true
		}
	case err != nil:
		s.log.Warn("cannot read the manifest directory; keeping the static pods as they are", "err", err)
		return s.current(false), false
	default:
		s.missing = false
	}
	changed := false
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || !isManifestName(name) {
			continue
		}
		path := filepath.Join(s.dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			if _, ok := s.files[path]; ok {
				seen[path] = true // keep its last pods
			}
			s.log.Warn("cannot read a static pod manifest", "file", path, "err", err)
			continue
		}
		seen[path] = true
		sum := sha256.Sum256(data)
		prev, known := s.files[path]
		if known && prev.sum == sum {
			continue
		}
		changed = true
		pods, warnings, err := parseManifest(path, data, s.node)
		for _, w := range warnings {
			s.log.Warn("static pod manifest", "file", path, "warning", w)
		}
		if err != nil {
			s.log.Error("static pod manifest does not parse; keeping its last good version", "file", path, "err", err)
			s.files[path] = manifestFile{sum: sum, pods: prev.pods}
			continue
		}
		s.files[path] = manifestFile{sum: sum, pods: pods}
		s.log.Info("static pod manifest loaded", "file", path, "pods", len(pods))
	}
	for path := range s.files {
		if !seen[path] {
			delete(s.files, path)
			changed = true
			s.log.Info("static pod manifest removed", "file", path)
		}
	}
	return s.current(changed), changed
}

// current returns the pods of every file, ordered by file; of two pods with
// the same namespace and name the first is kept (and the other logged when
// warn is set).
func (s *staticPods) current(warn bool) []*corev1.Pod {
	paths := make([]string, 0, len(s.files))
	for p := range s.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var out []*corev1.Pod
	for _, p := range paths {
		out = append(out, s.files[p].pods...)
	}
	seen := map[string]bool{}
	pods := out[:0:0]
	for _, p := range out {
		k := podRef(p)
		if seen[k] {
			if warn {
				s.log.Warn("two static pods have the same name; running the first", "pod", k)
			}
			continue
		}
		seen[k] = true
		pods = append(pods, p)
	}
	return pods
}

func isManifestName(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// parseManifest reads the Pod documents of one manifest file (YAML or
// JSON, several YAML documents allowed). Documents of other kinds are
// skipped with a warning; an invalid Pod fails the whole file.
func parseManifest(path string, data []byte, node string) (pods []*corev1.Pod, warnings []string, err error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, warnings, fmt.Errorf("document %d: %w", i+1, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, warnings, fmt.Errorf("document %d: %w", i+1, err)
		}
		if tm.Kind == "" && tm.APIVersion == "" && len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue // empty document
		}
		if tm.Kind != "Pod" || tm.APIVersion != "v1" {
			warnings = append(warnings, fmt.Sprintf("document %d: %s %s is not a v1 Pod; skipped", i+1, tm.APIVersion, tm.Kind))
			continue
		}
		pod := &corev1.Pod{}
		if err := yaml.Unmarshal(doc, pod); err != nil {
			return nil, warnings, fmt.Errorf("document %d: %w", i+1, err)
		}
		if err := staticPod(pod, path, node); err != nil {
			return nil, warnings, fmt.Errorf("document %d: %w", i+1, err)
		}
		pods = append(pods, pod)
	}
	return pods, warnings, nil
}

// stripComments drops YAML comment lines, to tell an empty document.
func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) == 0 || t[0] == '#' || bytes.Equal(t, []byte("---")) || bytes.Equal(t, []byte("null")) {
			continue
		}
		out = append(out, line...)
	}
	return out
}

// staticPod checks a manifest's pod and turns it into this node's static
// pod: named <name>-<node>, bound to node, with a UID from node, file and
// content, and the config annotations.
func staticPod(pod *corev1.Pod, path, node string) error {
	if pod.Name == "" {
		return errors.New("metadata.name is required")
	}
	if len(pod.Spec.Containers) == 0 {
		return fmt.Errorf("pod %s: spec.containers: at least one container is required", pod.Name)
	}
	names := map[string]bool{}
	for _, c := range append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		switch {
		case c.Name == "":
			return fmt.Errorf("pod %s: a container has no name", pod.Name)
		case names[c.Name]:
			return fmt.Errorf("pod %s: container name %q used twice", pod.Name, c.Name)
		case c.Image == "":
			return fmt.Errorf("pod %s: container %q has no image", pod.Name, c.Name)
		}
		names[c.Name] = true
	}
	if pod.Namespace == "" {
		pod.Namespace = corev1.NamespaceDefault
	}
	pod.Name = pod.Name + "-" + node
	if msgs := validation.IsDNS1123Subdomain(pod.Name); len(msgs) > 0 {
		return fmt.Errorf("pod name %s: %s", pod.Name, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Label(pod.Namespace); len(msgs) > 0 {
		return fmt.Errorf("namespace %s: %s", pod.Namespace, strings.Join(msgs, "; "))
	}
	pod.Spec.NodeName = node
	if pod.Spec.RestartPolicy == "" {
		pod.Spec.RestartPolicy = corev1.RestartPolicyAlways // the API's default
	}
	pod.UID, pod.ResourceVersion, pod.Generation = "", "", 0
	pod.ManagedFields, pod.OwnerReferences = nil, nil
	pod.Status = corev1.PodStatus{}
	content, err := json.Marshal(pod)
	if err != nil {
		return fmt.Errorf("pod %s: %w", pod.Name, err)
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(node), []byte(path), content} {
		h.Write(part)
		h.Write([]byte{0})
	}
	sum := hex.EncodeToString(h.Sum(nil)[:16])
	pod.UID = types.UID(sum[0:8] + "-" + sum[8:12] + "-" + sum[12:16] + "-" + sum[16:20] + "-" + sum[20:32])
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	delete(pod.Annotations, AnnotationConfigMirror)
	pod.Annotations[AnnotationConfigSource] = "file"
	pod.Annotations[AnnotationConfigHash] = string(pod.UID)
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
	return nil
}
