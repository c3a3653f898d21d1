package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/resources/core"
)

// keyRoot is the etcd key prefix of every stored object, as in Kubernetes.
const keyRoot = "/registry/"

// prefixOf returns the etcd key prefix of all objects of r ("/registry/pods/").
func prefixOf(r *resources.Resource) string { return keyRoot + r.Name + "/" }

// keyOf returns the etcd key of one object after checking that namespace and
// name are usable as key segments.
func keyOf(r *resources.Resource, namespace, name string) (string, error) {
	if name == "" {
		return "", newError(Invalid, r, namespace, name, errors.New("name is required"))
	}
	if err := checkSegment(name); err != nil {
		return "", newError(Invalid, r, namespace, name, fmt.Errorf("name: %w", err))
	}
	if !r.Namespaced {
		if namespace != "" {
			return "", newError(Invalid, r, namespace, name, errors.New("cluster-scoped object must not have a namespace"))
		}
		return prefixOf(r) + name, nil
	}
	if namespace == "" {
		return "", newError(Invalid, r, namespace, name, errors.New("namespace is required"))
	}
	if err := checkSegment(namespace); err != nil {
		return "", newError(Invalid, r, namespace, name, fmt.Errorf("namespace: %w", err))
	}
	return prefixOf(r) + namespace + "/" + name, nil
}

// checkSegment rejects strings that would escape their place in the key.
func checkSegment(s string) error {
	if s == "." || s == ".." || strings.ContainsAny(s, "/\x00") {
		return fmt.Errorf("%q may not be '.', '..' or contain '/'", s)
	}
	return nil
}

// protoMagic starts every value the store writes: kube-apiserver's storage
// format, a runtime.Unknown envelope (apiVersion, kind and the object's
// protobuf encoding) after these four bytes. Values that start with '{'
// are the JSON earlier versions wrote, still read; an object is rewritten
// as protobuf at its next write.
const protoMagic = core.ProtoMagic

// encode returns the value stored for obj: a copy with apiVersion and kind
// set and resourceVersion cleared (the revision lives in etcd, not in the
// value), in protobuf inside kube-apiserver's envelope (protoMagic), or as
// JSON for a type without protobuf. It also returns that copy so the caller
// can hand it back with the new revision without copying again.
func encode(r *resources.Resource, obj resources.Object) ([]byte, resources.Object, error) {
	cp, ok := obj.DeepCopyObject().(resources.Object)
	if !ok {
		return nil, nil, newError(Invalid, r, obj.GetNamespace(), obj.GetName(), fmt.Errorf("%T is not a resources.Object", obj))
	}
	data, err := encodeInPlace(r, cp)
	if err != nil {
		return nil, nil, err
	}
	return data, cp, nil
}

// encodeInPlace is encode without the copy: it sets obj's apiVersion and
// kind and clears its resourceVersion.
func encodeInPlace(r *resources.Resource, obj resources.Object) ([]byte, error) {
	r.SetTypeMeta(obj)
	obj.SetResourceVersion("")
	var data []byte
	var err error
	if r.HasProto() {
		data, err = r.EncodeProto(obj)
	} else {
		data, err = json.Marshal(obj)
	}
	if err != nil {
		return nil, newError(Invalid, r, obj.GetNamespace(), obj.GetName(), fmt.Errorf("encode: %w", err))
	}
	return data, nil
}

// decode parses a stored value (protobuf in its envelope, or JSON) into a
// new typed object carrying rev as its resourceVersion.
func decode(r *resources.Resource, data []byte, rev int64) (resources.Object, error) {
	var obj resources.Object
	var err error
	if bytes.HasPrefix(data, []byte(protoMagic)) {
		obj, err = r.DecodeProto(data)
	} else {
		obj = r.New()
		err = json.Unmarshal(data, obj)
	}
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", r.Name, err)
	}
	r.SetTypeMeta(obj)
	obj.SetResourceVersion(formatRV(rev))
	return obj, nil
}

// formatRV renders a revision as a resourceVersion string.
func formatRV(rev int64) string { return strconv.FormatInt(rev, 10) }

// parseRV parses a resourceVersion; "" is 0.
func parseRV(rv string) (int64, error) {
	if rv == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("resourceVersion %q is not a non-negative integer", rv)
	}
	return n, nil
}

// checkType rejects objects whose Go type is not the resource's.
func checkType(r *resources.Resource, obj resources.Object) error {
	if obj == nil {
		return newError(Invalid, r, "", "", errors.New("object is nil"))
	}
	if got := resources.ForObject(obj); got != r {
		return newError(Invalid, r, obj.GetNamespace(), obj.GetName(), fmt.Errorf("object of type %T stored as %s", obj, r.Name))
	}
	return nil
}
