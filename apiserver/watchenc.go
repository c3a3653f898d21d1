package apiserver

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// watchEncodings encodes each recent watch event once for every watch
// stream of one encoding (JSON, or protobuf frames) that sends it. The store hands every watcher of a change the same
// read-only object, so one write fanned out to N watches (every node's
// watch of a Service, a ConfigMap, a DaemonSet) would otherwise be encoded
// N times, in N request goroutines. Entries are keyed by the object's
// identity and the event type, and hold the object: its address cannot be
// reused while it is cached. The cache keeps the last watchEncodingsSize
// entries. Safe for concurrent use.
type watchEncodings struct {
	mu      sync.Mutex
	entries map[watchEncodingKey]*watchEncoding
	ring    []watchEncodingKey // the cached keys, oldest at next once full
	next    int                // where the next key goes in ring
	size    int
}

// watchEncodingsSize bounds the cache: a few bursts of events.
const watchEncodingsSize = 256

type watchEncodingKey struct {
	obj   runtime.Object
	typ   watch.EventType
	proto bool // a protobuf stream's frame, not a JSON line
}

type watchEncoding struct {
	once sync.Once
	b    []byte
	err  error
}

func newWatchEncodings(size int) *watchEncodings {
	return &watchEncodings{entries: make(map[watchEncodingKey]*watchEncoding, size), size: size}
}

// encode returns ev's newline-terminated JSON watch event, as
// json.Encoder.Encode writes it, encoding it only if no other stream did.
// The bytes are shared: read-only.
func (c *watchEncodings) encode(t watch.EventType, obj runtime.Object) ([]byte, error) {
	return c.shared(watchEncodingKey{obj: obj, typ: t}, func() ([]byte, error) {
		var buf bytes.Buffer
		err := json.NewEncoder(&buf).Encode(watchEvent{Type: t, Object: obj})
		return buf.Bytes(), err
	})
}

// encodeFrame returns ev's frame in a protobuf watch stream, as the
// stream serializer writes it (a 4-byte big-endian length and the
// metav1.WatchEvent, whose object s encodes), encoding it only if no other
// stream did. The bytes are shared: read-only.
func (c *watchEncodings) encodeFrame(t watch.EventType, obj runtime.Object, s runtime.Encoder) ([]byte, error) {
	return c.shared(watchEncodingKey{obj: obj, typ: t, proto: true}, func() ([]byte, error) {
		var buf bytes.Buffer
		if err := s.Encode(obj, &buf); err != nil {
			return nil, err
		}
		ev := metav1.WatchEvent{Type: string(t), Object: runtime.RawExtension{Raw: buf.Bytes()}}
		frame := make([]byte, 4+ev.Size())
		n, err := ev.MarshalTo(frame[4:])
		if err != nil {
			return nil, err
		}
		binary.BigEndian.PutUint32(frame, uint32(n))
		return frame[:4+n], nil
	})
}

// shared returns the bytes of k, made by enc if no other stream made them.
func (c *watchEncodings) shared(k watchEncodingKey, enc func() ([]byte, error)) ([]byte, error) {
	c.mu.Lock()
	e := c.entries[k]
	if e == nil {
		e = &watchEncoding{}
		if len(c.ring) < c.size {
			c.ring = append(c.ring, k)
		} else {
			delete(c.entries, c.ring[c.next])
			c.ring[c.next] = k
			c.next = (c.next + 1) % c.size
		}
		c.entries[k] = e
	}
	c.mu.Unlock()
	e.once.Do(func() { e.b, e.err = enc() })
	return e.b, e.err
}
