package daemonset

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/images"
	"github.com/everynode/everynode/resources"
)

// Pre-pull (docs/edge.md §5): with annotation image.everynode.io/prepull
// "true", a RollingUpdate replaces no pod until every node that runs an
// old-revision pod reports the current template's images in its
// status.images. The controller asks those nodes' agents for the images
// with an annotation on the Node (images.NodePrePullPrefix +
// "<namespace>.<name>"), removed once the node needs nothing more.

// prePull is a DaemonSet's pre-pull progress in one sync.
type prePull struct {
	refs    []string // the template's images, as written (what the agent pulls)
	images  []string // their normalized names (what status.images holds)
	targets []string // desired nodes running an old-revision pod
	missing []string // targets that do not report every image yet
}

// waiting reports whether the rollout is held for images.
func (p *prePull) waiting() bool { return p != nil && len(p.missing) > 0 }

func (p *prePull) message() string {
	return fmt.Sprintf("pre-pulling the new revision's images: %d of %d nodes have them", len(p.targets)-len(p.missing), len(p.targets))
}

// newPrePull computes the progress; nil when the DaemonSet does not ask
// for pre-pulls or no node runs an old revision.
func newPrePull(ds *appsv1.DaemonSet, nodes []*corev1.Node, nodeToPods map[string][]*corev1.Pod, hash string) *prePull {
	if ds.Annotations[images.PrePullAnnotation] != "true" || ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		return nil
	}
	p := &prePull{}
	p.refs, p.images = templateImages(ds)
	elig := newEligibility(ds)
	for _, node := range nodes {
		if run, _ := elig.nodeShouldRun(node); !run {
			continue
		}
		old := false
		for _, pod := range nodeToPods[node.Name] {
			if pod.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != hash && pod.DeletionTimestamp == nil {
				old = true
			}
		}
		if !old {
			continue
		}
		p.targets = append(p.targets, node.Name)
		if !nodeHasImages(node, p.images) {
			p.missing = append(p.missing, node.Name)
		}
	}
	if len(p.targets) == 0 {
		return nil
	}
	return p
}

func templateImages(ds *appsv1.DaemonSet) (refs, names []string) {
	for _, c := range slices.Concat(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers) {
		name, err := images.Normalize(c.Image)
		if err != nil {
			name = c.Image
		}
		if !slices.Contains(names, name) {
			refs, names = append(refs, c.Image), append(names, name)
		}
	}
	return refs, names
}

func nodeHasImages(node *corev1.Node, want []string) bool {
	for _, w := range want {
		found := false
		for _, ci := range node.Status.Images {
			if slices.Contains(ci.Names, w) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// requestPrePulls sets the pre-pull annotation on the nodes still missing
// images and removes it from every other node that carries it.
func (c *Controller) requestPrePulls(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, p *prePull) error {
	key := images.NodePrePullPrefix + ds.Namespace + "." + ds.Name
	want := ""
	if p != nil {
		want = strings.Join(p.refs, ",")
	}
	for _, node := range nodes {
		has, set := node.Annotations[key]
		var value any
		switch {
		case p != nil && slices.Contains(p.missing, node.Name):
			if set && has == want {
				continue
			}
			value = want
		case set:
			value = nil // removed
		default:
			continue
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
		if err != nil {
			return err
		}
		if _, err := c.client.Patch(ctx, resources.Nodes, "", node.Name, types.MergePatchType, patch, client.WriteOptions{}, ""); err != nil {
			return fmt.Errorf("ask node %s to pre-pull %s: %w", node.Name, want, err)
		}
	}
	return nil
}
