package store

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/everynode/everynode/resources"
)

// Selector chooses objects in List and Watch. A nil Label or Field selects
// everything.
type Selector struct {
	Label labels.Selector
	Field fields.Selector
}

// Preconditions must hold for Delete to proceed; empty fields are not checked.
type Preconditions struct {
	UID             string
	ResourceVersion string
}

// Field names usable in field selectors, beyond metadata.name and metadata.namespace.
const (
	fieldNodeName      = "spec.nodeName"
	fieldPhase         = "status.phase"
	fieldUnschedulable = "spec.unschedulable"
)

// fieldNames lists the field selector keys of r's objects, in the order
// fieldValues returns their values: metadata.name and metadata.namespace for
// every resource; for pods also spec.nodeName and status.phase; for nodes
// spec.unschedulable; for events involvedObject.{kind,namespace,name,uid,
// fieldPath}, reason and type.
func fieldNames(r *resources.Resource) []string {
	names := []string{"metadata.name", "metadata.namespace"}
	switch r {
	case resources.Pods:
		names = append(names, fieldNodeName, fieldPhase)
	case resources.Nodes:
		names = append(names, fieldUnschedulable)
	case resources.Events:
		names = append(names, "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
			"involvedObject.uid", "involvedObject.fieldPath", "reason", "type")
	}
	return names
}

// fieldValues returns obj's values of fieldNames(r), "" where obj is not of
// r's type.
func fieldValues(r *resources.Resource, obj resources.Object) []string {
	name, ns := obj.GetName(), obj.GetNamespace()
	switch r {
	case resources.Pods:
		o, _ := obj.(*corev1.Pod)
		if o == nil {
			return []string{name, ns, "", ""}
		}
		return []string{name, ns, o.Spec.NodeName, string(o.Status.Phase)}
	case resources.Nodes:
		o, _ := obj.(*corev1.Node)
		if o == nil {
			return []string{name, ns, ""}
		}
		return []string{name, ns, strconv.FormatBool(o.Spec.Unschedulable)}
	case resources.Events:
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
// of r: see fieldNames.
func FieldSet(r *resources.Resource, obj resources.Object) fields.Set {
	names, values := fieldNames(r), fieldValues(r, obj)
	set := make(fields.Set, len(names))
	for i, n := range names {
		set[n] = values[i]
	}
	return set
}

// objectFields is one object's fields as the watch cache keeps them: the
// values of its resource's fieldNames, in order. It is the fields.Fields a
// field selector is matched against, several times smaller than a
// fields.Set, and the cache keeps one for every version in its ring.
type objectFields struct {
	names  []string // fieldNames of the resource, shared by all its objects
	values []string
}

var _ fields.Fields = (*objectFields)(nil)

// Has reports whether field is one of the resource's field names.
func (f *objectFields) Has(field string) bool { return slices.Contains(f.names, field) }

// Get returns field's value, "" for an unknown field.
func (f *objectFields) Get(field string) string {
	if i := slices.Index(f.names, field); i >= 0 {
		return f.values[i]
	}
	return ""
}

// supportedFields lists the field selector keys FieldSet provides for r.
func supportedFields(r *resources.Resource) map[string]bool {
	m := map[string]bool{}
	for _, f := range fieldNames(r) {
		m[f] = true
	}
	return m
}

// checkSelector rejects field selectors on fields r does not provide, as the
// Kubernetes API server does ("field label not supported").
func checkSelector(r *resources.Resource, sel Selector) error {
	if sel.Field == nil || sel.Field.Empty() {
		return nil
	}
	ok := supportedFields(r)
	for _, req := range sel.Field.Requirements() {
		if !ok[req.Field] {
			return newError(Invalid, r, "", "", fmt.Errorf("field label not supported: %s", req.Field))
		}
	}
	return nil
}

// matcher is a compiled namespace + selector filter.
type matcher struct {
	namespace string          // "" = all
	label     labels.Selector // nil = all
	field     fields.Selector // nil = all
	// node is the exact spec.nodeName the field selector requires, when
	// hasNode is set; used to pick candidates from the per-node indexes.
	node    string
	hasNode bool
}

func newMatcher(r *resources.Resource, namespace string, sel Selector) matcher {
	m := matcher{namespace: namespace}
	if sel.Label != nil && !sel.Label.Empty() {
		m.label = sel.Label
	}
	if sel.Field != nil && !sel.Field.Empty() {
		m.field = sel.Field
		if r == resources.Pods {
			m.node, m.hasNode = sel.Field.RequiresExactMatch(fieldNodeName)
		}
	}
	return m
}

// matches reports whether an object, given by its cached entry, passes.
func (m *matcher) matches(e *entry) bool {
	if m.namespace != "" && e.namespace() != m.namespace {
		return false
	}
	if m.label != nil && !m.label.Matches(e.labels) {
		return false
	}
	if m.field != nil && !m.field.Matches(&e.fields) {
		return false
	}
	return true
}
