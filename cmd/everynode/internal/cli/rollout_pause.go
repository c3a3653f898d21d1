package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/rollout"
)

// rolloutAction is one of the verbs that set or clear rollout.everynode.io/
// annotations (docs/rollouts.md).
type rolloutAction string

const (
	actionPause   rolloutAction = "pause"
	actionResume  rolloutAction = "resume"
	actionPromote rolloutAction = "promote"
)

// RolloutAnnotateCommand is "everynode rollout pause|resume|promote
// ds/NAME": it patches the DaemonSet's rollout annotations and prints
// kubectl's line ("daemonset.apps/NAME paused").
type RolloutAnnotateCommand struct {
	main   *Main
	action rolloutAction

	clientFlags
	name string
}

func (c *RolloutAnnotateCommand) flags(*pflag.FlagSet) {}

func (c *RolloutAnnotateCommand) complete(pos []string) error {
	var err error
	c.name, err = daemonSetTarget(string(c.action), pos)
	return err
}

// Run implements the command.
func (c *RolloutAnnotateCommand) Run(ctx context.Context, std IO) error {
	return c.withClient(ctx, c.main, std.Out, c.run)
}

func (c *RolloutAnnotateCommand) run(ctx context.Context, h client.Interface, out io.Writer) error {
	obj, err := h.Get(ctx, resources.DaemonSets, c.ns(), c.name)
	if err != nil {
		return err
	}
	ds := obj.(*appsv1.DaemonSet)
	set, done, err := rolloutAnnotations(c.action, ds)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": ds.ResourceVersion, "annotations": set}})
	if err != nil {
		return err
	}
	if _, err := h.Patch(ctx, resources.DaemonSets, ds.Namespace, ds.Name, types.MergePatchType, patch,
		client.WriteOptions{FieldManager: "kubectl-rollout"}, ""); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s %s\n", objectRef(resources.DaemonSets, ds.Name), done)
	return err
}

// rolloutAnnotations is the annotation change of action on ds (nil values
// remove) and the word kubectl prints; like kubectl's pause and resume, an
// action that would change nothing is an error.
func rolloutAnnotations(action rolloutAction, ds *appsv1.DaemonSet) (map[string]*string, string, error) {
	opts, _ := rollout.Parse(ds.Annotations)
	ref := fmt.Sprintf("daemonsets.apps %q", ds.Name)
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		return nil, "", withFix(fmt.Errorf("%s uses the %s update strategy; rollout %s applies to RollingUpdate only", ref, ds.Spec.UpdateStrategy.Type, action),
			"set spec.updateStrategy.type: RollingUpdate, or delete pods yourself (OnDelete)")
	}
	yes := "true"
	switch action {
	case actionPause:
		if opts.Paused {
			return nil, "", withFix(fmt.Errorf("%s is already paused", ref), fmt.Sprintf("resume it with \"everynode rollout resume ds/%s\"", ds.Name))
		}
		return map[string]*string{rollout.Paused: &yes}, "paused", nil
	case actionResume:
		if _, set := ds.Annotations[rollout.Paused]; !set {
			return nil, "", withFix(fmt.Errorf("%s is not paused", ref), fmt.Sprintf("pause it with \"everynode rollout pause ds/%s\"", ds.Name))
		}
		return map[string]*string{rollout.Paused: nil}, "resumed", nil
	case actionPromote:
		_, p := ds.Annotations[rollout.Partition]
		_, s := ds.Annotations[rollout.CanarySelector]
		if !p && !s {
			return nil, "", withFix(fmt.Errorf("%s has no canary to promote: neither %s nor %s is set", ref, rollout.Partition, rollout.CanarySelector),
				"start a canary with \"everynode annotate ds/"+ds.Name+" "+rollout.Partition+"=1\" before changing the template")
		}
		return map[string]*string{rollout.Partition: nil, rollout.CanarySelector: nil}, "promoted", nil
	}
	return nil, "", fmt.Errorf("unknown rollout action %q", action)
}
