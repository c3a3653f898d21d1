package deps

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const m = Module + "/"

// TestRulesCatchViolations checks every rule against a synthetic graph
// that breaks it, and one that keeps it, so that a rule that cannot fail
// (a typo in a path, a wrong direction) fails here.
func TestRulesCatchViolations(t *testing.T) {
	bad := []Package{
		{ImportPath: m + "controller/daemonset", Deps: []string{m + "client", m + "apiserver/strategy"}},
		{ImportPath: m + "nodeagent", Deps: []string{m + "apiserver"}},
		{ImportPath: m + "agent", Deps: []string{m + "client", m + "store", EtcdEmbed}},
		{ImportPath: m + "cmd/everynode/internal/cli", Imports: []string{m + "server"}, TestImports: []string{m + "store"}},
		{ImportPath: m + "cmd/everynode", Imports: []string{m + "store"}},
		{ImportPath: m + "controller/leader", Imports: []string{EtcdEmbed}},
		{ImportPath: m + "internal/bench", Imports: []string{m + "store"}},
		{ImportPath: m + "cmd/everynode-agent", Deps: []string{m + "agent", m + "server", "go.etcd.io/etcd/server/v3/etcdserver", "k8s.io/kubernetes/pkg/apis/core", KubeletFormat,
			m + "resources", "k8s.io/api/rbac/v1", "k8s.io/api/authentication/v1", "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1",
			"k8s.io/client-go/rest/watch", "k8s.io/client-go/tools/record", "google.golang.org/protobuf/proto"}},
	}
	want := []string{
		m + "agent imports " + EtcdEmbed,
		m + "agent imports " + m + "store",
		m + "cmd/everynode-agent imports " + m + "server",
		m + "cmd/everynode-agent imports go.etcd.io/etcd/server/v3/etcdserver",
		m + "cmd/everynode-agent imports " + m + "resources",
		m + "cmd/everynode-agent imports k8s.io/api/rbac/v1",
		m + "cmd/everynode-agent imports k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1",
		m + "cmd/everynode-agent imports k8s.io/kubernetes/pkg/apis/core",
		m + "cmd/everynode-agent imports k8s.io/client-go/tools/record",
		m + "cmd/everynode-agent imports google.golang.org/protobuf/proto",
		m + "cmd/everynode imports " + m + "store", // the CLI rule
		m + "cmd/everynode imports " + m + "store", // only server/ opens the store
		m + "cmd/everynode/internal/cli imports " + m + "store",
		m + "controller/daemonset imports " + m + "apiserver/strategy",
		m + "controller/leader imports " + EtcdEmbed,
		m + "internal/bench imports " + m + "store",
		m + "nodeagent imports " + m + "apiserver",
	}
	got := Check(bad, Rules)
	var lines []string
	for _, v := range got {
		lines = append(lines, v.Package+" imports "+v.Import)
	}
	sort.Strings(lines)
	sort.Strings(want)
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	broken := map[string]bool{}
	for _, v := range got {
		broken[v.Rule] = true
	}
	for _, r := range Rules {
		if !broken[r.Name] {
			t.Errorf("rule %q is broken by nothing in the synthetic graph", r.Name)
		}
	}

	good := []Package{
		{ImportPath: m + "controller/daemonset", Deps: []string{m + "client", m + "resources"}},
		{ImportPath: m + "cmd/everynode/internal/cli", Imports: []string{m + "server"}, Deps: []string{m + "server", m + "store", EtcdEmbed}},
		{ImportPath: m + "server", Imports: []string{m + "store", m + "apiserver"}},
		{ImportPath: m + "store", Imports: []string{EtcdEmbed}},
		{ImportPath: m + "store/internal/x", Imports: []string{EtcdEmbed}},
		{ImportPath: m + "cmd/everynode-agent", Deps: []string{m + "agent", m + "cmd/internal/agentcmd", m + "nodeagent", m + "client",
			"go.etcd.io/etcd/client/v3", KubeletFieldPath, KubeletFormat, "k8s.io/api/core/v1", "k8s.io/api/authentication/v1", m + "resources/core"}},
	}
	if v := Check(good, Rules); len(v) > 0 {
		t.Errorf("violations in a graph that keeps the rules: %v", v)
	}
}

// TestRepository checks the rules against this repository's packages.
func TestRepository(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,Deps,TestImports,XTestImports,Error", "./...")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			Package
			XTestImports []string
			Error        *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Errorf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		p.TestImports = append(p.TestImports, p.XTestImports...)
		pkgs = append(pkgs, p.Package)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; is this the repository root?", len(pkgs))
	}
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[p.ImportPath] = true
	}
	for _, must := range []string{m + "server", m + "agent", m + "store", m + "controller", m + "nodeagent", m + "cmd/everynode/internal/cli", m + "cmd/everynode-agent"} {
		if !seen[must] {
			t.Errorf("go list did not list %s", must)
		}
	}
	for _, v := range Check(pkgs, Rules) {
		t.Error(v)
	}
}
