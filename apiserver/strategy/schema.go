package strategy

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	apiopenapi "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"

	"github.com/everynode/everynode/resources"
)

// Schemas returns the OpenAPI v3 schemas of every served kind and of the
// types they use, by definition name ("io.k8s.api.apps.v1.DaemonSet"), from
// Kubernetes' generated definitions (k8s.io/kubernetes pkg/generated/openapi),
// each served kind marked with its x-kubernetes-group-version-kind: what
// kube-apiserver builds its server-side apply type converter from. List
// semantics are upstream's (+listType, +listMapKey markers): container ports
// are keyed by port and protocol, taints and tolerations are atomic, and so
// on.
func Schemas() (map[string]*spec.Schema, error) {
	scheme := runtime.NewScheme()
	resources.AddToScheme(scheme)
	namer := apiopenapi.NewDefinitionNamer(scheme)
	cfg := &common.OpenAPIV3Config{GetDefinitionName: namer.GetDefinitionName, GetDefinitions: generatedopenapi.GetOpenAPIDefinitions}
	cfg.Definitions = generatedopenapi.GetOpenAPIDefinitions(func(name string) spec.Ref {
		n, _ := namer.GetDefinitionName(name)
		return spec.MustCreateRef("#/components/schemas/" + common.EscapeJsonPointer(n))
	})
	var names []string
	for _, r := range resources.All() {
		names = append(names, util.GetCanonicalTypeName(r.New()))
	}
	defs, err := builder3.BuildOpenAPIDefinitionsForResources(cfg, names...)
	if err != nil {
		return nil, fmt.Errorf("strategy: OpenAPI definitions: %w", err)
	}
	return defs, nil
}
