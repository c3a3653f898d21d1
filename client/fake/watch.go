package fake

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/apiserver/strategy"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// matcher applies a List/Watch's label and field selectors, parsed and
// matched by the API server's rules.
type matcher struct {
	r     *resources.Resource
	label labels.Selector
	field fields.Selector
}

func newMatcher(r *resources.Resource, opts client.ListOptions) (*matcher, error) {
	ls, fs, err := strategy.ParseSelector(r, opts.LabelSelector, opts.FieldSelector)
	if err != nil {
		return nil, err
	}
	return &matcher{r: r, label: ls, field: fs}, nil
}

func (m *matcher) matches(o resources.Object) bool {
	return strategy.Matches(m.r, o, m.label, m.field)
}

// Watch implements client.Interface. ResourceVersion "" or "0" starts with a
// synthetic ADDED event per matching object; a version N replays every change
// after N, or delivers one watch.Error event with a 410 Status (then closes)
// when N is older than the kept history. Objects that start or stop matching
// the selectors arrive as ADDED or DELETED, as Kubernetes does.
func (c *Client) Watch(ctx context.Context, r *resources.Resource, namespace string, opts client.ListOptions) (watch.Interface, error) {
	m, err := newMatcher(r, opts)
	if err != nil {
		return nil, err
	}
	var from int64
	if opts.ResourceVersion != "" {
		from, err = strconv.ParseInt(opts.ResourceVersion, 10, 64)
		if err != nil || from < 0 {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q", opts.ResourceVersion))
		}
	}
	if !r.Namespaced {
		namespace = ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.record(Action{Verb: VerbWatch, Resource: r.Name, Namespace: namespace}); err != nil {
		return nil, err
	}
	w := &watcher{
		c: c, r: r, namespace: namespace, m: m,
		result: make(chan watch.Event),
		signal: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	switch {
	case from == 0:
		var keys []objKey
		for k := range c.objects {
			if k.r == r {
				keys = append(keys, k)
			}
		}
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].namespace != keys[j].namespace {
				return keys[i].namespace < keys[j].namespace
			}
			return keys[i].name < keys[j].name
		})
		for _, k := range keys {
			w.send(event{r: r, typ: watch.Added, obj: c.objects[k]})
		}
	case len(c.history) > 0 && c.history[0].rv > from+1:
		st := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, c.history[0].rv-1)).ErrStatus
		w.queue = append(w.queue, watch.Event{Type: watch.Error, Object: &st})
		w.final = true
	default:
		i := sort.Search(len(c.history), func(i int) bool { return c.history[i].rv > from })
		for _, ev := range c.history[i:] {
			w.send(ev)
		}
	}
	if !w.final {
		c.watchers[w] = struct{}{}
	}
	var timeout <-chan time.Time
	if opts.TimeoutSeconds > 0 {
		t := time.NewTimer(time.Duration(opts.TimeoutSeconds) * time.Second)
		timeout = t.C
		w.stopTimer = t.Stop
	}
	go w.run(ctx, timeout)
	return w, nil
}

// watcher is one Watch. Events are queued without bound so writers never
// block; run delivers them in order.
type watcher struct {
	c         *Client
	r         *resources.Resource
	namespace string
	m         *matcher
	result    chan watch.Event
	signal    chan struct{}
	done      chan struct{}
	stopOnce  sync.Once
	stopTimer func() bool

	mu    sync.Mutex
	queue []watch.Event
	final bool // close after delivering the queue
}

var _ watch.Interface = (*watcher)(nil)

// send filters and queues one stored event. Called with the Client's lock held.
func (w *watcher) send(ev event) {
	if ev.r != w.r || (w.namespace != "" && ev.obj.GetNamespace() != w.namespace) {
		return
	}
	typ := ev.typ
	switch ev.typ {
	case watch.Added, watch.Deleted:
		if !w.m.matches(ev.obj) {
			return
		}
	case watch.Modified:
		was, is := w.m.matches(ev.prev), w.m.matches(ev.obj)
		switch {
		case was && !is:
			typ = watch.Deleted
		case !was && is:
			typ = watch.Added
		case !was && !is:
			return
		}
	}
	w.mu.Lock()
	w.queue = append(w.queue, watch.Event{Type: typ, Object: ev.obj})
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *watcher) run(ctx context.Context, timeout <-chan time.Time) {
	defer close(w.result)
	defer w.Stop()
	for {
		w.mu.Lock()
		q, final := w.queue, w.final
		w.queue = nil
		w.mu.Unlock()
		for _, ev := range q {
			if ev.Type != watch.Error {
				// Stored objects are never mutated; each consumer gets its own copy.
				ev.Object = copyOut(ev.Object.(resources.Object))
			}
			select {
			case w.result <- ev:
			case <-w.done:
				return
			case <-ctx.Done():
				return
			case <-timeout:
				return
			}
		}
		if final {
			return
		}
		select {
		case <-w.signal:
		case <-w.done:
			return
		case <-ctx.Done():
			return
		case <-timeout:
			return
		}
	}
}

// Stop implements watch.Interface; it is idempotent.
func (w *watcher) Stop() {
	w.stopOnce.Do(func() {
		close(w.done)
		if w.stopTimer != nil {
			w.stopTimer()
		}
		w.c.mu.Lock()
		delete(w.c.watchers, w)
		w.c.mu.Unlock()
	})
}

// ResultChan implements watch.Interface.
func (w *watcher) ResultChan() <-chan watch.Event { return w.result }

// Watchers returns how many watches are open (for leak checks in tests).
func (c *Client) Watchers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.watchers)
}
