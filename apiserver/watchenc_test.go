package apiserver

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

func TestWatchEncodingsShareOneEncoding(t *testing.T) {
	c := newWatchEncodings(2)
	svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default", ResourceVersion: "7"}}
	var want bytes.Buffer
	if err := json.NewEncoder(&want).Encode(watchEvent{Type: watch.Modified, Object: svc}); err != nil {
		t.Fatal(err)
	}
	const streams = 8
	got := make([][]byte, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := c.encode(watch.Modified, svc)
			if err != nil {
				t.Errorf("encode: %v", err)
			}
			got[i] = b
		}()
	}
	wg.Wait()
	for i, b := range got {
		if !bytes.Equal(b, want.Bytes()) {
			t.Fatalf("stream %d got %q, want %q", i, b, want.Bytes())
		}
		if &b[0] != &got[0][0] {
			t.Errorf("stream %d got its own encoding, not the shared one", i)
		}
	}
	// Another event type of the same object is another event.
	if b, _ := c.encode(watch.Deleted, svc); bytes.Equal(b, want.Bytes()) {
		t.Errorf("DELETED encoded as %q", b)
	}

	// The cache holds size entries: the oldest goes first.
	other := svc.DeepCopy()
	other.Name = "b"
	first, _ := c.encode(watch.Modified, svc)
	c.encode(watch.Modified, other) // evicts svc's MODIFIED (the oldest)
	again, _ := c.encode(watch.Modified, svc)
	if !bytes.Equal(again, first) {
		t.Fatalf("re-encoded %q, want %q", again, first)
	}
	if &again[0] == &first[0] {
		t.Error("an evicted event's encoding was still shared")
	}
	if len(c.entries) != 2 || len(c.ring) != 2 {
		t.Errorf("cache holds %d entries (%d in order), want 2", len(c.entries), len(c.ring))
	}
}

// serviceWatchEvents is a Service's life in a watch stream, a bookmark
// included: the events a shared encoding must write as its stream does.
func serviceWatchEvents() []watch.Event {
	svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default", ResourceVersion: "7"}}
	bm := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9"}}
	return []watch.Event{{Type: watch.Added, Object: svc}, {Type: watch.Modified, Object: svc},
		{Type: watch.Bookmark, Object: bm}, {Type: watch.Deleted, Object: svc}}
}

func TestSharedJSONEventsWritesWhatJSONEventsWrites(t *testing.T) {
	evs := serviceWatchEvents()
	var want, got bytes.Buffer
	plain, shared := jsonEvents(&want), sharedJSONEvents(&got, newWatchEncodings(watchEncodingsSize))
	for _, ev := range evs {
		if err := plain(ev.Type, ev.Object); err != nil {
			t.Fatal(err)
		}
		if err := shared(ev.Type, ev.Object); err != nil {
			t.Fatal(err)
		}
	}
	if got.String() != want.String() {
		t.Errorf("shared encoding wrote\n%s\nwant\n%s", got.String(), want.String())
	}
}

// TestSharedProtoEventsWritesWhatStreamEventsWrites: a protobuf watch
// stream's shared frames are the bytes the stream serializer writes, for a
// stream that encoded them and for one that found them encoded.
func TestSharedProtoEventsWritesWhatStreamEventsWrites(t *testing.T) {
	e := newEnv(t)
	req := httptest.NewRequest("GET", podsPath+"?watch=true", nil)
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	out, err := e.s.wire.negotiateStream(req, resourceRestrictions{})
	if err != nil || out.info.MediaType != "application/vnd.kubernetes.protobuf" {
		t.Fatalf("negotiated %q: %v", out.info.MediaType, err)
	}
	evs := serviceWatchEvents()
	var want, first, second bytes.Buffer
	enc := newWatchEncodings(watchEncodingsSize)
	plain := e.s.wire.streamEvents(&want, out)
	a := sharedProtoEvents(&first, enc, out.info.Serializer, e.s.wire.streamEvents(&first, out))
	b := sharedProtoEvents(&second, enc, out.info.Serializer, e.s.wire.streamEvents(&second, out))
	for _, ev := range evs {
		for _, write := range []func(watch.EventType, runtime.Object) error{plain, a, b} {
			if err := write(ev.Type, ev.Object); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want.Len() == 0 || !bytes.Equal(first.Bytes(), want.Bytes()) || !bytes.Equal(second.Bytes(), want.Bytes()) {
		t.Errorf("shared frames\n%q\n%q\nwant\n%q", first.Bytes(), second.Bytes(), want.Bytes())
	}
	if len(enc.entries) != 3 {
		t.Errorf("%d shared frames, want 3 (ADDED, MODIFIED, DELETED)", len(enc.entries))
	}
}
