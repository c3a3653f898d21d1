// Package deps states who may import what in this repository, as rules
// checked against the package graph `go list` reports (see deps_test.go).
package deps

import (
	"fmt"
	"sort"
	"strings"
)

// Module is this repository's module path.
const Module = "github.com/everynode/everynode"

// Package is one package of the graph: its direct imports (Imports), all
// it links (Deps), and its tests' direct imports (TestImports, both the
// package's and its external tests').
type Package struct {
	ImportPath  string
	Imports     []string
	Deps        []string
	TestImports []string
}

// Rule forbids packages matching From to import packages matching To.
// Transitive rules look at Deps; the others at Imports (and TestImports
// when Tests is set).
type Rule struct {
	Name       string
	From       func(pkg string) bool
	To         func(pkg string) bool
	Transitive bool
	Tests      bool
}

// Under matches the package dir of the module and everything below it.
func Under(dir string) func(string) bool {
	p := Module + "/" + dir
	return func(pkg string) bool { return pkg == p || strings.HasPrefix(pkg, p+"/") }
}

// Is matches exactly path.
func Is(path string) func(string) bool {
	return func(pkg string) bool { return pkg == path }
}

// Prefix matches the path and every path below it (prefix ends in "/").
func Prefix(prefix string) func(string) bool {
	return func(pkg string) bool { return pkg+"/" == prefix || strings.HasPrefix(pkg, prefix) }
}

// And matches what all of ms match.
func And(ms ...func(string) bool) func(string) bool {
	return func(pkg string) bool {
		for _, m := range ms {
			if !m(pkg) {
				return false
			}
		}
		return true
	}
}

// Not matches what m does not.
func Not(m func(string) bool) func(string) bool {
	return func(pkg string) bool { return !m(pkg) }
}

// Any matches what any of ms matches.
func Any(ms ...func(string) bool) func(string) bool {
	return func(pkg string) bool {
		for _, m := range ms {
			if m(pkg) {
				return true
			}
		}
		return false
	}
}

// EtcdEmbed is etcd's embedded server.
const EtcdEmbed = "go.etcd.io/etcd/server/v3/embed"

// KubeletFieldPath and KubeletFormat are the two leaf packages of
// k8s.io/kubernetes the node agent uses (downward API field paths, pod
// names in messages): small, and free of the server's code.
const (
	KubeletFieldPath = "k8s.io/kubernetes/pkg/fieldpath"
	KubeletFormat    = "k8s.io/kubernetes/pkg/kubelet/util/format"
)

// Rules are the repository's import rules: the layering the packages' doc
// comments describe, made checkable.
var Rules = []Rule{
	{
		Name: "controllers and the node agent talk to the API through client, never through the API server's code",
		From: Any(Under("controller"), Under("nodeagent")), To: Under("apiserver"), Transitive: true,
	},
	{
		Name: "the agent's composition root links neither the API server nor the store",
		From: Under("agent"), To: Any(Under("apiserver"), Under("store"), Is(EtcdEmbed)), Transitive: true,
	},
	{
		Name: "the lean agent binary links no server code: neither the API server, the store, etcd, the controllers nor k8s.io/apiserver or k8s.io/kubernetes (but kubelet's two leaf helpers)",
		From: Is(Module + "/cmd/everynode-agent"),
		To: Any(Under("apiserver"), Under("store"), Under("server"), Under("controller"), Under("rollout"),
			Under("cmd/everynode"), Prefix("go.etcd.io/etcd/server/"), Prefix("k8s.io/apiserver/"),
			And(Prefix("k8s.io/kubernetes/"), Not(Any(Is(KubeletFieldPath), Is(KubeletFormat))))),
		Transitive: true,
	},
	{
		Name: "the lean agent binary links the core/v1 kinds of the resource table (resources/core), not the whole table: of k8s.io/api only core/v1 and authentication/v1 (token requests), no CRD types",
		From: Is(Module + "/cmd/everynode-agent"),
		To: Any(Is(Module+"/resources"), Prefix("k8s.io/apiextensions-apiserver/"),
			And(Prefix("k8s.io/api/"), Not(Any(Is("k8s.io/api/core/v1"), Is("k8s.io/api/authentication/v1"))))),
		Transitive: true,
	},
	{
		Name: "the lean agent binary links no client or codec it does not use: not client-go's REST client or event recorder, the strategic-merge machinery, OpenAPI models or protobuf (the agent speaks JSON through client/)",
		From: Is(Module + "/cmd/everynode-agent"),
		To: Any(Is("k8s.io/client-go/rest"), Is("k8s.io/client-go/tools/record"), Is("k8s.io/apimachinery/pkg/util/strategicpatch"),
			Is("k8s.io/kube-openapi/pkg/util/proto"), Prefix("github.com/google/gnostic-models/"), Prefix("google.golang.org/protobuf/")),
		Transitive: true,
	},
	{
		Name: "the CLI starts servers through server/, it does not open the store",
		From: Under("cmd"), To: Under("store"), Tests: true,
	},
	{
		Name: "only store/ embeds etcd",
		From: Not(Under("store")), To: Is(EtcdEmbed),
	},
	{
		Name: "only server/ builds the API server and the controllers from the store",
		From: Not(Any(Under("server"), Under("store"), Under("apiserver"))), To: Under("store"),
	},
}

// Violation is a package that breaks a rule by importing Import.
type Violation struct {
	Rule    string
	Package string
	Import  string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s imports %s: %s", v.Package, v.Import, v.Rule)
}

// Check returns every violation of rules in pkgs, sorted.
func Check(pkgs []Package, rules []Rule) []Violation {
	var out []Violation
	for _, p := range pkgs {
		for _, r := range rules {
			if !r.From(p.ImportPath) {
				continue
			}
			imports := p.Imports
			if r.Transitive {
				imports = p.Deps
			}
			if r.Tests {
				imports = append(append([]string(nil), imports...), p.TestImports...)
			}
			seen := map[string]bool{}
			for _, imp := range imports {
				if r.To(imp) && !seen[imp] {
					seen[imp] = true
					out = append(out, Violation{Rule: r.Name, Package: p.ImportPath, Import: imp})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}
