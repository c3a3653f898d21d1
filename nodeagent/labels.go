package nodeagent

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ParseLabels parses the --labels flag: comma-separated key=value pairs
// ("zone=edge,disk=ssd"). Keys are qualified names ([prefix/]name), values
// label values (may be empty); a key given twice is an error. An empty
// string yields an empty map.
func ParseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, item := range splitList(s) {
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("labels: %q: want key=value", item)
		}
		if err := checkLabel(k, v); err != nil {
			return nil, fmt.Errorf("labels: %q: %w", item, err)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("labels: key %q given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// ParseTaints parses the --taints flag: comma-separated taints written as
// kubectl taint does (k8s.io/kubectl pkg/cmd/taint parseTaint, whose package
// drags in kubectl's command machinery), key=value:Effect or key:Effect, where Effect is
// NoSchedule, PreferNoSchedule or NoExecute ("dedicated=edge:NoSchedule,
// gpu:NoExecute"). A key and effect pair given twice is an error. An empty
// string yields no taints.
func ParseTaints(s string) ([]corev1.Taint, error) {
	var out []corev1.Taint
	seen := map[string]bool{}
	for _, item := range splitList(s) {
		kv, effect, ok := strings.Cut(item, ":")
		if !ok || strings.Contains(effect, ":") {
			return nil, fmt.Errorf("taints: %q: want key=value:Effect or key:Effect", item)
		}
		k, v, _ := strings.Cut(kv, "=")
		t := corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(effect)}
		if err := checkTaint(t); err != nil {
			return nil, fmt.Errorf("taints: %q: %w", item, err)
		}
		id := taintID(t)
		if seen[id] {
			return nil, fmt.Errorf("taints: %s given twice", id)
		}
		seen[id] = true
		out = append(out, t)
	}
	return out, nil
}

// splitList splits a comma-separated flag value, trimming blanks and
// dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func checkLabel(k, v string) error {
	if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
		return fmt.Errorf("key %q: %s", k, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
		return fmt.Errorf("value %q: %s", v, strings.Join(msgs, "; "))
	}
	return nil
}

func checkTaint(t corev1.Taint) error {
	if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
		return fmt.Errorf("key %q: %s", t.Key, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsValidLabelValue(t.Value); len(msgs) > 0 {
		return fmt.Errorf("value %q: %s", t.Value, strings.Join(msgs, "; "))
	}
	switch t.Effect {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		return nil
	}
	return fmt.Errorf("effect %q: want NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
}

// taintID identifies a taint on a node: taints are unique by key and effect.
func taintID(t corev1.Taint) string { return t.Key + ":" + string(t.Effect) }
