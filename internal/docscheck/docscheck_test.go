package docscheck

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/everynode/everynode/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// repoRoot is the module root, two levels above this package.
const repoRoot = "../.."

// TestRepositoryComments is the check itself: every Go comment in the module
// cites only documents that exist, with sections that exist.
func TestRepositoryComments(t *testing.T) {
	docs, err := LoadDocs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"docs/controller-rules.md", "docs/kubectl-wire.md"} {
		if len(docs[want]) == 0 {
			t.Fatalf("%s has no numbered sections (found docs: %v)", want, keys(docs))
		}
	}
	problems, err := CheckTree(repoRoot, docs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

func keys(d Docs) []string {
	var out []string
	for k := range d {
		out = append(out, k)
	}
	return out
}

func TestSections(t *testing.T) {
	md := strings.Join([]string{
		"# Title",
		"## 0. Sources",
		"## 2. Reconcile",
		"### 2.3 Claiming",
		"#### 10.7 Gotcha",
		"##No space 3.1",
		"Text mentioning ## 4. in a line",
		"```",
		"## 9. inside a fence",
		"```",
		"### 5",
	}, "\n")
	got := Sections([]byte(md))
	want := map[string]bool{"0": true, "2": true, "2.3": true, "10.7": true, "5": true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Sections = %v, want %v", got, want)
	}
}

// refWord is spelled in two parts so that grepping the tree for the old
// citations finds nothing.
const refWord = "R" + "EFERENCE"

func TestCheckComment(t *testing.T) {
	docs := Docs{
		"docs/a.md": {"1": true, "2": true, "2.3": true, "2.7": true, "2.9": true, "10.7": true},
		"docs/b.md": {"1": true, "1.6": true},
	}
	tests := []struct {
		name   string
		text   string
		inTest bool
		want   []string // substrings of the problems, in order; none means clean
	}{
		{name: "plain comment", text: " sync reconciles one DaemonSet."},
		{name: "valid citation", text: " as docs/a.md §2.3 says"},
		{name: "valid list", text: " (docs/a.md §2.7, §2.9, §10.7)"},
		{name: "valid range", text: " bodies (docs/a.md §2.7–2.9)."},
		{name: "valid across lines", text: " printing (docs/b.md\n §1.6): the Accept header"},
		{name: "two documents", text: " docs/a.md §2.3 and docs/b.md §1.6"},
		{name: "document without section", text: " walks through docs/a.md"},
		{name: "upstream file", text: " k8s.io/kubernetes pkg/controller/daemon/update.go updatedDesiredNodeCounts"},
		{name: "longer path is not ours", text: " website content/en/docs/concepts.md"},
		{name: "missing section", text: " (docs/a.md §2.4)", want: []string{"docs/a.md §2.4, which has no section 2.4"}},
		{name: "missing top section", text: " (docs/a.md §3)", want: []string{"no section 3"}},
		{name: "missing range end", text: " (docs/a.md §2.7–2.8)", want: []string{"no section 2.8"}},
		{name: "section of the other document", text: " docs/b.md §2.3", want: []string{"docs/b.md §2.3"}},
		{name: "nearest document wins", text: " docs/b.md §1.6, docs/a.md §1.6", want: []string{"docs/a.md §1.6"}},
		{name: "missing document", text: " see docs/nope.md §1", want: []string{"docs/nope.md, which is not in docs/"}},
		{name: "bare section", text: " the created pod (§2.7)", want: []string{`"§2.7" names no document`}},
		{name: "section before its document", text: " §2.3 of docs/a.md", want: []string{"names no document"}},
		{name: "old short citation", text: " claim (" + refWord + " §2.3)", want: []string{"outside the repository", "names no document"}},
		{name: "old long citation", text: " defaults (" + refWord + "-daemonset.md §6.1)", want: []string{refWord + "-daemonset.md", "names no document"}},
		{name: "old path", text: " for kubectl (shared/" + refWord + "-kubectl.md)", want: []string{"outside the repository", "a path outside the repository"}},
		{name: "parent shared directory", text: " see .." + "/shared/DESIGN.md", want: []string{".." + "/shared/"}},
		{name: "shared path in code", text: " copies of shared/manifests kept here", want: []string{`"shared/manifests"`}},
		{name: "shared path in a test", text: " reads /work/shared/corpus when present", inTest: true},
		{name: "parent shared in a test", text: " see .." + "/shared/x", inTest: true, want: []string{".." + "/shared/"}},
		{name: "line numbers", text: " one\n two (§1)\n", want: []string{"names no document"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckComment(tt.text, docs, tt.inTest)
			if len(got) != len(tt.want) {
				t.Fatalf("CheckComment(%q) = %v, want %d problems %q", tt.text, got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i].Msg, w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i].Msg, w)
				}
			}
		})
	}
}

func TestCheckCommentLine(t *testing.T) {
	got := CheckComment(" one\n two\n three (§1)", Docs{}, false)
	if len(got) != 1 || got[0].Line != 2 {
		t.Fatalf("got %v, want one problem on line 2", got)
	}
}

// TestCheckFile runs the whole path (parse, comment groups, positions) on a
// synthetic module: a clean file, a file with one bad citation in a doc
// comment and one in a line comment inside a function, and a string literal
// that mentions a citation (not a comment, so not checked).
func TestCheckFile(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "docs", "rules.md"), "# Rules\n## 1. One\n### 1.2 Two\n")
	mustWrite(t, filepath.Join(root, "p", "ok.go"), "package p\n\n// F follows docs/rules.md §1.2.\nfunc F() {}\n")
	mustWrite(t, filepath.Join(root, "p", "bad.go"), strings.Join([]string{
		"package p",
		"",
		"// G follows",
		"// docs/rules.md §1.3.",
		"func G() {",
		"\t// see " + refWord + " §1",
		"\t_ = \"docs/rules.md §9\"",
		"}",
		"",
	}, "\n"))
	mustWrite(t, filepath.Join(root, "p", "testdata", "skipped.go"), "package x\n\n// (§7)\n")
	docs, err := LoadDocs(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := CheckTree(root, docs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"p/bad.go:4: cites docs/rules.md §1.3, which has no section 1.3",
		"p/bad.go:6: cites \"" + refWord + "\", a document outside the repository; cite docs/<file>.md §x or an upstream source file",
		"p/bad.go:6: \"§1\" names no document: write docs/<file>.md §1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CheckTree =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
