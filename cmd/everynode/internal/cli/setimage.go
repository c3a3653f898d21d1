package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// SetImageCommand is "everynode set image ds/NAME CONTAINER=IMAGE...".
type SetImageCommand struct {
	main *Main

	clientFlags
	name   string
	images map[string]string // container (or "*") → image
}

func (c *SetImageCommand) flags(*pflag.FlagSet) {}

func (c *SetImageCommand) complete(pos []string) error {
	var err error
	var objs []string
	c.images = map[string]string{}
	for _, a := range pos {
		if k, v, ok := strings.Cut(a, "="); ok {
			if k == "" || v == "" {
				return usageError(fmt.Sprintf("invalid image spec %q", a), "use CONTAINER=IMAGE")
			}
			c.images[k] = v
			continue
		}
		objs = append(objs, a)
	}
	if len(c.images) == 0 {
		return usageError("at least one image update is required", "give CONTAINER=IMAGE (or *=IMAGE for all containers)")
	}
	c.name, err = daemonSetTarget("image", objs)
	return err
}

// Run implements the command.
func (c *SetImageCommand) Run(ctx context.Context, std IO) error {
	return c.withClient(ctx, c.main, std.Out, c.run)
}

func (c *SetImageCommand) run(ctx context.Context, h client.Interface, out io.Writer) error {
	obj, err := h.Get(ctx, resources.DaemonSets, c.ns(), c.name)
	if err != nil {
		return err
	}
	ds := obj.(*appsv1.DaemonSet)
	patch, err := setImagePatch(ds, c.images)
	if err != nil {
		return err
	}
	if _, err := h.Patch(ctx, resources.DaemonSets, ds.Namespace, ds.Name, types.StrategicMergePatchType, patch, client.WriteOptions{FieldManager: "kubectl-set"}, ""); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s image updated\n", objectRef(resources.DaemonSets, ds.Name))
	return err
}

// setImagePatch is the strategic merge patch of the named containers'
// images (init containers too, as kubectl does).
func setImagePatch(ds *appsv1.DaemonSet, images map[string]string) ([]byte, error) {
	type ctr struct {
		Image string `json:"image"`
		Name  string `json:"name"`
	}
	spec := map[string][]ctr{}
	found := map[string]bool{}
	for field, list := range map[string][]string{"containers": imageContainerNames(ds.Spec.Template.Spec.Containers), "initContainers": initNames(ds)} {
		for _, n := range list {
			img, ok := images[n]
			if !ok {
				img, ok = images["*"]
			}
			if ok {
				spec[field] = append(spec[field], ctr{Image: img, Name: n})
				found[n] = true
			}
		}
	}
	var missing []string
	for n := range images {
		if n != "*" && !found[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		return nil, withFix(fmt.Errorf("unable to find container named %q", missing[0]), "see the container names with \"everynode describe ds "+ds.Name+"\"")
	}
	return json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": spec}}})
}

func imageContainerNames(cs []corev1.Container) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

func initNames(ds *appsv1.DaemonSet) []string {
	return imageContainerNames(ds.Spec.Template.Spec.InitContainers)
}
