package client

import (
	"encoding/binary"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/everynode/everynode/resources"
)

// protoFrame is one frame of a protobuf watch stream: eventType and obj
// encoded as gvk.
func protoFrame(t *testing.T, eventType string, r *resources.Resource, obj resources.Object) []byte {
	t.Helper()
	raw, err := r.EncodeProto(obj)
	if err != nil {
		t.Fatal(err)
	}
	ev := metav1.WatchEvent{Type: eventType, Object: runtime.RawExtension{Raw: raw}}
	b, err := ev.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// TestProtoWatchBadStreams: a protobuf watch stream that breaks — an event
// of another kind, an unknown event type, a frame longer than the bound —
// ends the watch with an ERROR event after the good events before it, as a
// malformed JSON stream does; a stream cut inside a frame just ends, as a
// cut JSON stream does.
func TestProtoWatchBadStreams(t *testing.T) {
	node := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	frame := func(typ string, r *resources.Resource, obj resources.Object) []byte {
		return protoFrame(t, typ, r, obj)
	}
	good := frame("ADDED", resources.Nodes, node("n1"))
	tests := []struct {
		name string
		tail []byte
		want string
	}{
		{"another kind", frame("ADDED", resources.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}), "ADDED n1|ERROR 500"},
		{"unknown event type", frame("RENAMED", resources.Nodes, node("n2")), "ADDED n1|ERROR 500"},
		{"frame over the bound", binary.BigEndian.AppendUint32(nil, maxProtoWatchFrame+1), "ADDED n1|ERROR 500"},
		{"not protobuf inside", append(binary.BigEndian.AppendUint32(nil, 5), "hello"...), "ADDED n1|ERROR 500"},
		{"frame cut short", frame("ADDED", resources.Nodes, node("n2"))[:20], "ADDED n1"},
		{"length cut short", []byte{0, 0}, "ADDED n1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := newFakeServer(t, map[string]http.HandlerFunc{
				"GET /api/v1/nodes": func(w http.ResponseWriter, r *http.Request) {
					if !strings.HasPrefix(r.Header.Get("Accept"), "application/vnd.kubernetes.protobuf") {
						t.Errorf("Accept %q", r.Header.Get("Accept"))
					}
					w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
					w.WriteHeader(200)
					_, _ = w.Write(good)
					_, _ = w.Write(tt.tail)
					if !strings.Contains(tt.name, "cut short") {
						_, _ = w.Write(frame("ADDED", resources.Nodes, node("n3")))
					}
				},
			})
			c.proto = true
			if got, want := nodeWatchEvents(t, c), tt.want; got != want {
				t.Fatalf("events = %q, want %q", got, want)
			}
		})
	}
}
