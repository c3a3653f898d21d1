package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restwatch "k8s.io/client-go/rest/watch"

	resources "github.com/everynode/everynode/resources/core"
)

// watchCodec decodes watch streams the way client-go's REST client does
// (k8s.io/client-go rest/request.go newStreamWatcher): JSON frames of
// metav1.WatchEvent, each embedded object decoded through a scheme that
// knows the watched kind and metav1.Status. Each resource's serializer is
// made at its first watch: a client (the node agent's) that watches a few
// kinds neither builds nor links a scheme of every served kind.
type watchCodec struct {
	mu          sync.Mutex
	serializers map[*resources.Resource]*json.Serializer
}

func newWatchCodec() *watchCodec {
	return &watchCodec{serializers: map[*resources.Resource]*json.Serializer{}}
}

// serializer returns r's serializer, made on first use.
func (c *watchCodec) serializer(r *resources.Resource) *json.Serializer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.serializers[r]; ok {
		return s
	}
	scheme := runtime.NewScheme()
	scheme.AddKnownTypes(r.GroupVersion(), r.New())
	metav1.AddToGroupVersion(scheme, r.GroupVersion()) // WatchEvent, and Status as v1
	s := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{})
	c.serializers[r] = s
	return s
}

// newWatcher turns the body of a watch response of Content-Type ct into a
// watch.Interface. cancel cancels the request; ctx is the request's context.
func (c *watchCodec) newWatcher(ctx context.Context, r *resources.Resource, body io.ReadCloser, ct string, cancel func(), log *slog.Logger) watch.Interface {
	body = &watchBody{ctx: ctx, body: body, cancel: cancel}
	var dec watch.Decoder
	if isProtobuf(ct) {
		dec = &protoWatchDecoder{body: body, r: r}
	} else {
		s := c.serializer(r)
		events := streaming.NewDecoder(json.Framer.NewFrameReader(body), s)
		dec = restwatch.NewDecoder(events, objectDecoder{s, r.GVK()})
	}
	rep := apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")
	return &streamWatcher{watch.NewStreamWatcherWithLogger(logr.FromSlogHandler(log.Handler()), dec, rep)}
}

// maxProtoWatchFrame bounds one frame of a protobuf watch stream: an
// object is at most etcd's request size (1.5 MiB) in the API, so anything
// near this is a broken stream, not an event.
const maxProtoWatchFrame = 16 << 20

// protoWatchDecoder reads a protobuf watch stream, as client-go's REST
// client does with Kubernetes' stream serializer: each frame is a 4-byte
// big-endian length and a metav1.WatchEvent, whose object is the watched
// kind (or, in an ERROR event, a Status) in Kubernetes' protobuf encoding.
type protoWatchDecoder struct {
	body  io.ReadCloser
	r     *resources.Resource
	frame []byte
}

func (d *protoWatchDecoder) Decode() (watch.EventType, runtime.Object, error) {
	var n [4]byte
	// A stream cut inside a frame ends with io.ErrUnexpectedEOF, unwrapped:
	// the watch closes without an ERROR event, as a cut JSON stream does and
	// as client-go's framer reports it.
	if _, err := io.ReadFull(d.body, n[:]); err != nil {
		return "", nil, err // io.EOF: the stream's end
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxProtoWatchFrame {
		return "", nil, fmt.Errorf("watch frame of %d bytes is over the %d-byte bound", size, maxProtoWatchFrame)
	}
	if cap(d.frame) < int(size) {
		d.frame = make([]byte, size)
	}
	frame := d.frame[:size]
	if _, err := io.ReadFull(d.body, frame); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return "", nil, err
	}
	var ev metav1.WatchEvent
	if err := ev.Unmarshal(frame); err != nil {
		return "", nil, fmt.Errorf("watch event: %w", err)
	}
	switch t := watch.EventType(ev.Type); t {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error:
	default:
		return "", nil, fmt.Errorf("got invalid watch event type: %v", ev.Type)
	}
	obj, err := d.r.DecodeProto(ev.Object.Raw)
	if err == nil {
		d.r.SetTypeMeta(obj)
		return watch.EventType(ev.Type), obj, nil
	}
	if st, ok := protoStatus(ev.Object.Raw); ok { // an ERROR event's Status
		return watch.EventType(ev.Type), st, nil
	}
	return "", nil, fmt.Errorf("%s event: %w", ev.Type, err)
}

// Close closes the stream.
func (d *protoWatchDecoder) Close() { _ = d.body.Close() }

// objectDecoder decodes an event's object as the watched kind unless it
// names another (an ERROR event's Status), and stamps apiVersion and kind on
// it: client.Interface returns objects with both set.
type objectDecoder struct {
	s   *json.Serializer
	gvk schema.GroupVersionKind
}

func (d objectDecoder) Decode(data []byte, _ *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	gvk := d.gvk
	obj, actual, err := d.s.Decode(data, &gvk, into)
	if err != nil {
		return nil, actual, err
	}
	obj.GetObjectKind().SetGroupVersionKind(*actual)
	return obj, actual, nil
}

// watchBody is the response body: closing it also cancels the request, and
// a read cut short by the caller's context reads as the end of the stream,
// not as a decoding error.
type watchBody struct {
	ctx    context.Context
	body   io.ReadCloser
	cancel func()
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && b.ctx.Err() != nil {
		err = io.EOF
	}
	return n, err
}

func (b *watchBody) Close() error {
	b.cancel()
	return b.body.Close()
}

// streamWatcher is apimachinery's StreamWatcher whose Stop also waits for
// the stream's goroutine to finish: once Stop returns, the result channel
// is closed and the response body released.
type streamWatcher struct {
	*watch.StreamWatcher
}

// Stop implements watch.Interface. It is idempotent.
func (w *streamWatcher) Stop() {
	w.StreamWatcher.Stop()
	for range w.ResultChan() {
	}
}
