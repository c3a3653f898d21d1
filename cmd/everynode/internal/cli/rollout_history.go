package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// changeCauseAnnotation is shown in rollout history's CHANGE-CAUSE column.
const changeCauseAnnotation = "kubernetes.io/change-cause"

// RolloutHistoryCommand is "everynode rollout history ds/NAME [--revision N]".
type RolloutHistoryCommand struct {
	main *Main

	clientFlags
	revision int64
	name     string
}

func (c *RolloutHistoryCommand) flags(fs *pflag.FlagSet) {
	fs.Int64Var(&c.revision, "revision", 0, "show the pod template of this revision")
}

func (c *RolloutHistoryCommand) complete(pos []string) error {
	var err error
	if c.revision < 0 {
		return usageError(fmt.Sprintf("revision must be a positive integer: %v", c.revision), "pass --revision N with N ≥ 1")
	}
	c.name, err = daemonSetTarget("history", pos)
	return err
}

// Run implements the command.
func (c *RolloutHistoryCommand) Run(ctx context.Context, std IO) error {
	return c.withClient(ctx, c.main, std.Out, c.run)
}

func (c *RolloutHistoryCommand) run(ctx context.Context, h client.Interface, out io.Writer) error {
	ds, revs, err := getDaemonSetHistory(ctx, h, c.ns(), c.name)
	if err != nil {
		return err
	}
	text, err := formatHistory(ds, revs, c.revision)
	if err != nil {
		return err
	}
	with := ""
	if c.revision > 0 {
		with = fmt.Sprintf("with revision #%d", c.revision)
	}
	// kubectl's name printer: "daemonset.apps/NAME <operation>".
	_, err = fmt.Fprintf(out, "%s %s\n%s\n", objectRef(resources.DaemonSets, ds.Name), with, text)
	return err
}

// getDaemonSetHistory gets the daemon set namespace/name and its revisions.
func getDaemonSetHistory(ctx context.Context, h client.Interface, namespace, name string) (*appsv1.DaemonSet, []*appsv1.ControllerRevision, error) {
	obj, err := h.Get(ctx, resources.DaemonSets, namespace, name)
	if err != nil {
		return nil, nil, err
	}
	ds := obj.(*appsv1.DaemonSet)
	revs, err := daemonSetHistory(ctx, h, ds)
	if err != nil {
		return nil, nil, err
	}
	return ds, revs, nil
}

// daemonSetHistory lists the ControllerRevisions the DaemonSet controls
// (selected by its selector, controller ownerReference to its uid), oldest
// revision first — kubectl's controlledHistories.
func daemonSetHistory(ctx context.Context, h client.Interface, ds *appsv1.DaemonSet) ([]*appsv1.ControllerRevision, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("daemon set %q has an invalid selector: %w", ds.Name, err)
	}
	objs, _, err := h.List(ctx, resources.ControllerRevisions, ds.Namespace, client.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	var out []*appsv1.ControllerRevision
	for _, o := range objs {
		cr, ok := o.(*appsv1.ControllerRevision)
		if !ok {
			continue
		}
		if ref := metav1.GetControllerOf(cr); ref != nil && ref.UID == ds.UID {
			out = append(out, cr)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out, nil
}

// formatHistory is kubectl's printHistory: the REVISION CHANGE-CAUSE table,
// or with revision > 0 that revision's pod template.
func formatHistory(ds *appsv1.DaemonSet, revs []*appsv1.ControllerRevision, revision int64) (string, error) {
	if len(revs) == 0 {
		return "No rollout history found.", nil
	}
	var b strings.Builder
	if revision > 0 {
		var cr *appsv1.ControllerRevision
		for _, r := range revs {
			if r.Revision == revision {
				cr = r
			}
		}
		if cr == nil {
			return "", withFix(fmt.Errorf("unable to find the specified revision"), "see the revisions with \"everynode rollout history ds/"+ds.Name+"\"")
		}
		applied, err := applyRevision(ds, cr)
		if err != nil {
			return "", fmt.Errorf("unable to parse history %s: %w", cr.Name, err)
		}
		b.WriteString(podTemplateText(&applied.Spec.Template))
		return b.String(), nil
	}
	w := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	fmt.Fprintf(w, "REVISION\tCHANGE-CAUSE\n")
	for _, r := range revs {
		cause := r.Annotations[changeCauseAnnotation]
		if cause == "" {
			cause = "<none>"
		}
		fmt.Fprintf(w, "%d\t%s\n", r.Revision, cause)
	}
	if err := w.Flush(); err != nil {
		return "", err
	}
	return b.String(), nil
}

// applyRevision returns the DaemonSet with the revision's data applied as
// a strategic merge patch, as the server would store it after undo.
func applyRevision(ds *appsv1.DaemonSet, cr *appsv1.ControllerRevision) (*appsv1.DaemonSet, error) {
	cur, err := json.Marshal(ds)
	if err != nil {
		return nil, err
	}
	merged, err := strategicpatch.StrategicMergePatch(cur, cr.Data.Raw, &appsv1.DaemonSet{})
	if err != nil {
		return nil, err
	}
	out := &appsv1.DaemonSet{}
	if err := json.Unmarshal(merged, out); err != nil {
		return nil, err
	}
	return out, nil
}

// daemonSetPatch is kubectl's getDaemonSetPatch: the patch that replaces
// spec.template with the DaemonSet's current one — the shape of a
// ControllerRevision's data.
func daemonSetPatch(ds *appsv1.DaemonSet) ([]byte, error) {
	b, err := json.Marshal(ds)
	if err != nil {
		return nil, err
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	spec, _ := raw["spec"].(map[string]any)
	tpl, _ := spec["template"].(map[string]any)
	if tpl == nil {
		tpl = map[string]any{}
	}
	tpl["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": tpl}})
}

// sameJSON compares two JSON documents by value.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// RolloutUndoCommand is "everynode rollout undo ds/NAME [--to-revision N]".
type RolloutUndoCommand struct {
	main *Main

	clientFlags
	toRevision int64
	name       string
}

func (c *RolloutUndoCommand) flags(fs *pflag.FlagSet) {
	fs.Int64Var(&c.toRevision, "to-revision", 0, "the revision to roll back to (0: the one before the current)")
}

func (c *RolloutUndoCommand) complete(pos []string) error {
	var err error
	if c.toRevision < 0 {
		return usageError(fmt.Sprintf("revision must be a positive integer: %v", c.toRevision), "pass --to-revision N with N ≥ 1")
	}
	c.name, err = daemonSetTarget("undo", pos)
	return err
}

// Run implements the command.
func (c *RolloutUndoCommand) Run(ctx context.Context, std IO) error {
	return c.withClient(ctx, c.main, std.Out, c.run)
}

func (c *RolloutUndoCommand) run(ctx context.Context, h client.Interface, out io.Writer) error {
	ds, revs, err := getDaemonSetHistory(ctx, h, c.ns(), c.name)
	if err != nil {
		return err
	}
	to, err := findRevision(revs, c.toRevision)
	if err != nil {
		return err
	}
	ref := objectRef(resources.DaemonSets, ds.Name)
	cur, err := daemonSetPatch(ds)
	if err != nil {
		return fmt.Errorf("encode daemon set %q: %w", ds.Name, err)
	}
	if sameJSON(cur, to.Data.Raw) {
		_, err := fmt.Fprintf(out, "%s skipped rollback (current template already matches revision %d)\n", ref, to.Revision)
		return err
	}
	if _, err := h.Patch(ctx, resources.DaemonSets, ds.Namespace, ds.Name, types.StrategicMergePatchType, to.Data.Raw, client.WriteOptions{}, ""); err != nil {
		return fmt.Errorf("failed restoring revision %d: %w", to.Revision, err)
	}
	_, err = fmt.Fprintf(out, "%s rolled back\n", ref)
	return err
}

// findRevision is kubectl's findHistory: revision 0 means the one before
// the newest.
func findRevision(revs []*appsv1.ControllerRevision, n int64) (*appsv1.ControllerRevision, error) {
	if n == 0 {
		if len(revs) <= 1 {
			return nil, withFix(fmt.Errorf("no last revision to roll back to"), "the DaemonSet has only one revision")
		}
		return revs[len(revs)-2], nil
	}
	for _, r := range revs {
		if r.Revision == n {
			return r, nil
		}
	}
	return nil, withFix(fmt.Errorf("unable to find specified revision %d in history", n), "see the revisions with \"everynode rollout history\"")
}
