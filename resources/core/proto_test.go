package core

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

func protoPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u-1", Labels: map[string]string{"b": "2", "a": "1"},
			CreationTimestamp: metav1.Unix(1700000000, 0)},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"memory": resource.MustParse("64Mi")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// TestEncodeProtoIsKubernetes: the bytes are apimachinery's protobuf
// serializer's, for an object and for a list, and decode back.
func TestEncodeProtoIsKubernetes(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ser := protobuf.NewSerializer(scheme, scheme)
	pod := protoPod()
	ours, err := Pods.EncodeProto(pod)
	if err != nil {
		t.Fatal(err)
	}
	withKind := pod.DeepCopy()
	Pods.SetTypeMeta(withKind)
	var theirs bytes.Buffer
	if err := ser.Encode(withKind, &theirs); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ours, theirs.Bytes()) {
		t.Fatalf("EncodeProto\n%q\napimachinery\n%q", ours, theirs.Bytes())
	}
	back, err := Pods.DecodeProto(ours)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, pod) {
		t.Fatalf("decoded %+v, want %+v", back, pod)
	}

	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "12"}, Items: []corev1.Pod{*pod, *pod}}
	theirs.Reset()
	if err := ser.Encode(list, &theirs); err != nil {
		t.Fatal(err)
	}
	got, err := Pods.DecodeProtoList(theirs.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := got.(*corev1.PodList); !ok || len(l.Items) != 2 || l.ResourceVersion != "12" || !reflect.DeepEqual(&l.Items[1], pod) {
		t.Fatalf("decoded list %+v", got)
	}
}

// TestDecodeProtoRefuses: another kind, another kind's list, a cut value,
// JSON and a kind without protobuf are errors.
func TestDecodeProtoRefuses(t *testing.T) {
	data, err := Pods.EncodeProto(protoPod())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Nodes.DecodeProto(data); err == nil || !strings.Contains(err.Error(), "encoded as v1 Pod, not v1 Node") {
		t.Errorf("a Pod decoded as a Node: %v", err)
	}
	if _, err := Pods.DecodeProtoList(data); err == nil || !strings.Contains(err.Error(), "not v1 PodList") {
		t.Errorf("a Pod decoded as a PodList: %v", err)
	}
	for _, cut := range []int{len(data) - 5, 10, 3} {
		if obj, err := Pods.DecodeProto(data[:cut]); err == nil {
			t.Errorf("cut to %d of %d bytes: decoded %+v", cut, len(data), obj)
		}
	}
	if _, err := Pods.DecodeProto([]byte(`{"kind":"Pod"}`)); err == nil {
		t.Error("JSON decoded as protobuf")
	}
	if _, err := Nodes.EncodeProto(protoPod()); err == nil {
		t.Error("a Pod encoded as a Node")
	}
	bare := &Resource{Name: "things", Version: "v1", Kind: "Thing"}
	if _, err := bare.EncodeProto(protoPod()); err == nil || bare.HasProto() {
		t.Error("a kind without a codec encoded")
	}
}
