package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// LogRuntime is a Runtime that can also return container output.
type LogRuntime interface {
	Logs(ctx context.Context, id string, opts runtime.LogOptions, w io.Writer) error
}

// ErrLogsNotFound is returned by Logs when the pod, the container or (with
// Previous) its previous run is not known on this node.
var ErrLogsNotFound = errors.New("nodeagent: logs: not found")

// LogRequest selects a container's output, as PodLogOptions does.
type LogRequest struct {
	// Container names the container; empty is allowed when the pod has one.
	Container string
	// Previous returns the output of the previous, terminated run.
	Previous bool
	runtime.LogOptions
}

// Logs writes the output of a container of a pod bound to this node to w.
// With Follow it blocks until the container stops or ctx ends. It is safe to
// call concurrently with Run.
func (a *Agent) Logs(ctx context.Context, namespace, name string, req LogRequest, w io.Writer) error {
	lr, ok := a.rt.(LogRuntime)
	if !ok {
		return fmt.Errorf("nodeagent: logs: the runtime serves no logs")
	}
	pod := a.pods.find(namespace, name)
	if pod == nil {
		return fmt.Errorf("%w: pod %s/%s is not on node %s", ErrLogsNotFound, namespace, name, a.cfg.NodeName)
	}
	container := req.Container
	if container == "" {
		if len(pod.Spec.Containers) != 1 {
			return fmt.Errorf("%w: pod %s/%s has %d containers; name one", ErrLogsNotFound, namespace, name, len(pod.Spec.Containers))
		}
		container = pod.Spec.Containers[0].Name
	}
	obs, err := a.observe(ctx, pod.UID)
	if err != nil {
		return err
	}
	list := obs[container]
	idx := 0
	if req.Previous {
		idx = 1
	}
	if len(list) <= idx {
		what := "container"
		if req.Previous {
			what = "previous terminated container"
		}
		return fmt.Errorf("%w: %s %q in pod %s/%s", ErrLogsNotFound, what, container, namespace, name)
	}
	return lr.Logs(ctx, list[idx].ID, req.LogOptions, w)
}
