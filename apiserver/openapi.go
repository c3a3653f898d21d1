package apiserver

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"

	restful "github.com/emicklei/go-restful/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiopenapi "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/cached"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"

	"github.com/everynode/everynode/resources"
)

// openAPI holds the OpenAPI documents the server serves (docs/kubectl-wire.md
// §1.6): the v2 document at /openapi/v2 and one v3 document per group version
// under /openapi/v3, in JSON and in kube-openapi's protobuf, with ETags, as
// kube-apiserver serves them (kube-openapi's handler and handler3).
//
// They are built as kube-apiserver builds them: kube-openapi's builders walk a
// route per served operation (described with go-restful, as k8s.io/apiserver's
// installer describes them; the routes are never served through go-restful)
// and take every schema from Kubernetes' generated definitions
// (k8s.io/kubernetes pkg/generated/openapi), named and marked with
// x-kubernetes-group-version-kind by k8s.io/apiserver's DefinitionNamer.
type openAPI struct {
	v2 *handler.OpenAPIService
	v3 *handler3.OpenAPIService
}

// newOpenAPI describes the routes now, so that a route that cannot be
// described fails New, and builds each document on its first request, once
// (kube-openapi's lazy services, as kube-apiserver's aggregator serves specs):
// building them all takes most of a server's start-up otherwise, and a
// server no client asks for them never holds them.
func newOpenAPI(scheme *runtime.Scheme, d *discovery) (*openAPI, error) {
	namer := apiopenapi.NewDefinitionNamer(scheme)
	info := &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: "v1.32.0"}}
	// mu serializes the builders: they walk the same route descriptions.
	var mu sync.Mutex
	var services []*restful.WebService
	o := &openAPI{v3: handler3.NewOpenAPIService()}
	for _, gv := range d.gvs {
		ws, err := openAPIRoutes(scheme, gv, d.byGV[gv], d.createOnly[gv])
		if err != nil {
			return nil, err
		}
		services = append(services, ws)
		o.v3.UpdateGroupVersionLazy(strings.TrimPrefix(groupVersionPath(gv), "/"), cached.Once(cached.Func(func() (*spec3.OpenAPI, string, error) {
			mu.Lock()
			defer mu.Unlock()
			cfg3 := &common.OpenAPIV3Config{
				Info:                  info,
				GetOperationIDAndTags: apiopenapi.GetOperationIDAndTags,
				GetDefinitionName:     namer.GetDefinitionName,
				GetDefinitions:        generatedopenapi.GetOpenAPIDefinitions,
			}
			cfg3.Definitions = generatedopenapi.GetOpenAPIDefinitions(func(name string) spec.Ref {
				n, _ := namer.GetDefinitionName(name)
				return spec.MustCreateRef("#/components/schemas/" + common.EscapeJsonPointer(n))
			})
			doc, err := builder3.BuildOpenAPISpec([]*restful.WebService{ws}, cfg3)
			if err != nil {
				return nil, "", fmt.Errorf("OpenAPI v3 document of %s: %w", gv, err)
			}
			return doc, "built", nil
		})))
	}
	o.v2 = handler.NewOpenAPIServiceLazy(cached.Once(cached.Func(func() (*spec.Swagger, string, error) {
		mu.Lock()
		defer mu.Unlock()
		doc, err := builder.BuildOpenAPISpec(services, &common.Config{
			ProtocolList:          []string{"https"},
			Info:                  info,
			GetOperationIDAndTags: apiopenapi.GetOperationIDAndTags,
			GetDefinitionName:     namer.GetDefinitionName,
			GetDefinitions:        generatedopenapi.GetOpenAPIDefinitions,
		})
		if err != nil {
			return nil, "", fmt.Errorf("OpenAPI v2 document: %w", err)
		}
		return doc, "built", nil
	})))
	return o, nil
}

// register mounts /openapi/v2 and /openapi/v3 on mux.
func (o *openAPI) register(mux prefixMux) error {
	o.v2.RegisterOpenAPIVersionedService("/openapi/v2", mux)
	return o.v3.RegisterOpenAPIV3VersionedService("/openapi/v3", mux)
}

// prefixMux gives kube-openapi's handlers the HandlePrefix they register
// with: http.ServeMux's patterns ending in "/" match every path below them.
// withNonResourceAuthorization authorizes the documents (every
// authenticated user may read them, a node included).
type prefixMux struct{ *http.ServeMux }

func (m prefixMux) HandlePrefix(path string, h http.Handler) { m.Handle(path, h) }

// Media types of the served operations, as the installer lists them.
var (
	objectMediaTypes = []string{runtime.ContentTypeJSON, runtime.ContentTypeYAML, runtime.ContentTypeProtobuf}
	listMediaTypes   = append(append([]string(nil), objectMediaTypes...),
		runtime.ContentTypeJSON+";stream=watch", runtime.ContentTypeProtobuf+";stream=watch")
)

const prettyDoc = "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget)."

// openAPIRoutes describes the operations everynode serves on the resources
// of one group version, as k8s.io/apiserver's installer describes them
// (operation names, parameters, bodies, answers, and the
// x-kubernetes-action and x-kubernetes-group-version-kind metadata).
func openAPIRoutes(scheme *runtime.Scheme, gv schema.GroupVersion, rs []*resources.Resource, creates []createOnly) (*restful.WebService, error) {
	ws := new(restful.WebService).Path(groupVersionPath(gv)).Consumes("*/*").Produces(listMediaTypes...).
		ApiVersion(gv.String())
	noop := func(*restful.Request, *restful.Response) {}
	for _, r := range rs {
		obj, list := r.New(), r.NewList()
		status := &metav1.Status{}
		gvk := metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
		scoped, collection := "", "/"+r.Name
		var pathParams []*restful.Parameter
		if r.Namespaced {
			scoped, collection = "Namespaced", "/namespaces/{namespace}/"+r.Name
			pathParams = append(pathParams, ws.PathParameter("namespace", "object name and auth scope, such as for teams and projects").DataType("string"))
		}
		item := collection + "/{name}"
		nameParam := ws.PathParameter("name", "name of the "+r.Kind).DataType("string")
		add := func(rb *restful.RouteBuilder, action string, params []*restful.Parameter, opts any) {
			rb.To(noop).Param(ws.QueryParameter("pretty", prettyDoc))
			for _, p := range params {
				rb.Param(p)
			}
			optionParams(ws, rb, opts)
			rb.Metadata("x-kubernetes-group-version-kind", gvk).Metadata("x-kubernetes-action", action)
			ws.Route(rb)
		}
		withName := append(append([]*restful.Parameter(nil), pathParams...), nameParam)

		add(ws.GET(collection).Doc("list or watch objects of kind "+r.Kind).Operation("list"+scoped+r.Kind).
			Produces(listMediaTypes...).Returns(http.StatusOK, "OK", list).Writes(list), "list", pathParams, &metav1.ListOptions{})
		add(ws.POST(collection).Doc("create a "+r.Kind).Operation("create"+scoped+r.Kind).
			Produces(objectMediaTypes...).Reads(obj).Returns(http.StatusOK, "OK", obj).
			Returns(http.StatusCreated, "Created", obj).Returns(http.StatusAccepted, "Accepted", obj).Writes(obj),
			"post", pathParams, &metav1.CreateOptions{})
		add(ws.DELETE(collection).Doc("delete collection of "+r.Kind).Operation("deletecollection"+scoped+r.Kind).
			Produces(objectMediaTypes...).Reads(&metav1.DeleteOptions{}).Returns(http.StatusOK, "OK", status).Writes(status),
			"deletecollection", pathParams, &deleteCollectionOptions{})
		add(ws.GET(item).Doc("read the specified "+r.Kind).Operation("read"+scoped+r.Kind).
			Produces(objectMediaTypes...).Returns(http.StatusOK, "OK", obj).Writes(obj), "get", withName, nil)
		add(ws.PUT(item).Doc("replace the specified "+r.Kind).Operation("replace"+scoped+r.Kind).
			Produces(objectMediaTypes...).Reads(obj).Returns(http.StatusOK, "OK", obj).
			Returns(http.StatusCreated, "Created", obj).Writes(obj), "put", withName, &metav1.UpdateOptions{})
		add(ws.PATCH(item).Doc("partially update the specified "+r.Kind).Operation("patch"+scoped+r.Kind).
			Consumes(patchMediaTypes...).Produces(objectMediaTypes...).Reads(metav1.Patch{}).
			Returns(http.StatusOK, "OK", obj).Returns(http.StatusCreated, "Created", obj).Writes(obj),
			"patch", withName, &metav1.PatchOptions{})
		add(ws.DELETE(item).Doc("delete a "+r.Kind).Operation("delete"+scoped+r.Kind).
			Produces(objectMediaTypes...).Reads(&metav1.DeleteOptions{}).Returns(http.StatusOK, "OK", status).
			Returns(http.StatusAccepted, "Accepted", status).Writes(status),
			"delete", withName, &deleteItemOptions{})
		if r.Namespaced {
			add(ws.GET("/"+r.Name).Doc("list or watch objects of kind "+r.Kind).Operation("list"+r.Kind+"ForAllNamespaces").
				Produces(listMediaTypes...).Returns(http.StatusOK, "OK", list).Writes(list), "list", nil, &metav1.ListOptions{})
		}
		for _, sub := range r.Subresources {
			if sub != "status" {
				continue
			}
			path := item + "/status"
			add(ws.GET(path).Doc("read status of the specified "+r.Kind).Operation("read"+scoped+r.Kind+"Status").
				Produces(objectMediaTypes...).Returns(http.StatusOK, "OK", obj).Writes(obj), "get", withName, nil)
			add(ws.PUT(path).Doc("replace status of the specified "+r.Kind).Operation("replace"+scoped+r.Kind+"Status").
				Produces(objectMediaTypes...).Reads(obj).Returns(http.StatusOK, "OK", obj).
				Returns(http.StatusCreated, "Created", obj).Writes(obj), "put", withName, &metav1.UpdateOptions{})
			add(ws.PATCH(path).Doc("partially update status of the specified "+r.Kind).Operation("patch"+scoped+r.Kind+"Status").
				Consumes(patchMediaTypes...).Produces(objectMediaTypes...).Reads(metav1.Patch{}).
				Returns(http.StatusOK, "OK", obj).Returns(http.StatusCreated, "Created", obj).Writes(obj),
				"patch", withName, &metav1.PatchOptions{})
		}
	}
	// The reviews: a create and nothing else.
	for _, c := range creates {
		obj, err := scheme.New(gv.WithKind(c.kind))
		if err != nil {
			return nil, fmt.Errorf("OpenAPI route of %s: %w", c.name, err)
		}
		scoped, collection := "", "/"+c.name
		rb := ws.POST(collection)
		if c.namespaced {
			scoped, collection = "Namespaced", "/namespaces/{namespace}/"+c.name
			rb = ws.POST(collection).Param(ws.PathParameter("namespace", "object name and auth scope, such as for teams and projects").DataType("string"))
		}
		rb.To(noop).Doc("create a "+c.kind).Operation("create"+scoped+c.kind).
			Produces(objectMediaTypes...).Reads(obj).Returns(http.StatusOK, "OK", obj).
			Returns(http.StatusCreated, "Created", obj).Returns(http.StatusAccepted, "Accepted", obj).Writes(obj).
			Param(ws.QueryParameter("pretty", prettyDoc))
		optionParams(ws, rb, &metav1.CreateOptions{})
		rb.Metadata("x-kubernetes-group-version-kind", metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: c.kind}).
			Metadata("x-kubernetes-action", "post")
		ws.Route(rb)
	}
	return ws, nil
}

// deleteItemOptions are the query parameters of a delete: DeleteOptions'
// scalar fields.
type deleteItemOptions struct{ metav1.DeleteOptions }

// deleteCollectionOptions are those of a deletecollection: ListOptions' but
// watch and allowWatchBookmarks, and DeleteOptions'.
type deleteCollectionOptions struct{ metav1.DeleteOptions }

// optionParams adds the scalar fields of an options type (ListOptions,
// CreateOptions, ...) as query parameters, described by the type's
// SwaggerDoc, as the installer's AddObjectParams does.
func optionParams(ws *restful.WebService, rb *restful.RouteBuilder, opts any) {
	var types []any
	switch o := opts.(type) {
	case nil:
		return
	case *deleteItemOptions:
		types = []any{&o.DeleteOptions}
	case *deleteCollectionOptions:
		types = []any{&metav1.ListOptions{}, &o.DeleteOptions}
	default:
		types = []any{opts}
	}
	seen := map[string]bool{}
	if _, ok := opts.(*deleteCollectionOptions); ok {
		seen["watch"], seen["allowWatchBookmarks"] = true, true
	}
	for _, t := range types {
		st := reflect.TypeOf(t).Elem()
		docs := map[string]string{}
		if d, ok := t.(interface{ SwaggerDoc() map[string]string }); ok {
			docs = d.SwaggerDoc()
		}
		for i := 0; i < st.NumField(); i++ {
			f := st.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			typ := queryType(f.Type)
			if name == "" || name == "-" || typ == "" || seen[name] {
				continue
			}
			seen[name] = true
			rb.Param(ws.QueryParameter(name, docs[name]).DataType(typ))
		}
	}
}

// queryType is the JSON type of a query parameter of Go type t, "" for
// fields that are no query parameters (structs, maps).
func queryType(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		if t.Elem().Kind() == reflect.Struct {
			return ""
		}
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.String:
		return "string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "string"
		}
	}
	return ""
}
