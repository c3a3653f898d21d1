package apiserver

import (
	"bytes"
	"encoding/json"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// watchEncodings encodes each recent watch event once for every JSON watch
// stream that sends it. The store hands every watcher of a change the same
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
	obj runtime.Object
	typ watch.EventType
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
	k := watchEncodingKey{obj: obj, typ: t}
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
	e.once.Do(func() {
		var buf bytes.Buffer
		e.err = json.NewEncoder(&buf).Encode(watchEvent{Type: t, Object: obj})
		e.b = buf.Bytes()
	})
	return e.b, e.err
}
