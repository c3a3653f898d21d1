package apiserver

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// kubectl drain deletes pods through a typed client that encodes
// DeleteOptions as protobuf.
func TestDecodeProtobufDeleteOptions(t *testing.T) {
	want := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](7), PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
		Preconditions: &metav1.Preconditions{UID: ptr.To[types.UID]("abc")}}
	raw, err := want.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"}, Raw: raw, ContentType: protobufContentType}
	env, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeProtobufDeleteOptions(append([]byte("k8s\x00"), env...))
	if err != nil {
		t.Fatal(err)
	}
	if *got.GracePeriodSeconds != 7 || *got.PropagationPolicy != metav1.DeletePropagationBackground || *got.Preconditions.UID != "abc" {
		t.Fatalf("decoded %+v", got)
	}
	if _, err := decodeProtobufDeleteOptions([]byte(`{"kind":"DeleteOptions"}`)); err == nil {
		t.Fatal("JSON accepted as protobuf")
	}
	if got, err := decodeProtobufDeleteOptions(nil); err != nil || got.GracePeriodSeconds != nil {
		t.Fatalf("empty body: %+v %v", got, err)
	}
}
