package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// minWatchTimeout is the lower end of the lifetime given to a watch that asks
// for no timeoutSeconds; like Kubernetes, each gets a random value in
// [minWatchTimeout, 2*minWatchTimeout) so reconnects spread out.
const minWatchTimeout = 30 * time.Minute

// initialEventsEndAnnotation marks the bookmark that ends the initial events
// of a sendInitialEvents watch.
const initialEventsEndAnnotation = "k8s.io/initial-events-end"

// watchOptions are the parsed parameters of one watch.
type watchOptions struct {
	rv       int64
	sel      store.Selector
	timeout  time.Duration // 0: a random long lifetime
	initial  bool          // sendInitialEvents: list first, then a bookmark
	bookmark bool          // allowWatchBookmarks
	copy     bool          // deep-copy event objects (for in-process callers)
}

// watchStream is an opened watch: the events to send first, then those of
// the store's watch, until its lifetime ends.
type watchStream struct {
	r       *resources.Resource
	prefix  []watch.Event
	src     *store.Watcher // nil: only the prefix (a 410 Status)
	timeout time.Duration
}

// openWatch authorizes and opens a watch. A resourceVersion too old to
// serve yields a single ERROR event with a 410 Status, as Kubernetes does.
func (s *Server) openWatch(ctx context.Context, c call, o watchOptions) (*watchStream, error) {
	c.fields = o.sel.Field
	if err := s.authorize(ctx, c, "watch"); err != nil {
		return nil, err
	}
	var prefix []watch.Event
	rv := o.rv
	if o.initial {
		items, listRV, err := s.store.List(ctx, c.r, c.namespace, o.sel)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			prefix = append(prefix, watch.Event{Type: watch.Added, Object: it})
		}
		if o.bookmark {
			bm := c.r.New()
			c.r.SetTypeMeta(bm)
			bm.SetResourceVersion(strconv.FormatInt(listRV, 10))
			bm.SetAnnotations(map[string]string{initialEventsEndAnnotation: "true"})
			prefix = append(prefix, watch.Event{Type: watch.Bookmark, Object: bm})
		}
		rv = listRV
	}
	src, err := s.store.Watch(ctx, c.r, c.namespace, rv, o.sel)
	if store.IsGone(err) {
		st := s.statusError(err).ErrStatus
		prefix, src = []watch.Event{{Type: watch.Error, Object: &st}}, nil
	} else if err != nil {
		return nil, err
	}
	timeout := o.timeout
	if timeout == 0 {
		timeout = minWatchTimeout + rand.N(minWatchTimeout)
	}
	return &watchStream{r: c.r, prefix: prefix, src: src, timeout: timeout}, nil
}

// run calls send with each event, made safe to hand out (see prepareEvent),
// until send returns false, the store's watch ends, ctx or the server's
// context ends, stop is closed or the lifetime passes. It stops the store's
// watch before returning.
func (st *watchStream) run(ctx, serverCtx context.Context, stop <-chan struct{}, deepCopy bool, send func(watch.Event) bool) {
	if st.src != nil {
		defer st.src.Stop()
	}
	timer := time.NewTimer(st.timeout)
	defer timer.Stop()
	ended := func() bool {
		select {
		case <-stop:
		case <-ctx.Done():
		case <-serverCtx.Done():
		case <-timer.C:
		default:
			return false
		}
		return true
	}
	for _, ev := range st.prefix {
		if ended() || !send(prepareEvent(st.r, ev, deepCopy)) {
			return
		}
	}
	if st.src == nil {
		return
	}
	// The store's watcher queues its events: taking them needs no
	// goroutine behind a channel.
	var buf []watch.Event
	for {
		select {
		case <-st.src.Ready():
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-serverCtx.Done():
			return
		case <-timer.C:
			return
		}
		evs, open := st.src.Take(buf)
		for _, ev := range evs {
			if ended() || !send(prepareEvent(st.r, ev, deepCopy)) {
				return
			}
		}
		if !open {
			return
		}
		buf = evs
	}
}

// watchObjects opens a watch for an in-process caller. The returned
// watcher's channel closes when the store watch ends, ctx ends, the server
// stops, the timeout passes or Stop is called.
func (s *Server) watchObjects(ctx context.Context, c call, o watchOptions) (watch.Interface, error) {
	st, err := s.openWatch(ctx, c, o)
	if err != nil {
		return nil, err
	}
	p := &proxyWatcher{result: make(chan watch.Event), stop: make(chan struct{})}
	s.metrics.watchStarted()
	go func() {
		defer s.metrics.watchEnded()
		defer close(p.result)
		st.run(ctx, s.ctx, p.stop, o.copy, func(ev watch.Event) bool {
			select {
			case p.result <- ev:
				return true
			case <-p.stop:
			case <-ctx.Done():
			case <-s.ctx.Done():
			}
			return false
		})
	}()
	return p, nil
}

// proxyWatcher hands an in-process caller the events of a watchStream
// through its channel.
type proxyWatcher struct {
	result   chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
}

func (p *proxyWatcher) ResultChan() <-chan watch.Event { return p.result }

// Stop ends the watch; it is idempotent.
func (p *proxyWatcher) Stop() { p.stopOnce.Do(func() { close(p.stop) }) }

// prepareEvent makes an event's object safe to hand out: apiVersion and kind
// set, and a private copy when deepCopy is set (store objects are shared).
func prepareEvent(r *resources.Resource, ev watch.Event, deepCopy bool) watch.Event {
	switch obj := ev.Object.(type) {
	case resources.Object:
		if deepCopy {
			c := obj.DeepCopyObject().(resources.Object)
			r.SetTypeMeta(c)
			ev.Object = c
		} else {
			ev.Object = withTypeMeta(r, obj)
		}
	case *metav1.Status:
		st := *obj
		st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
		ev.Object = &st
	default:
		if ev.Type == watch.Error {
			st := apierrors.NewInternalError(errUnexpectedWatchObject{obj}).ErrStatus
			st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
			ev.Object = &st
		}
	}
	return ev
}

type errUnexpectedWatchObject struct{ obj runtime.Object }

func (e errUnexpectedWatchObject) Error() string {
	if e.obj == nil {
		return "watch error without details"
	}
	return "unexpected watch error object " + e.obj.GetObjectKind().GroupVersionKind().String()
}

// watchEvent is the wire form of one event: {"type":..,"object":..}.
type watchEvent struct {
	Type   watch.EventType `json:"type"`
	Object runtime.Object  `json:"object"`
}

// parseWatchOptions reads the watch query parameters.
func parseWatchOptions(r *resources.Resource, req *http.Request) (watchOptions, error) {
	q := req.URL.Query()
	var o watchOptions
	var err error
	if o.rv, err = parseResourceVersion(q.Get("resourceVersion")); err != nil {
		return o, err
	}
	if o.timeout, err = parseTimeoutSeconds(q.Get("timeoutSeconds")); err != nil {
		return o, err
	}
	if o.sel, err = parseSelector(r, q.Get("labelSelector"), q.Get("fieldSelector")); err != nil {
		return o, err
	}
	o.initial = queryBool(q, "sendInitialEvents")
	o.bookmark = queryBool(q, "allowWatchBookmarks")
	return o, nil
}

// serveWatch streams events, flushing the headers at once and after every
// event: newline-separated JSON objects, or with protobuf length-prefixed
// metav1.WatchEvent frames whose objects are protobuf runtime.Unknown
// envelopes (serveWatchHandler in k8s.io/apiserver pkg/endpoints/handlers/watch.go).
func (s *Server) serveWatch(w http.ResponseWriter, req *http.Request, c call) error {
	out, err := s.wire.negotiateStream(req, resourceRestrictions{})
	if err != nil {
		return err
	}
	o, err := parseWatchOptions(c.r, req)
	if err != nil {
		return err
	}
	to, asTable, err := tableRequest(req, out)
	if err != nil {
		return err
	}
	ctx := req.Context()
	st, err := s.openWatch(ctx, c, o)
	if err != nil {
		return err
	}
	s.metrics.watchStarted()
	defer s.metrics.watchEnded()
	rc := http.NewResponseController(w)
	contentType := runtime.ContentTypeJSON
	if !out.isJSON() {
		contentType = out.info.MediaType + ";stream=watch"
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		s.log.Debug("watch: flush headers", "err", err)
		if st.src != nil {
			st.src.Stop()
		}
		return nil
	}
	encode := jsonEvents(w)
	if s.watchEnc != nil && !asTable {
		encode = sharedJSONEvents(w, s.watchEnc)
	}
	if !out.isJSON() {
		encode = s.wire.streamEvents(w, out)
		if s.watchEnc != nil && !asTable && out.info.MediaType == runtime.ContentTypeProtobuf {
			encode = sharedProtoEvents(w, s.watchEnc, out.info.Serializer, encode)
		}
	}
	// The stream is written from this goroutine: no goroutine per watch
	// besides the request's own.
	st.run(ctx, s.ctx, nil, false, func(ev watch.Event) bool {
		if ev.Type == watch.Bookmark && !o.bookmark {
			return true
		}
		obj := ev.Object
		if asTable {
			// Every event carries the column definitions: kubectl may skip the
			// first one (the synthetic ADDED of a single-object watch).
			obj = s.tableEvent(c.r, ev, to, true)
		}
		if err := encode(ev.Type, obj); err != nil {
			s.log.Debug("watch: write event", "err", err)
			return false // the client went away
		}
		return rc.Flush() == nil
	})
	return nil
}

// jsonEvents writes events as newline-separated JSON.
func jsonEvents(w io.Writer) func(watch.EventType, runtime.Object) error {
	enc := json.NewEncoder(w)
	return func(t watch.EventType, obj runtime.Object) error {
		return enc.Encode(watchEvent{Type: t, Object: obj})
	}
}

// sharedJSONEvents writes events as newline-separated JSON, as jsonEvents
// does, with the encodings of live events shared between streams (see
// watchEncodings). Bookmarks and errors are objects of their own stream:
// encoded here.
func sharedJSONEvents(w io.Writer, enc *watchEncodings) func(watch.EventType, runtime.Object) error {
	own := jsonEvents(w)
	return func(t watch.EventType, obj runtime.Object) error {
		switch t {
		case watch.Added, watch.Modified, watch.Deleted:
		default:
			return own(t, obj)
		}
		b, err := enc.encode(t, obj)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
}

// sharedProtoEvents writes events as protobuf frames, as streamEvents does
// (own, which also writes bookmarks and errors: objects of their own
// stream), with the frames of live events shared between streams (see
// watchEncodings).
func sharedProtoEvents(w io.Writer, enc *watchEncodings, s runtime.Encoder, own func(watch.EventType, runtime.Object) error) func(watch.EventType, runtime.Object) error {
	return func(t watch.EventType, obj runtime.Object) error {
		switch t {
		case watch.Added, watch.Modified, watch.Deleted:
		default:
			return own(t, obj)
		}
		b, err := enc.encodeFrame(t, obj, s)
		if err != nil {
			return fmt.Errorf("encode %s event: %w", t, err)
		}
		_, err = w.Write(b)
		return err
	}
}

// streamEvents writes events in a non-JSON stream encoding: each object is
// encoded by the negotiated serializer into a metav1.WatchEvent, which the
// stream serializer writes as one frame.
func (wr *wire) streamEvents(w io.Writer, out output) func(watch.EventType, runtime.Object) error {
	stream := streaming.NewEncoder(out.info.StreamSerializer.Framer.NewFrameWriter(w), out.info.StreamSerializer.Serializer)
	var buf bytes.Buffer
	return func(t watch.EventType, obj runtime.Object) error {
		buf.Reset()
		if err := out.info.Serializer.Encode(obj, &buf); err != nil {
			return fmt.Errorf("encode %s event: %w", t, err)
		}
		return stream.Encode(&metav1.WatchEvent{Type: string(t), Object: runtime.RawExtension{Raw: buf.Bytes()}})
	}
}
