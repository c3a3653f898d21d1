package apiserver

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// openAPIDocument is the part of a served v3 document the tests read.
type openAPIDocument struct {
	Components struct {
		Schemas map[string]map[string]any `json:"schemas"`
	} `json:"components"`
}

func TestOpenAPISchemas(t *testing.T) {
	e := newEnv(t)
	var root struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	e.get("/openapi/v3").must(t, http.StatusOK, &root)
	docs := map[string]openAPIDocument{}
	for key, p := range root.Paths {
		var doc openAPIDocument
		r := e.get(p.ServerRelativeURL).must(t, http.StatusOK, &doc)
		if cc := r.header.Get("Cache-Control"); cc != "public, immutable" {
			t.Errorf("%s: Cache-Control %q", key, cc)
		}
		docs[key] = doc
	}
	apps, core := docs["apis/apps/v1"].Components.Schemas, docs["api/v1"].Components.Schemas

	prop := func(schemas map[string]map[string]any, def, field string) map[string]any {
		t.Helper()
		s, ok := schemas[def]
		if !ok {
			t.Fatalf("no schema %s", def)
		}
		p, ok := s["properties"].(map[string]any)[field].(map[string]any)
		if !ok {
			t.Fatalf("%s has no property %s", def, field)
		}
		return p
	}
	ds := apps["io.k8s.api.apps.v1.DaemonSet"]
	if gvk := toJSONString(t, ds["x-kubernetes-group-version-kind"]); gvk != `[{"group":"apps","kind":"DaemonSet","version":"v1"}]` {
		t.Errorf("DaemonSet GVK %s", gvk)
	}
	if !strings.Contains(toJSONString(t, prop(apps, "io.k8s.api.apps.v1.DaemonSet", "spec")), `"$ref":"#/components/schemas/io.k8s.api.apps.v1.DaemonSetSpec"`) {
		t.Errorf("spec is not a reference")
	}
	if req := toJSONString(t, apps["io.k8s.api.apps.v1.DaemonSetSpec"]["required"]); req != `["selector","template"]` {
		t.Errorf("DaemonSetSpec required %s", req)
	}
	containers := prop(apps, "io.k8s.api.core.v1.PodSpec", "containers")
	if containers["x-kubernetes-patch-merge-key"] != "name" || containers["x-kubernetes-patch-strategy"] != "merge" || containers["type"] != "array" {
		t.Errorf("containers %v", containers)
	}
	if taints := prop(core, "io.k8s.api.core.v1.NodeSpec", "taints"); taints["x-kubernetes-patch-merge-key"] != nil {
		t.Errorf("taints must stay atomic: %v", taints)
	}
	if ports := prop(core, "io.k8s.api.core.v1.Container", "ports"); toJSONString(t, ports["x-kubernetes-list-map-keys"]) != `["containerPort","protocol"]` {
		t.Errorf("ports %v", ports)
	}
	if ios := core["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]; ios["format"] != "int-or-string" {
		t.Errorf("IntOrString %v", ios)
	}
	if ts := core["io.k8s.apimachinery.pkg.apis.meta.v1.Time"]; ts["type"] != "string" || ts["format"] != "date-time" {
		t.Errorf("Time %v", ts)
	}
	if d := prop(core, "io.k8s.api.core.v1.Container", "image")["description"]; d == nil || !strings.Contains(d.(string), "Container image name") {
		t.Errorf("image description %v", d)
	}
	if _, ok := apps["io.k8s.api.core.v1.Node"]; ok {
		t.Error("apps/v1 document carries core kinds it does not need")
	}
	for _, def := range []string{"io.k8s.api.core.v1.Pod", "io.k8s.api.core.v1.Node", "io.k8s.api.core.v1.Namespace", "io.k8s.api.core.v1.Event"} {
		if core[def]["x-kubernetes-group-version-kind"] == nil {
			t.Errorf("%s has no GVK", def)
		}
	}
}

func toJSONString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
