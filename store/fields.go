package store

import (
	"fmt"
	"slices"

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

// FieldSet returns the fields a field selector can match for obj, an object
// of r: see resources.FieldNames.
func FieldSet(r *resources.Resource, obj resources.Object) fields.Set {
	return resources.FieldSet(r, obj)
}

func fieldNames(r *resources.Resource) []string { return resources.FieldNames(r) }

func fieldValues(r *resources.Resource, obj resources.Object) []string {
	return resources.FieldValues(r, obj)
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
			m.node, m.hasNode = sel.Field.RequiresExactMatch(resources.FieldNodeName)
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
