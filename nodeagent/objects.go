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
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	resources "github.com/everynode/everynode/resources/core"
)

// objectsDir is where the referenced ConfigMaps and Secrets are kept, under
// DataDir: objects/<resource>/<namespace>/<name>.json, mode 0600.
const objectsDir = "objects"

// objectRef names one ConfigMap or Secret a pod of this node uses.
type objectRef struct {
	Resource  *resources.Resource
	Namespace string
	Name      string
}

func (r objectRef) String() string { return r.Resource.Name + "/" + r.Namespace + "/" + r.Name }

// notFound is kubelet's error for a missing ConfigMap or Secret
// (`configmap "x" not found`).
func (r objectRef) notFound() error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: r.Resource.Singular}, r.Name)
}

// objectCache holds the ConfigMaps and Secrets the node's pods refer to.
// Each one in use is watched by name (the node authorizer lets a node read
// exactly these); a change enqueues the pods using it. A copy is kept on
// disk, so a restarted agent with the server unreachable starts its pods
// with the last known content; the copy is removed when no pod uses it.
type objectCache struct {
	api     client.Interface
	dir     string // DataDir/objects; empty: no disk copy
	clock   clock.WithTicker
	log     *slog.Logger
	changed func(types.UID)

	mu      sync.Mutex
	ctx     context.Context // the watches' parent; nil before start
	wg      sync.WaitGroup
	entries map[objectRef]*objectEntry
	uses    map[types.UID][]objectRef
}

type objectEntry struct {
	// known: obj is the API's (or the disk copy's) answer; obj nil is "not
	// found".
	known bool
	obj   resources.Object
	users map[types.UID]bool
	stop  context.CancelFunc
}

func newObjectCache(api client.Interface, dataDir string, clk clock.WithTicker, log *slog.Logger, changed func(types.UID)) *objectCache {
	c := &objectCache{api: api, clock: clk, log: log, changed: changed,
		entries: make(map[objectRef]*objectEntry), uses: make(map[types.UID][]objectRef)}
	if dataDir != "" {
		c.dir = filepath.Join(dataDir, objectsDir)
	}
	return c
}

// start lets use start watches under ctx; wait (after ctx ended) waits for
// them to stop.
func (c *objectCache) start(ctx context.Context) {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
}

func (c *objectCache) wait() { c.wg.Wait() }

// use records that pod uid uses refs (and nothing else): new references are
// watched, ones no pod uses any more are dropped with their disk copy.
func (c *objectCache) use(uid types.UID, refs []objectRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := make(map[objectRef]bool, len(refs))
	for _, r := range refs {
		want[r] = true
		e, ok := c.entries[r]
		if !ok {
			e = &objectEntry{users: map[types.UID]bool{}}
			c.entries[r] = e
			if c.ctx != nil && c.ctx.Err() == nil {
				ctx, cancel := context.WithCancel(c.ctx)
				e.stop = cancel
				c.wg.Add(1)
				go func() {
					defer c.wg.Done()
					c.watch(ctx, r)
				}()
			}
		}
		e.users[uid] = true
	}
	for _, r := range c.uses[uid] {
		if want[r] {
			continue
		}
		e := c.entries[r]
		if e == nil {
			continue
		}
		delete(e.users, uid)
		if len(e.users) == 0 {
			if e.stop != nil {
				e.stop()
			}
			delete(c.entries, r)
			if err := c.removeCopy(r); err != nil {
				c.log.Warn("remove kept object", "object", r.String(), "err", err)
			}
		}
	}
	if len(refs) == 0 {
		delete(c.uses, uid)
		return
	}
	c.uses[uid] = refs
}

// get returns the object, its last known content when the server is
// unreachable, or kubelet's not-found error. An object not seen yet is read
// from the API, then from the disk copy.
func (c *objectCache) get(ctx context.Context, r objectRef) (resources.Object, error) {
	c.mu.Lock()
	if e := c.entries[r]; e != nil && e.known {
		obj := e.obj
		c.mu.Unlock()
		if obj == nil {
			return nil, r.notFound()
		}
		return obj, nil
	}
	c.mu.Unlock()
	gctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	obj, err := c.api.Get(gctx, r.Resource, r.Namespace, r.Name)
	switch {
	case err == nil:
		c.set(r, obj, false)
		return obj, nil
	case apierrors.IsNotFound(err):
		c.set(r, nil, false)
		return nil, r.notFound()
	}
	kept, kerr := c.loadCopy(r)
	if kerr != nil {
		c.log.Warn("read kept object", "object", r.String(), "err", kerr)
	}
	if kept == nil {
		return nil, fmt.Errorf("get %s %s/%s (no copy kept on this node): %w", r.Resource.Singular, r.Namespace, r.Name, err)
	}
	c.set(r, kept, false)
	return kept, nil
}

// set records obj (nil: not found) for r, keeps its disk copy, and with
// notify enqueues the pods using r when it changed.
func (c *objectCache) set(r objectRef, obj resources.Object, notify bool) {
	c.mu.Lock()
	e := c.entries[r]
	if e == nil {
		c.mu.Unlock()
		return // no longer used
	}
	if !notify && e.known {
		c.mu.Unlock()
		return // a read raced with the watch, whose answer is newer
	}
	same := e.known && reflect.DeepEqual(payloadOf(e.obj), payloadOf(obj))
	e.known, e.obj = true, obj
	var users []types.UID
	for u := range e.users {
		users = append(users, u)
	}
	if !same {
		var err error
		if obj == nil {
			err = c.removeCopy(r)
		} else {
			err = c.saveCopy(r, obj)
		}
		if err != nil {
			c.log.Warn("keep object on disk", "object", r.String(), "err", err)
		}
	}
	c.mu.Unlock()
	if same || !notify {
		return
	}
	for _, u := range users {
		c.changed(u)
	}
}

// payloadOf is what pods see of an object.
func payloadOf(obj resources.Object) any {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return [2]any{o.Data, o.BinaryData}
	case *corev1.Secret:
		return o.Data
	}
	return nil
}

// watch keeps r current until ctx ends: a list by name (which says
// authoritatively whether it exists), then a watch from there, again after
// each end with a back-off.
func (c *objectCache) watch(ctx context.Context, r objectRef) {
	const maxDelay = 30 * time.Second
	delay := time.Second
	for ctx.Err() == nil {
		progressed, err := c.watchOnce(ctx, r)
		if ctx.Err() != nil {
			return
		}
		if progressed {
			delay = time.Second
		}
		if err != nil {
			c.log.Debug("watch of referenced object ended", "object", r.String(), "err", err, "retryIn", delay)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(delay):
		}
		if !progressed {
			delay = min(2*delay, maxDelay)
		}
	}
}

func (c *objectCache) watchOnce(ctx context.Context, r objectRef) (bool, error) {
	opts := client.ListOptions{FieldSelector: "metadata.name=" + r.Name}
	lctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	items, rv, err := c.api.List(lctx, r.Resource, r.Namespace, opts)
	cancel()
	if err != nil {
		return false, err
	}
	var obj resources.Object
	if len(items) > 0 {
		obj = items[0]
	}
	c.set(r, obj, true)
	opts.ResourceVersion = rv
	w, err := c.api.Watch(ctx, r.Resource, r.Namespace, opts)
	if err != nil {
		return true, err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added, watch.Modified:
			if o, ok := ev.Object.(resources.Object); ok {
				c.set(r, o, true)
			}
		case watch.Deleted:
			c.set(r, nil, true)
		case watch.Error:
			return true, apierrors.FromObject(ev.Object)
		}
	}
	return true, nil
}

func (c *objectCache) copyPath(r objectRef) string {
	return filepath.Join(c.dir, r.Resource.Name, r.Namespace, r.Name+".json")
}

// saveCopy writes obj's disk copy atomically, readable by root only.
func (c *objectCache) saveCopy(r objectRef, obj resources.Object) error {
	if c.dir == "" {
		return nil
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	p := c.copyPath(r)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

func (c *objectCache) removeCopy(r objectRef) error {
	if c.dir == "" {
		return nil
	}
	if err := os.Remove(c.copyPath(r)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// loadCopy reads r's disk copy; nil when there is none.
func (c *objectCache) loadCopy(r objectRef) (resources.Object, error) {
	if c.dir == "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.copyPath(r))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var obj resources.Object
	switch r.Resource {
	case resources.ConfigMaps:
		obj = &corev1.ConfigMap{}
	case resources.Secrets:
		obj = &corev1.Secret{}
	default:
		return nil, fmt.Errorf("no disk copy of %s", r.Resource.Name)
	}
	if err := json.Unmarshal(b, obj); err != nil {
		return nil, err
	}
	return obj, nil
}
