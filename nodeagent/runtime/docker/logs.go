package docker

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// Logs writes the container's stdout and stderr, interleaved as written, to
// w. Timestamps are the engine's (RFC3339Nano, UTC). With Follow it blocks
// until the container stops or ctx ends, then returns nil.
func (r *Runtime) Logs(ctx context.Context, id string, opts runtime.LogOptions, w io.Writer) error {
	c, err := r.inspect(ctx, "logs", id)
	if err != nil {
		return err
	}
	lo := container.LogsOptions{
		ShowStdout: true, ShowStderr: true,
		Follow: opts.Follow, Timestamps: opts.Timestamps, Tail: "all",
	}
	if opts.TailLines != nil {
		lo.Tail = strconv.FormatInt(max(*opts.TailLines, 0), 10)
	}
	if !opts.Since.IsZero() {
		lo.Since = fmt.Sprintf("%d.%09d", opts.Since.Unix(), opts.Since.Nanosecond())
	}
	rc, err := r.cli.ContainerLogs(ctx, id, lo)
	if err != nil {
		if opts.Follow && ctx.Err() != nil {
			return nil
		}
		return ctxErr(ctx, "logs", id, err)
	}
	// The response body is bound to ctx: cancelling it ends a follow.
	defer rc.Close()
	if c.Config != nil && c.Config.Tty {
		_, err = io.Copy(w, rc)
	} else {
		_, err = stdcopy.StdCopy(w, w, rc)
	}
	if ctx.Err() != nil {
		if opts.Follow {
			return nil
		}
		return &runtime.Error{Op: "logs", Subject: id, Err: ctx.Err()}
	}
	if err != nil {
		return ctxErr(ctx, "logs", id, fmt.Errorf("reading output: %w", err))
	}
	return nil
}
