package server

import (
	"context"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/images"
	"github.com/everynode/everynode/resources"
)

// imageHolders are the Ready nodes whose status.images lists name, with
// their agent endpoints: the servers name them so agents fetch an image
// from their peers (docs/edge.md §4).
func (s *Server) imageHolders(ctx context.Context, name string) []images.Holder {
	if s.local == nil {
		return nil
	}
	objs, _, err := s.local.List(ctx, resources.Nodes, "", client.ListOptions{})
	if err != nil {
		return nil
	}
	var out []images.Holder
	for _, o := range objs {
		n, ok := o.(*corev1.Node)
		if !ok || !nodeReady(n) || n.Status.DaemonEndpoints.KubeletEndpoint.Port == 0 || !hasImage(n, name) {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				out = append(out, images.Holder{Node: n.Name,
					URL: "https://" + net.JoinHostPort(a.Address, strconv.Itoa(int(n.Status.DaemonEndpoints.KubeletEndpoint.Port)))})
				break
			}
		}
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasImage(n *corev1.Node, name string) bool {
	for _, ci := range n.Status.Images {
		for _, nm := range ci.Names {
			if nm == name {
				return true
			}
		}
	}
	return false
}
