package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// manifest is one object read from a file: its resource, its JSON exactly
// as written (converted from YAML) and the typed object decoded from it.
type manifest struct {
	source string // file name, or "STDIN"
	r      *resources.Resource
	raw    map[string]any
	obj    client.Object
}

// readManifests reads every object in path: a file, a directory (its .yaml,
// .yml and .json files, not recursive, in name order) or "-" for stdin.
func readManifests(path string, stdin io.Reader) ([]manifest, error) {
	if path == "-" {
		return decodeManifests("STDIN", stdin)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, withFix(fmt.Errorf("cannot read %s: %w", path, err), "check the path given to -f")
	}
	files := []string{path}
	if fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("cannot read directory %s: %w", path, err)
		}
		files = nil
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".yaml", ".yml", ".json":
				if !e.IsDir() {
					files = append(files, filepath.Join(path, e.Name()))
				}
			}
		}
		sort.Strings(files)
		if len(files) == 0 {
			return nil, withFix(fmt.Errorf("no .yaml, .yml or .json files in %s", path), "point -f at a manifest file or a directory of them")
		}
	}
	var out []manifest
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, fmt.Errorf("cannot read %s: %w", f, err)
		}
		ms, err := decodeManifests(f, fh)
		fh.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	return out, nil
}

// decodeManifests splits a multi-document YAML (or JSON) stream and decodes
// each non-empty document strictly: unknown fields are errors, as with
// kubectl's fieldValidation=Strict.
func decodeManifests(source string, rd io.Reader) ([]manifest, error) {
	yr := utilyaml.NewYAMLReader(bufio.NewReader(rd))
	var out []manifest
	for i := 1; ; i++ {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("error parsing %s: %w", source, err)
		}
		data, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, withFix(fmt.Errorf("error parsing %s (document %d): %w", source, i, err), "fix the YAML")
		}
		data = bytes.TrimSpace(data)
		if len(data) == 0 || string(data) == "null" {
			continue
		}
		m, err := decodeManifest(source, data)
		if err != nil {
			return nil, err
		}
		// A kubectl-style List holds objects in items.
		out = append(out, m...)
	}
}

func decodeManifest(source string, data []byte) ([]manifest, error) {
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, withFix(fmt.Errorf("error parsing %s: %w", source, err), "each document must be an object")
	}
	apiVersion, _ := raw["apiVersion"].(string)
	kind, _ := raw["kind"].(string)
	if apiVersion == "" || kind == "" {
		return nil, withFix(fmt.Errorf("error validating %s: apiVersion or kind not set", source), "every document needs apiVersion and kind")
	}
	if kind == "List" && apiVersion == "v1" {
		items, _ := raw["items"].([]any)
		var out []manifest
		for _, it := range items {
			b, err := json.Marshal(it)
			if err != nil {
				return nil, fmt.Errorf("error parsing %s: %w", source, err)
			}
			ms, err := decodeManifest(source, b)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
		return out, nil
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, withFix(fmt.Errorf("error parsing %s: %w", source, err), "fix apiVersion")
	}
	r := resources.ByGVK(gv.WithKind(kind))
	if r == nil {
		return nil, withFix(fmt.Errorf("resource mapping not found for kind %q in version %q in %s", kind, apiVersion, source),
			"everynode serves: "+kindList())
	}
	obj := r.New()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return nil, withFix(fmt.Errorf("error validating %s: %s %q: %w", source, kind, nameOf(raw), err), "fix or remove the field")
	}
	return []manifest{{source: source, r: r, raw: raw, obj: obj}}, nil
}

func nameOf(raw map[string]any) string {
	md, _ := raw["metadata"].(map[string]any)
	n, _ := md["name"].(string)
	return n
}
