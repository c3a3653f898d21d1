package apiserver

import (
	"bytes"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// kubectl drain deletes pods through a typed client that encodes
// DeleteOptions as protobuf, under the group version of the resource.
func TestDecodeProtobufDeleteOptions(t *testing.T) {
	wr, err := newWire()
	if err != nil {
		t.Fatal(err)
	}
	want := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](7), PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
		Preconditions: &metav1.Preconditions{UID: ptr.To[types.UID]("abc")}}
	enc := protobuf.NewSerializer(wr.scheme, wr.scheme)
	for _, gv := range []schema.GroupVersion{{Version: "v1"}, {Group: "apps", Version: "v1"}, metav1.SchemeGroupVersion} {
		in := want
		in.SetGroupVersionKind(gv.WithKind("DeleteOptions"))
		var buf bytes.Buffer
		if err := enc.Encode(&in, &buf); err != nil {
			t.Fatal(err)
		}
		got, err := wr.decodeProtobufDeleteOptions(buf.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", gv, err)
		}
		if *got.GracePeriodSeconds != 7 || *got.PropagationPolicy != metav1.DeletePropagationBackground || *got.Preconditions.UID != "abc" {
			t.Fatalf("%s: decoded %+v", gv, got)
		}
	}
	if _, err := wr.decodeProtobufDeleteOptions([]byte(`{"kind":"DeleteOptions"}`)); err == nil {
		t.Fatal("JSON accepted as protobuf")
	}
}
