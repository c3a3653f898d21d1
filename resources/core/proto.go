package core

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ProtoMagic starts an object in Kubernetes' protobuf encoding, in etcd and
// on the wire (application/vnd.kubernetes.protobuf): a runtime.Unknown
// envelope naming apiVersion and kind around the object's own protobuf
// follows these four bytes.
const ProtoMagic = "k8s\x00"

// ProtoCodec encodes and decodes one kind's objects and lists in
// Kubernetes' protobuf encoding (Resource.Proto; Resource.EncodeProto and
// the decoders use it). It calls the kind's own generated methods
// (k8s.io/api's generated.pb.go) directly, not through an interface: a
// binary links the protobuf code of the kinds it uses, not of every type it
// knows (the lean agent's memory follows its binary's size).
type ProtoCodec struct {
	encode     func(schema.GroupVersionKind, Object) ([]byte, bool, error)
	decode     func(schema.GroupVersionKind, []byte) (Object, error)
	decodeList func(schema.GroupVersionKind, []byte) (runtime.Object, error)
}

// protoPtr is a pointer to an API type with generated protobuf methods.
type protoPtr[T any] interface {
	*T
	runtime.Object
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
	Unmarshal([]byte) error
}

// ProtoCodecOf is the codec of kind T and its list L.
func ProtoCodecOf[T, L any, PT interface {
	protoPtr[T]
	Object
}, PL protoPtr[L]]() *ProtoCodec {
	return &ProtoCodec{
		encode: func(gvk schema.GroupVersionKind, obj Object) ([]byte, bool, error) {
			p, ok := obj.(PT)
			if !ok {
				return nil, false, nil
			}
			b, err := encodeProto(gvk, p.Size(), p.MarshalToSizedBuffer)
			return b, true, err
		},
		decode: func(gvk schema.GroupVersionKind, data []byte) (Object, error) {
			obj := PT(new(T))
			if err := decodeProto(data, gvk, obj.Unmarshal); err != nil {
				return nil, err
			}
			return obj, nil
		},
		decodeList: func(gvk schema.GroupVersionKind, data []byte) (runtime.Object, error) {
			list := PL(new(L))
			if err := decodeProto(data, gvk, list.Unmarshal); err != nil {
				return nil, err
			}
			return list, nil
		},
	}
}

// HasProto says whether r's objects have a protobuf encoding (Proto set).
func (r *Resource) HasProto() bool { return r.Proto != nil }

// EncodeProto returns obj, one of r's objects, in Kubernetes' protobuf
// encoding (apiVersion and kind in the envelope, whatever obj's TypeMeta).
func (r *Resource) EncodeProto(obj Object) ([]byte, error) {
	if r.Proto == nil {
		return nil, fmt.Errorf("%s have no protobuf encoding", r.Name)
	}
	b, ok, err := r.Proto.encode(r.GVK(), obj)
	if !ok {
		return nil, fmt.Errorf("protobuf %s: %T is not one", r.Kind, obj)
	}
	return b, err
}

// DecodeProto decodes one of r's objects from Kubernetes' protobuf
// encoding; an envelope naming another kind is an error. The object's
// TypeMeta is left empty, as the envelope holds it.
func (r *Resource) DecodeProto(data []byte) (Object, error) {
	if r.Proto == nil {
		return nil, fmt.Errorf("%s have no protobuf encoding", r.Name)
	}
	return r.Proto.decode(r.GVK(), data)
}

// DecodeProtoList decodes a list of r's objects (kind r.Kind+"List").
func (r *Resource) DecodeProtoList(data []byte) (runtime.Object, error) {
	if r.Proto == nil {
		return nil, fmt.Errorf("%s have no protobuf encoding", r.Name)
	}
	return r.Proto.decodeList(r.GroupVersion().WithKind(r.Kind+"List"), data)
}

// encodeProto writes ProtoMagic, the envelope and the object (size bytes,
// written by marshal from the end of the buffer it is given) in one buffer,
// as kube-apiserver's protobuf serializer lays them out: the envelope's
// typeMeta (field 1), raw (2), contentEncoding (3) and contentType (4,
// both empty).
func encodeProto(gvk schema.GroupVersionKind, size int, marshal func([]byte) (int, error)) ([]byte, error) {
	apiVersion, kind := gvk.ToAPIVersionAndKind()
	tm := runtime.TypeMeta{APIVersion: apiVersion, Kind: kind}
	tmb, err := tm.Marshal()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 0, len(ProtoMagic)+2*binary.MaxVarintLen64+len(tmb)+size+6)
	buf = append(buf, ProtoMagic...)
	buf = append(binary.AppendUvarint(append(buf, 0x0a), uint64(len(tmb))), tmb...)
	buf = binary.AppendUvarint(append(buf, 0x12), uint64(size))
	start := len(buf)
	buf = buf[:start+size]
	n, err := marshal(buf[start:])
	if err != nil {
		return nil, fmt.Errorf("protobuf %s: %w", kind, err)
	}
	if n != size {
		return nil, fmt.Errorf("protobuf %s: wrote %d bytes of %d", kind, n, size)
	}
	return append(buf, 0x1a, 0, 0x22, 0), nil
}

// UnwrapProto returns the envelope of data (ProtoMagic and a
// runtime.Unknown): the apiVersion and kind it names, and the object's
// protobuf in env.Raw.
func UnwrapProto(data []byte) (env runtime.Unknown, err error) {
	raw, ok := bytes.CutPrefix(data, []byte(ProtoMagic))
	if !ok {
		return env, fmt.Errorf("not Kubernetes protobuf (no k8s\\x00 prefix)")
	}
	if err := env.Unmarshal(raw); err != nil {
		return env, fmt.Errorf("protobuf envelope: %w", err)
	}
	return env, nil
}

// decodeProto unwraps data, checks that it holds gvk and unmarshals it.
func decodeProto(data []byte, gvk schema.GroupVersionKind, unmarshal func([]byte) error) error {
	env, err := UnwrapProto(data)
	if err != nil {
		return err
	}
	apiVersion, kind := gvk.ToAPIVersionAndKind()
	if env.Kind != kind || env.APIVersion != apiVersion {
		return fmt.Errorf("encoded as %s %s, not %s %s", env.APIVersion, env.Kind, apiVersion, kind)
	}
	if err := unmarshal(env.Raw); err != nil {
		return fmt.Errorf("protobuf %s: %w", kind, err)
	}
	return nil
}
