package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// LabelCommand is "everynode label" and, with annotate set, "everynode
// annotate": KIND NAME... k=v k2- [--overwrite], sent as a JSON merge patch.
type LabelCommand struct {
	main     *Main
	annotate bool

	clientFlags
	overwrite bool
	targetFlags

	r      *resources.Resource
	names  []string
	set    map[string]string
	remove []string
}

func (c *LabelCommand) verb() string {
	if c.annotate {
		return "annotate"
	}
	return "label"
}

func (c *LabelCommand) flags(fs *pflag.FlagSet) {
	fs.BoolVar(&c.overwrite, "overwrite", false, "allow changing an existing value")
	c.registerTargets(fs, "every object of the kind (in the namespace)", "every object matching this label selector")
}

func (c *LabelCommand) complete(pos []string) error {
	var err error
	var objs, specs []string
	for _, a := range pos {
		if strings.Contains(a, "=") || strings.HasSuffix(a, "-") {
			specs = append(specs, a)
		} else {
			objs = append(objs, a)
		}
	}
	if len(specs) == 0 {
		return usageError(fmt.Sprintf("at least one %s update is required", map[bool]string{false: "label", true: "annotation"}[c.annotate]),
			"give KEY=VALUE to set or KEY- to remove")
	}
	if c.set, c.remove, err = parseKeyValues(specs, !c.annotate); err != nil {
		return err
	}
	if c.r, c.names, err = splitKindNames(objs); err != nil {
		return err
	}
	if c.r == nil {
		return usageError("you must specify the type of resource", "use one of: "+kindList())
	}
	return c.checkTargets(c.names)
}

// parseKeyValues parses "k=v" (set) and "k-" (remove) arguments; labels
// have their keys and values validated as the API would.
func parseKeyValues(specs []string, labels bool) (map[string]string, []string, error) {
	set := map[string]string{}
	var remove []string
	kind := "annotation"
	if labels {
		kind = "label"
	}
	for _, s := range specs {
		if k, v, ok := strings.Cut(s, "="); ok {
			if k == "" {
				return nil, nil, usageError(fmt.Sprintf("invalid %s spec: %v", kind, s), "use KEY=VALUE")
			}
			if labels {
				if errs := validation.IsQualifiedName(k); len(errs) > 0 {
					return nil, nil, usageError(fmt.Sprintf("invalid label spec: %v, %s", s, strings.Join(errs, "; ")), "use a valid label key")
				}
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					return nil, nil, usageError(fmt.Sprintf("invalid label value: %q: %s", s, strings.Join(errs, "; ")), "use a valid label value")
				}
			}
			set[k] = v
			continue
		}
		k := strings.TrimSuffix(s, "-")
		if k == "" {
			return nil, nil, usageError(fmt.Sprintf("invalid %s spec: %v", kind, s), "use KEY- to remove a key")
		}
		remove = append(remove, k)
	}
	for _, k := range remove {
		if _, ok := set[k]; ok {
			return nil, nil, usageError(fmt.Sprintf("can not both modify and remove the following %s(s) in the same command: %s", kind, k), "do one or the other")
		}
	}
	return set, remove, nil
}

// Run implements the command.
func (c *LabelCommand) Run(ctx context.Context, std IO) error {
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	return forEachTarget(ctx, h, c.r, c.ns(), c.names, c.selector, std.Err, func(ctx context.Context, name string) error {
		return c.one(ctx, h, name, std.Out)
	})
}

func (c *LabelCommand) one(ctx context.Context, h client.Interface, name string, out io.Writer) error {
	obj, err := h.Get(ctx, c.r, c.ns(), name)
	if err != nil {
		return err
	}
	cur := obj.GetLabels()
	if c.annotate {
		cur = obj.GetAnnotations()
	}
	patch, msg, err := c.patch(cur, out)
	if err != nil {
		return err
	}
	if patch != nil {
		manager := "kubectl-label"
		if c.annotate {
			manager = "kubectl-annotate"
		}
		if _, err := h.Patch(ctx, c.r, obj.GetNamespace(), name, types.MergePatchType, patch, client.WriteOptions{FieldManager: manager}, ""); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(out, "%s %s\n", objectRef(c.r, name), msg)
	return err
}

// patch computes the merge patch (nil when nothing changes) and kubectl's
// message for the current labels or annotations.
func (c *LabelCommand) patch(cur map[string]string, out io.Writer) ([]byte, string, error) {
	if !c.overwrite {
		if err := c.noOverwrites(cur); err != nil {
			return nil, "", err
		}
	}
	changes := map[string]any{}
	grew, shrank := false, false
	for _, k := range sortedKeys(c.set) {
		old, had := cur[k]
		if had && old == c.set[k] {
			continue
		}
		changes[k] = c.set[k]
		if !had {
			grew = true
		}
	}
	for _, k := range c.remove {
		if _, had := cur[k]; !had {
			if !c.annotate {
				fmt.Fprintf(out, "label %q not found.\n", k)
			}
			continue
		}
		changes[k] = nil
		shrank = true
	}
	if c.annotate {
		if len(changes) == 0 {
			return nil, "annotated", nil
		}
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": changes}})
		return b, "annotated", err
	}
	if len(changes) == 0 {
		return nil, "not labeled", nil
	}
	// kubectl: "unlabeled" when the object got smaller without --overwrite.
	msg := "labeled"
	if !c.overwrite && shrank && !grew {
		msg = "unlabeled"
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": changes}})
	return b, msg, err
}

// noOverwrites is kubectl's refusal to change a value without --overwrite.
func (c *LabelCommand) noOverwrites(cur map[string]string) error {
	var clash []string
	keys := make([]string, 0, len(c.set))
	for k := range c.set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if c.annotate && k == changeCauseAnnotation {
			continue
		}
		if old, ok := cur[k]; ok && old != c.set[k] {
			clash = append(clash, fmt.Sprintf("'%s' already has a value (%s)", k, old))
		}
	}
	if len(clash) == 0 {
		return nil
	}
	if c.annotate {
		return withFix(fmt.Errorf("--overwrite is false but found the following declared annotation(s): %s", strings.Join(clash, "; ")), "pass --overwrite to change it")
	}
	for i := range clash {
		clash[i] += ", and --overwrite is false"
	}
	return withFix(fmt.Errorf("%s", strings.Join(clash, ", ")), "pass --overwrite to change it")
}
