package docker

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// inspect returns the container if it exists and belongs to this node; any
// other is kind NotFound.
func (r *Runtime) inspect(ctx context.Context, op, id string) (container.InspectResponse, error) {
	c, err := r.cli.ContainerInspect(ctx, id)
	if err != nil {
		return c, ctxErr(ctx, op, id, err)
	}
	if c.Config == nil || c.Config.Labels[runtime.LabelNode] != r.node {
		return c, runtime.Errorf(op, runtime.NotFound, id, "no container of node %q", r.node)
	}
	return c, nil
}

// StartContainer starts a created container.
func (r *Runtime) StartContainer(ctx context.Context, id string) error {
	if !r.takeFresh(id) {
		if _, err := r.inspect(ctx, "start", id); err != nil {
			return err
		}
	}
	if err := r.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		return ctxErr(ctx, "start", id, err)
	}
	return nil
}

// StopContainer sends the image's stop signal (SIGTERM by default), waits up
// to grace (rounded up to whole seconds, as the engine counts), then kills
// the container. A container that is not running is left as is.
func (r *Runtime) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	c, err := r.inspect(ctx, "stop", id)
	if err != nil {
		return err
	}
	if c.State == nil || !c.State.Running {
		return nil
	}
	secs := int(math.Ceil(max(grace, 0).Seconds()))
	if err := r.cli.ContainerStop(ctx, id, container.StopOptions{Timeout: &secs}); err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil // removed meanwhile: it is stopped
		}
		return ctxErr(ctx, "stop", id, err)
	}
	return nil
}

// RemoveContainer removes a container and its anonymous volumes, killing it
// if it still runs. An absent container (or another node's) is no error.
func (r *Runtime) RemoveContainer(ctx context.Context, id string) error {
	r.takeFresh(id)
	if _, err := r.inspect(ctx, "remove", id); err != nil {
		if runtime.IsNotFound(err) {
			return nil
		}
		return err
	}
	return r.remove(ctx, id)
}

// addFresh records a container this Runtime just created (see
// Runtime.fresh).
func (r *Runtime) addFresh(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fresh == nil {
		r.fresh = map[string]struct{}{}
	}
	r.fresh[id] = struct{}{}
}

// takeFresh reports whether id was created here and not started or removed
// since, and forgets it.
func (r *Runtime) takeFresh(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.fresh[id]
	delete(r.fresh, id)
	return ok
}

func (r *Runtime) remove(ctx context.Context, id string) error {
	err := r.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return ctxErr(ctx, "remove", id, err)
	}
	return nil
}

// ListContainers returns this node's containers, in any state, carrying
// every label of filter.
func (r *Runtime) ListContainers(ctx context.Context, filter runtime.Labels) ([]runtime.Container, error) {
	args := filters.NewArgs(filters.Arg("label", runtime.LabelNode+"="+r.node))
	for k, v := range filter {
		if k == runtime.LabelNode && v != r.node {
			return nil, nil
		}
		args.Add("label", k+"="+v)
	}
	list, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, ctxErr(ctx, "list", r.node, err)
	}
	out := make([]runtime.Container, 0, len(list))
	for _, c := range list {
		if c.Labels[runtime.LabelNode] != r.node || !filter.Matches(c.Labels) {
			continue // the engine filters; this only guards its semantics
		}
		img := c.Labels[labelImage]
		if img == "" {
			img = c.Image
		}
		out = append(out, runtime.Container{
			ID: c.ID, Image: img, ImageID: c.ImageID, State: state(string(c.State)),
			Labels: userLabels(c.Labels), Created: time.Unix(c.Created, 0),
		})
	}
	return out, nil
}

// ContainerStatus inspects one of this node's containers.
func (r *Runtime) ContainerStatus(ctx context.Context, id string) (runtime.ContainerStatus, error) {
	c, err := r.inspect(ctx, "status", id)
	if err != nil {
		return runtime.ContainerStatus{}, err
	}
	st := runtime.ContainerStatus{
		ID:      c.ID,
		Image:   c.Config.Labels[labelImage],
		ImageID: c.Image,
		Labels:  userLabels(c.Config.Labels),
		Created: parseTime(c.Created),
		State:   runtime.StateUnknown,
	}
	if st.Image == "" {
		st.Image = c.Config.Image
	}
	if a := c.Config.Labels[labelAnnotations]; a != "" {
		if err := json.Unmarshal([]byte(a), &st.Annotations); err != nil {
			r.log.Warn("unreadable annotations label", "id", id, "err", err)
		}
	}
	if s := c.State; s != nil {
		st.State = state(string(s.Status))
		st.Started = parseTime(s.StartedAt)
		st.Message = s.Error
		if st.State == runtime.StateExited {
			st.Finished = parseTime(s.FinishedAt)
			if st.Finished.Before(st.Started) {
				// The engine stamps StartedAt after starting the process; one
				// that exits at once can seem to finish before it started.
				st.Finished = st.Started
			}
			st.ExitCode = s.ExitCode
			switch {
			case s.OOMKilled:
				st.Reason = "OOMKilled"
			case s.ExitCode == 0:
				st.Reason = "Completed"
			default:
				st.Reason = "Error"
			}
		}
	}
	if ns := c.NetworkSettings; ns != nil && (c.HostConfig == nil || !c.HostConfig.NetworkMode.IsHost()) {
		st.IP = ns.IPAddress
		if st.IP == "" {
			for _, n := range ns.Networks {
				if n != nil && n.IPAddress != "" {
					st.IP = n.IPAddress
					break
				}
			}
		}
	}
	return st, nil
}

// state maps the engine's status onto the contract's states: paused and
// restarting processes still exist (running); dead and removing ones ran
// and stopped (exited).
func state(s string) runtime.State {
	switch s {
	case "created":
		return runtime.StateCreated
	case "running", "paused", "restarting":
		return runtime.StateRunning
	case "exited", "dead", "removing":
		return runtime.StateExited
	}
	return runtime.StateUnknown
}

// userLabels drops the labels the runtime keeps for itself.
func userLabels(l map[string]string) map[string]string {
	out := maps.Clone(l)
	delete(out, labelImage)
	delete(out, labelAnnotations)
	return out
}

// parseTime reads an engine timestamp; the engine's zero time
// ("0001-01-01T00:00:00Z") and garbage are the zero time.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 || strings.HasPrefix(s, "0001-") {
		return time.Time{}
	}
	return t
}
