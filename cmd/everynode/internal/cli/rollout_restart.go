package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// restartedAtAnnotation is the template annotation "rollout restart" sets.
const restartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// RolloutRestartCommand is "everynode rollout restart ds/NAME".
type RolloutRestartCommand struct {
	main *Main

	clientFlags
	name string
}

func (c *RolloutRestartCommand) flags(*pflag.FlagSet) {}

func (c *RolloutRestartCommand) complete(pos []string) error {
	var err error
	c.name, err = daemonSetTarget("restart", pos)
	return err
}

// Run implements the command.
func (c *RolloutRestartCommand) Run(ctx context.Context, std IO) error {
	return c.withClient(ctx, c.main, std.Out, c.run)
}

func (c *RolloutRestartCommand) run(ctx context.Context, h client.Interface, out io.Writer) error {
	obj, err := h.Get(ctx, resources.DaemonSets, c.ns(), c.name)
	if err != nil {
		return err
	}
	ds := obj.(*appsv1.DaemonSet)
	patch, err := restartPatch(ds, c.main.now())
	if err != nil {
		return err
	}
	if _, err := h.Patch(ctx, resources.DaemonSets, ds.Namespace, ds.Name, types.StrategicMergePatchType, patch, client.WriteOptions{FieldManager: "kubectl-rollout"}, ""); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s restarted\n", objectRef(resources.DaemonSets, ds.Name))
	return err
}

// restartPatch is kubectl's restart patch: the template annotation
// restartedAt = now (RFC 3339, seconds). A second restart in the same
// second would change nothing, which kubectl refuses.
func restartPatch(ds *appsv1.DaemonSet, now time.Time) ([]byte, error) {
	at := now.UTC().Format(time.RFC3339)
	if ds.Spec.Template.Annotations[restartedAtAnnotation] == at {
		return nil, withFix(fmt.Errorf("failed to create patch for %s: if restart has already been triggered within the past second, please wait before attempting to trigger another", ds.Name),
			"wait a second and run it again")
	}
	return json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{restartedAtAnnotation: at}}}}})
}
