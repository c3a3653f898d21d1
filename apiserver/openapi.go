package apiserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/everynode/everynode/resources"
)

// openAPIStub is the minimal OpenAPI v3 kubectl needs (REFERENCE-kubectl.md
// §1.6): per group version, one PATCH operation per kind carrying
// x-kubernetes-group-version-kind and a fieldValidation query parameter, which
// makes kubectl leave validation to the server (fieldValidation=Strict) instead
// of failing "failed to download openapi". Each document also carries
// components.schemas generated from the Go types (see schemaGen), enough for
// `kubectl explain`; descriptions are the types' SwaggerDoc texts.
type openAPIStub struct {
	root []byte            // GET /openapi/v3
	docs map[string][]byte // "api/v1" → document
	// schemas are every generated definition, by name; server-side apply's
	// type converter is built from them.
	schemas map[string]*spec.Schema
}

func newOpenAPIStub(gvs []schema.GroupVersion, byGV map[schema.GroupVersion][]*resources.Resource) (*openAPIStub, error) {
	type ref struct {
		ServerRelativeURL string `json:"serverRelativeURL"`
	}
	gen := newSchemaGen()
	for _, gv := range gvs {
		for _, r := range byGV[gv] {
			gen.addKind(r)
		}
	}
	o := &openAPIStub{docs: map[string][]byte{}, schemas: gen.defs}
	paths := map[string]ref{}
	for _, gv := range gvs {
		key := strings.TrimPrefix(groupVersionPath(gv), "/")
		var roots []string
		for _, r := range byGV[gv] {
			roots = append(roots, schemaName(reflect.TypeOf(r.New()).Elem()))
		}
		d := openAPIDoc(byGV[gv])
		d["components"] = map[string]any{"schemas": reachable(gen.defs, roots)}
		doc, err := json.Marshal(d)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(doc)
		o.docs[key] = doc
		paths[key] = ref{ServerRelativeURL: "/openapi/v3/" + key + "?hash=" + strings.ToUpper(hex.EncodeToString(sum[:]))}
	}
	root, err := json.Marshal(map[string]any{"paths": paths})
	if err != nil {
		return nil, err
	}
	o.root = root
	return o, nil
}

func openAPIDoc(rs []*resources.Resource) map[string]any {
	paths := map[string]any{}
	for _, r := range rs {
		item := groupVersionPath(r.GroupVersion()) + "/" + r.Name + "/{name}"
		if r.Namespaced {
			item = groupVersionPath(r.GroupVersion()) + "/namespaces/{namespace}/" + r.Name + "/{name}"
		}
		paths[item] = map[string]any{"patch": map[string]any{
			"x-kubernetes-group-version-kind": map[string]string{"group": r.Group, "version": r.Version, "kind": r.Kind},
			"parameters": []map[string]any{
				{"name": "fieldValidation", "in": "query", "schema": map[string]string{"type": "string"}},
			},
		}}
	}
	return map[string]any{
		"openapi": "3.0.0",
		"info":    map[string]string{"title": "Kubernetes", "version": "v1.32.0"},
		"paths":   paths,
	}
}

func (s *Server) serveOpenAPIRoot(w http.ResponseWriter, req *http.Request) {
	setScope(req.Context(), "get", "")
	writeRaw(w, s.openapi.root)
}

func (s *Server) serveOpenAPIDoc(w http.ResponseWriter, req *http.Request) {
	setScope(req.Context(), "get", "")
	doc, ok := s.openapi.docs[strings.TrimPrefix(req.URL.Path, "/openapi/v3/")]
	if !ok {
		s.writeError(w, req, errNotFoundPath(req))
		return
	}
	if req.URL.Query().Get("hash") != "" {
		// The root names each document by its content hash, so a hashed URL
		// never changes: clients (kubectl's HTTP cache) may keep it.
		w.Header().Set("Cache-Control", "public, immutable")
	}
	writeRaw(w, doc)
}

func writeRaw(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
