// Package docscheck keeps the citations in Go comments honest. A comment may
// cite a repository document as docs/<file>.md followed by a section sign and
// a section number (the file must exist and have a heading with that number),
// or an upstream source file; never a document outside the repository (the
// reference notes and manifests kept in the shared directory beside it). Its
// test runs the check over the whole module.
package docscheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Docs maps a document's repository path ("docs/controller-rules.md") to the
// set of its section numbers ("2", "2.3").
type Docs map[string]map[string]bool

var (
	headingRE = regexp.MustCompile(`^#{1,6}\s+(\d+(?:\.\d+)*)\.?(?:\s|$)`)
	// A repository document: docs/<file>.md, not part of a longer path.
	docRE = regexp.MustCompile(`(?:^|[^\w/.-])(docs/[\w.-]+\.md)`)
	// A section citation: the section sign, then 2, 2.3 or a range 2.7–2.9
	// (both ends must exist).
	sectionRE = regexp.MustCompile(`§\s*(\d+(?:\.\d+)*)(?:\s*[–-]\s*(\d+(?:\.\d+)*))?`)
	// Documents a reader of the repository cannot open: the reference notes
	// (written [R]… so that grepping the tree for their name finds none) and
	// anything in ../shared.
	outsideRE  = regexp.MustCompile(`\b[R]EFERENCE[-\w]*(?:\.md)?|\.\./shared/`)
	sharedPath = regexp.MustCompile(`(?:^|[\s("'` + "`" + `])(?:/work/)?shared/[\w.-]`)
)

// Sections returns the section numbers of a markdown document: the leading
// number of every heading ("## 2. Title" → "2", "### 2.3 Title" → "2.3").
// Lines inside fenced code blocks are not headings.
func Sections(md []byte) map[string]bool {
	out := map[string]bool{}
	inFence := false
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// LoadDocs reads every markdown file in root/docs.
func LoadDocs(root string) (Docs, error) {
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, fmt.Errorf("list docs: %w", err)
	}
	docs := Docs{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read doc: %w", err)
		}
		docs["docs/"+filepath.Base(p)] = Sections(b)
	}
	return docs, nil
}

// Problem is one bad citation: where it is and what is wrong.
type Problem struct {
	Line int // line within the comment text, from 0
	Msg  string
}

// CheckComment checks the text of one comment group. Every § must follow a
// docs/<file>.md mention in the same comment (the nearest one before it is
// the document meant), the file must be in docs and have that section, and no
// document outside the repository may be named. inTest relaxes one rule: test
// code may mention shared/ paths it reads at run time (the corpus), but never
// the reference notes or ../shared.
func CheckComment(text string, docs Docs, inTest bool) []Problem {
	var out []Problem
	lineOf := func(off int) int { return strings.Count(text[:off], "\n") }
	for _, loc := range outsideRE.FindAllStringIndex(text, -1) {
		out = append(out, Problem{lineOf(loc[0]), fmt.Sprintf("cites %q, a document outside the repository; cite docs/<file>.md §x or an upstream source file", text[loc[0]:loc[1]])})
	}
	if !inTest {
		for _, loc := range sharedPath.FindAllStringIndex(text, -1) {
			end := loc[1]
			for end < len(text) && !strings.ContainsRune(" \t\n)\"'`,;", rune(text[end])) {
				end++
			}
			out = append(out, Problem{lineOf(loc[0]), fmt.Sprintf("names %q, a path outside the repository", strings.TrimLeft(text[loc[0]:end], " \t(\"'`"))})
		}
	}
	var mentions [][]int
	for _, m := range docRE.FindAllStringSubmatchIndex(text, -1) {
		mentions = append(mentions, m[2:4])
	}
	for _, loc := range mentions {
		if _, ok := docs[text[loc[0]:loc[1]]]; !ok {
			out = append(out, Problem{lineOf(loc[0]), fmt.Sprintf("cites %s, which is not in docs/", text[loc[0]:loc[1]])})
		}
	}
	for _, m := range sectionRE.FindAllStringSubmatchIndex(text, -1) {
		doc := ""
		for _, loc := range mentions {
			if loc[1] <= m[0] {
				doc = text[loc[0]:loc[1]]
			}
		}
		if doc == "" {
			out = append(out, Problem{lineOf(m[0]), fmt.Sprintf("%q names no document: write docs/<file>.md %s", text[m[0]:m[1]], text[m[0]:m[1]])})
			continue
		}
		sections, ok := docs[doc]
		if !ok {
			continue // reported above
		}
		for _, g := range [][2]int{{m[2], m[3]}, {m[4], m[5]}} {
			if g[0] < 0 {
				continue
			}
			if n := text[g[0]:g[1]]; !sections[n] {
				out = append(out, Problem{lineOf(m[0]), fmt.Sprintf("cites %s §%s, which has no section %s", doc, n, n)})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

// commentText is the text of a comment group without comment markers, one
// line per source line, so offsets map back to lines.
func commentText(cg *ast.CommentGroup) string {
	var b strings.Builder
	for i, c := range cg.List {
		if i > 0 {
			b.WriteByte('\n')
		}
		t := c.Text
		switch {
		case strings.HasPrefix(t, "//"):
			t = t[2:]
		case strings.HasPrefix(t, "/*"):
			t = strings.TrimSuffix(t[2:], "*/")
		}
		b.WriteString(t)
	}
	return b.String()
}

// CheckFile parses one Go file and checks each of its comment groups.
// Problems are returned as "path:line: message", path relative to root.
func CheckFile(root, path string, docs Docs) ([]string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	rel, err := filepath.Rel(root, path)
	if err != nil {
		rel = path
	}
	inTest := strings.HasSuffix(path, "_test.go")
	var out []string
	for _, cg := range f.Comments {
		start := fset.Position(cg.Pos()).Line
		for _, p := range CheckComment(commentText(cg), docs, inTest) {
			out = append(out, fmt.Sprintf("%s:%d: %s", filepath.ToSlash(rel), start+p.Line, p.Msg))
		}
	}
	return out, nil
}

// CheckTree checks every Go file under root, skipping hidden directories and
// testdata.
func CheckTree(root string, docs Docs) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		problems, err := CheckFile(root, path, docs)
		if err != nil {
			return err
		}
		out = append(out, problems...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, err)
	}
	return out, nil
}
