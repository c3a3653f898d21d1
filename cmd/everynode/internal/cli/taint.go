package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// TaintCommand is "everynode taint node NAME KEY[=VALUE]:EFFECT | KEY[:EFFECT]-".
type TaintCommand struct {
	main *Main

	clientFlags
	overwrite bool
	targetFlags

	names  []string
	add    []corev1.Taint
	remove []corev1.Taint
}

func (c *TaintCommand) flags(fs *pflag.FlagSet) {
	fs.BoolVar(&c.overwrite, "overwrite", false, "allow replacing a taint of the same key and effect")
	c.registerTargets(fs, "every node", "every node matching this label selector")
}

func (c *TaintCommand) complete(pos []string) error {
	var err error
	var objs, specs []string
	for _, a := range pos {
		if strings.Contains(a, "=") || strings.Contains(a, ":") || strings.HasSuffix(a, "-") {
			specs = append(specs, a)
		} else {
			objs = append(objs, a)
		}
	}
	if len(specs) == 0 {
		return usageError("at least one taint update is required", "give KEY[=VALUE]:EFFECT to add or KEY[:EFFECT]- to remove")
	}
	if c.add, c.remove, err = parseTaints(specs); err != nil {
		return err
	}
	r, names, err := splitKindNames(objs)
	if err != nil {
		return err
	}
	if r != resources.Nodes {
		return usageError("taint applies only to nodes", "use \"everynode taint node NAME KEY=VALUE:EFFECT\"")
	}
	c.names = names
	return c.checkTargets(c.names)
}

// parseTaints is kubectl's ParseTaints: "k=v:E", "k:E" add; "k=v:E-",
// "k:E-", "k-" remove.
func parseTaints(specs []string) (add, remove []corev1.Taint, err error) {
	for _, s := range specs {
		if strings.HasSuffix(s, "-") {
			body := strings.TrimSuffix(s, "-")
			var t corev1.Taint
			if k, e, ok := strings.Cut(body, ":"); ok {
				t.Key, t.Effect = k, corev1.TaintEffect(e)
				if err := validateEffect(t.Effect); err != nil {
					return nil, nil, err
				}
			} else {
				t.Key = body
			}
			if k, _, ok := strings.Cut(t.Key, "="); ok {
				t.Key = k
			}
			if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
				return nil, nil, usageError(fmt.Sprintf("invalid taint spec: %v, %s", s, strings.Join(errs, "; ")), "use KEY[:EFFECT]-")
			}
			remove = append(remove, t)
			continue
		}
		kv, effect, ok := strings.Cut(s, ":")
		if !ok || effect == "" {
			return nil, nil, usageError(fmt.Sprintf("invalid taint spec: %v", s), "use KEY[=VALUE]:EFFECT with EFFECT NoSchedule, PreferNoSchedule or NoExecute")
		}
		t := corev1.Taint{Effect: corev1.TaintEffect(effect)}
		t.Key, t.Value, _ = strings.Cut(kv, "=")
		if err := validateEffect(t.Effect); err != nil {
			return nil, nil, err
		}
		if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
			return nil, nil, usageError(fmt.Sprintf("invalid taint spec: %v, %s", s, strings.Join(errs, "; ")), "use a valid taint key")
		}
		if t.Value != "" {
			if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
				return nil, nil, usageError(fmt.Sprintf("invalid taint spec: %v, %s", s, strings.Join(errs, "; ")), "use a valid taint value")
			}
		}
		for i := range add {
			if add[i].MatchTaint(&t) {
				return nil, nil, usageError(fmt.Sprintf("duplicated taints with the same key and effect: %v", t), "name each key and effect once")
			}
		}
		add = append(add, t)
	}
	for _, r := range remove {
		for _, a := range add {
			if r.Key == a.Key && (r.Effect == "" || r.Effect == a.Effect) {
				return nil, nil, usageError(fmt.Sprintf("can not both modify and remove the following taint(s) in the same command: %s", r.ToString()), "do one or the other")
			}
		}
	}
	return add, remove, nil
}

func validateEffect(e corev1.TaintEffect) error {
	switch e {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		return nil
	}
	return usageError(fmt.Sprintf("invalid taint effect: %v, unsupported taint effect", e), "use NoSchedule, PreferNoSchedule or NoExecute")
}

// Run implements the command.
func (c *TaintCommand) Run(ctx context.Context, std IO) error {
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	return forEachTarget(ctx, h, resources.Nodes, "", c.names, c.selector, std.Err, func(ctx context.Context, name string) error {
		return c.one(ctx, h, name, std.Out)
	})
}

func (c *TaintCommand) one(ctx context.Context, h client.Interface, name string, out io.Writer) error {
	obj, err := h.Get(ctx, resources.Nodes, "", name)
	if err != nil {
		return err
	}
	node := obj.(*corev1.Node)
	op, taints, err := reorganizeTaints(node, c.overwrite, c.add, c.remove)
	if err != nil {
		return err
	}
	patch, err := taintPatch(taints)
	if err != nil {
		return err
	}
	if _, err := h.Patch(ctx, resources.Nodes, "", name, types.StrategicMergePatchType, patch, client.WriteOptions{FieldManager: "kubectl-taint"}, ""); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "node/%s %s\n", name, op)
	return err
}

// taintPatch is the strategic merge patch kubectl sends: the complete list
// (spec.taints is atomic), or null when it becomes empty.
func taintPatch(taints []corev1.Taint) ([]byte, error) {
	var v any = taints
	if len(taints) == 0 {
		v = nil
	}
	return json.Marshal(map[string]any{"spec": map[string]any{"taints": v}})
}

// reorganizeTaints is kubectl's: the new list (added taints first, then the
// untouched existing ones, minus the removed) and the operation word
// (tainted, untainted or modified).
func reorganizeTaints(node *corev1.Node, overwrite bool, add, remove []corev1.Taint) (string, []corev1.Taint, error) {
	if !overwrite {
		var exists []string
		for _, t := range add {
			for _, old := range node.Spec.Taints {
				if t.MatchTaint(&old) {
					exists = append(exists, t.Key)
				}
			}
		}
		if len(exists) > 0 {
			return "", nil, withFix(fmt.Errorf("node %s already has %v taint(s) with same effect(s) and --overwrite is false", node.Name, strings.Join(exists, ",")),
				"pass --overwrite to replace it")
		}
	}
	newTaints := append([]corev1.Taint{}, add...)
	for _, old := range node.Spec.Taints {
		found := false
		for _, t := range newTaints {
			if t.MatchTaint(&old) {
				found = true
				break
			}
		}
		if !found {
			newTaints = append(newTaints, old)
		}
	}
	added := len(node.Spec.Taints) != len(newTaints)
	var errs []error
	deleted := false
	for _, r := range remove {
		var kept []corev1.Taint
		removed := false
		for _, t := range newTaints {
			if t.Key == r.Key && (r.Effect == "" || t.Effect == r.Effect) {
				removed = true
				continue
			}
			kept = append(kept, t)
		}
		newTaints = kept
		if !removed {
			errs = append(errs, fmt.Errorf("taint %q not found", r.ToString()))
		}
		deleted = removed
	}
	if len(errs) > 0 {
		return "", nil, errors.Join(errs...)
	}
	switch {
	case (added && deleted) || overwrite:
		return "modified", newTaints, nil
	case added:
		return "tainted", newTaints, nil
	}
	return "untainted", newTaints, nil
}
