package store

import (
	"fmt"
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
	fieldNodeName = "spec.nodeName"
	fieldPhase    = "status.phase"
)

// FieldSet returns the fields a field selector can match for obj:
// metadata.name and metadata.namespace for every resource; for pods also
// spec.nodeName and status.phase; for nodes spec.unschedulable ("true" or
// "false"); for events involvedObject.{kind,namespace,name,uid,fieldPath},
// reason and type.
func FieldSet(r *resources.Resource, obj resources.Object) fields.Set {
	set := fields.Set{
		"metadata.name":      obj.GetName(),
		"metadata.namespace": obj.GetNamespace(),
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		set[fieldNodeName] = o.Spec.NodeName
		set[fieldPhase] = string(o.Status.Phase)
	case *corev1.Node:
		set["spec.unschedulable"] = strconv.FormatBool(o.Spec.Unschedulable)
	case *corev1.Event:
		set["involvedObject.kind"] = o.InvolvedObject.Kind
		set["involvedObject.namespace"] = o.InvolvedObject.Namespace
		set["involvedObject.name"] = o.InvolvedObject.Name
		set["involvedObject.uid"] = string(o.InvolvedObject.UID)
		set["involvedObject.fieldPath"] = o.InvolvedObject.FieldPath
		set["reason"] = o.Reason
		set["type"] = o.Type
	}
	return set
}

// supportedFields lists the field selector keys FieldSet provides for r.
func supportedFields(r *resources.Resource) map[string]bool {
	m := map[string]bool{"metadata.name": true, "metadata.namespace": true}
	var extra []string
	switch r {
	case resources.Pods:
		extra = []string{fieldNodeName, fieldPhase}
	case resources.Nodes:
		extra = []string{"spec.unschedulable"}
	case resources.Events:
		extra = []string{"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
			"involvedObject.uid", "involvedObject.fieldPath", "reason", "type"}
	}
	for _, f := range extra {
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
	if m.namespace != "" && e.obj.GetNamespace() != m.namespace {
		return false
	}
	if m.label != nil && !m.label.Matches(e.labels) {
		return false
	}
	if m.field != nil && !m.field.Matches(e.fields) {
		return false
	}
	return true
}
