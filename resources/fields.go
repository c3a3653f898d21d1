package resources

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// Field names usable in field selectors, beyond metadata.name and
// metadata.namespace, as the Kubernetes registries define them
// (k8s.io/kubernetes pkg/registry/core/pod/strategy.go ToSelectableFields).
const (
	FieldNodeName      = "spec.nodeName"
	FieldPhase         = "status.phase"
	FieldUnschedulable = "spec.unschedulable"
	// FieldSecretType is a Secret's type (pkg/registry/core/secret/strategy.go
	// SelectableFields), which `kubectl get secrets --field-selector type=…` uses.
	FieldSecretType = "type"
)

// FieldNames lists the field selector keys of r's objects, in the order
// FieldValues returns their values: metadata.name and metadata.namespace for
// every resource; for pods also spec.nodeName and status.phase; for nodes
// spec.unschedulable; for secrets type; for events involvedObject.{kind,namespace,name,uid,
// fieldPath}, reason and type. The store indexes them and the API server
// (and client/fake) reject field selectors on any other field.
func FieldNames(r *Resource) []string {
	names := []string{"metadata.name", "metadata.namespace"}
	switch r {
	case Pods:
		names = append(names, FieldNodeName, FieldPhase)
	case Nodes:
		names = append(names, FieldUnschedulable)
	case Secrets:
		names = append(names, FieldSecretType)
	case Events:
		names = append(names, "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
			"involvedObject.uid", "involvedObject.fieldPath", "reason", "type")
	}
	return names
}

// FieldValues returns obj's values of FieldNames(r), "" where obj is not of
// r's type.
func FieldValues(r *Resource, obj Object) []string {
	name, ns := obj.GetName(), obj.GetNamespace()
	switch r {
	case Pods:
		o, _ := obj.(*corev1.Pod)
		if o == nil {
			return []string{name, ns, "", ""}
		}
		return []string{name, ns, o.Spec.NodeName, string(o.Status.Phase)}
	case Nodes:
		o, _ := obj.(*corev1.Node)
		if o == nil {
			return []string{name, ns, ""}
		}
		return []string{name, ns, strconv.FormatBool(o.Spec.Unschedulable)}
	case Secrets:
		o, _ := obj.(*corev1.Secret)
		if o == nil {
			return []string{name, ns, ""}
		}
		return []string{name, ns, string(o.Type)}
	case Events:
		o, _ := obj.(*corev1.Event)
		if o == nil {
			return []string{name, ns, "", "", "", "", "", "", ""}
		}
		io := &o.InvolvedObject
		return []string{name, ns, io.Kind, io.Namespace, io.Name, string(io.UID), io.FieldPath, o.Reason, o.Type}
	}
	return []string{name, ns}
}

// FieldSet returns the fields a field selector can match for obj, an object
// of r: see FieldNames.
func FieldSet(r *Resource, obj Object) fields.Set {
	names, values := FieldNames(r), FieldValues(r, obj)
	set := make(fields.Set, len(names))
	for i, n := range names {
		set[n] = values[i]
	}
	return set
}
