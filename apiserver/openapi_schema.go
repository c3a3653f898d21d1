package apiserver

import (
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/everynode/everynode/resources"
)

// schemaRefPrefix is where OpenAPI v3 documents keep their schemas.
const schemaRefPrefix = "#/components/schemas/"

// schemaGen builds OpenAPI v3 schemas from the k8s.io/api Go types by
// reflection: properties from json tags, types from Go kinds, descriptions
// from the types' SwaggerDoc methods, "required" for fields without
// omitempty, the strategic-merge patch tags as x-kubernetes-patch-strategy
// and x-kubernetes-patch-merge-key (which structured-merge-diff reads as list
// semantics), and x-kubernetes-group-version-kind on the served kinds. Names
// follow Kubernetes ("io.k8s.api.apps.v1.DaemonSet"), so the hard-coded
// Quantity and RawExtension schemas of kube-openapi's schemaconv apply.
//
// It is not the upstream generated document: +listType markers and enum
// values live in Go comments, which reflection cannot see, so lists without a
// patch merge key are atomic and enums are plain strings.
type schemaGen struct {
	defs map[string]*spec.Schema
}

func newSchemaGen() *schemaGen { return &schemaGen{defs: map[string]*spec.Schema{}} }

// addKind defines r's type and marks it with its group-version-kind.
func (g *schemaGen) addKind(r *resources.Resource) {
	t := reflect.TypeOf(r.New()).Elem()
	g.define(t)
	s := g.defs[schemaName(t)]
	s.AddExtension("x-kubernetes-group-version-kind", []any{
		map[string]any{"group": r.Group, "version": r.Version, "kind": r.Kind},
	})
}

// schemaName is the definition name of a named Go type: its package path
// with the domain reversed ("k8s.io/api/core/v1" → "io.k8s.api.core.v1"),
// a dot and the type name.
func schemaName(t reflect.Type) string {
	pkg := t.PkgPath()
	host, rest, _ := strings.Cut(pkg, "/")
	parts := strings.Split(host, ".")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	name := strings.Join(parts, ".")
	if rest != "" {
		name += "." + strings.ReplaceAll(rest, "/", ".")
	}
	return name + "." + t.Name()
}

// specialSchemas are the types whose JSON form is not their Go structure.
func specialSchema(t reflect.Type) (*spec.Schema, bool) {
	switch t {
	case reflect.TypeOf(metav1.Time{}), reflect.TypeOf(metav1.MicroTime{}):
		return &spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"string"}, Format: "date-time"}}, true
	case reflect.TypeOf(metav1.Duration{}), reflect.TypeOf(resource.Quantity{}):
		return &spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"string"}}}, true
	case reflect.TypeOf(intstr.IntOrString{}):
		s := &spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"string"}, Format: "int-or-string"}}
		s.AddExtension("x-kubernetes-int-or-string", true)
		return s, true
	case reflect.TypeOf(runtime.RawExtension{}), reflect.TypeOf(metav1.FieldsV1{}):
		return &spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"object"}}}, true
	}
	return nil, false
}

// swaggerDoc returns the SwaggerDoc map of t ("" = the type's own description).
func swaggerDoc(t reflect.Type) map[string]string {
	if d, ok := reflect.Zero(t).Interface().(interface{ SwaggerDoc() map[string]string }); ok {
		return d.SwaggerDoc()
	}
	return nil
}

// define adds the definition of the named struct type t (and, recursively,
// of every struct type it uses).
func (g *schemaGen) define(t reflect.Type) {
	name := schemaName(t)
	if _, ok := g.defs[name]; ok {
		return
	}
	if s, ok := specialSchema(t); ok {
		s.Description = swaggerDoc(t)[""]
		g.defs[name] = s
		return
	}
	s := &spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"object"}, Properties: map[string]spec.Schema{}}}
	g.defs[name] = s // before the fields: types may be recursive
	docs := swaggerDoc(t)
	s.Description = docs[""]
	g.addFields(s, t, docs)
}

func (g *schemaGen) addFields(s *spec.Schema, t reflect.Type, docs map[string]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			g.addFields(s, ft, swaggerDoc(ft)) // inline (TypeMeta)
			continue
		}
		if name == "" {
			name = f.Name
		}
		prop := g.typeSchema(f.Type, true)
		prop.Description = docs[name]
		if ps := f.Tag.Get("patchStrategy"); ps != "" && f.Type.Kind() == reflect.Slice {
			prop.AddExtension("x-kubernetes-patch-strategy", ps)
			if key := f.Tag.Get("patchMergeKey"); key != "" {
				prop.AddExtension("x-kubernetes-patch-merge-key", key)
			}
		}
		fixList(t.Name()+"."+name, &prop)
		s.Properties[name] = prop
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") && f.Type.Kind() != reflect.Pointer {
			s.Required = append(s.Required, name)
		}
	}
}

// fixList applies the few upstream list semantics that struct tags do not
// express and that matter for server-side apply: container ports are keyed
// by port and protocol (53/TCP next to 53/UDP is legal), the protocol
// defaulting to TCP. field is "<Go type>.<json name>".
func fixList(field string, s *spec.Schema) {
	switch field {
	case "Container.ports", "EphemeralContainer.ports":
		s.AddExtension("x-kubernetes-list-type", "map")
		s.AddExtension("x-kubernetes-list-map-keys", []any{"containerPort", "protocol"})
	case "ContainerPort.protocol":
		s.Default = "TCP"
	}
}

// typeSchema is the schema of a value of type t: a reference for structs
// (wrapped in allOf when it sits next to a description, as upstream does),
// inline otherwise.
func (g *schemaGen) typeSchema(t reflect.Type, property bool) spec.Schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	typ := func(name, format string) spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{name}, Format: format}}
	}
	switch t.Kind() {
	case reflect.Struct:
		g.define(t)
		ref := spec.MustCreateRef(schemaRefPrefix + schemaName(t))
		if property {
			return spec.Schema{SchemaProps: spec.SchemaProps{AllOf: []spec.Schema{{SchemaProps: spec.SchemaProps{Ref: ref}}}}}
		}
		return spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref}}
	case reflect.String:
		return typ("string", "")
	case reflect.Bool:
		return typ("boolean", "")
	case reflect.Int32, reflect.Uint32, reflect.Int16, reflect.Uint16, reflect.Int8, reflect.Uint8:
		return typ("integer", "int32")
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64:
		return typ("integer", "int64")
	case reflect.Float32, reflect.Float64:
		return typ("number", "double")
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return typ("string", "byte")
		}
		item := g.typeSchema(t.Elem(), false)
		s := typ("array", "")
		s.Items = &spec.SchemaOrArray{Schema: &item}
		return s
	case reflect.Map:
		val := g.typeSchema(t.Elem(), false)
		s := typ("object", "")
		s.AdditionalProperties = &spec.SchemaOrBool{Allows: true, Schema: &val}
		return s
	}
	return spec.Schema{} // interface{}: any value
}

// reachable returns the definitions the named roots need, roots included.
func reachable(defs map[string]*spec.Schema, roots []string) map[string]*spec.Schema {
	out := map[string]*spec.Schema{}
	var visit func(name string)
	var walk func(s *spec.Schema)
	visit = func(name string) {
		if _, done := out[name]; done || defs[name] == nil {
			return
		}
		out[name] = defs[name]
		walk(defs[name])
	}
	walk = func(s *spec.Schema) {
		if ref := s.Ref.String(); ref != "" {
			visit(strings.TrimPrefix(ref, schemaRefPrefix))
		}
		for i := range s.AllOf {
			walk(&s.AllOf[i])
		}
		for _, p := range s.Properties {
			walk(&p)
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(s.Items.Schema)
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			walk(s.AdditionalProperties.Schema)
		}
	}
	for _, r := range roots {
		visit(r)
	}
	return out
}
