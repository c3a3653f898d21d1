package docker

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// MaxExecOutput bounds the output Exec returns; the rest is read and dropped.
const MaxExecOutput = 16 << 10

// Exec runs cmd in one of this node's running containers and returns its exit
// code and combined stdout and stderr (at most MaxExecOutput bytes). When ctx
// ends first, Exec returns an error wrapping ctx's error; the engine cannot
// kill an exec, so the command may run on in the container.
func (r *Runtime) Exec(ctx context.Context, id string, cmd []string) (int, []byte, error) {
	c, err := r.inspect(ctx, "exec", id)
	if err != nil {
		return 0, nil, err
	}
	if c.State == nil || !c.State.Running || c.State.Paused {
		status := "in an unknown state"
		if c.State != nil {
			status = string(c.State.Status)
		}
		return 0, nil, runtime.Errorf("exec", runtime.NotRunning, id, "container is %s", status)
	}
	if len(cmd) == 0 {
		return 0, nil, runtime.Errorf("exec", runtime.Invalid, id, "no command")
	}
	created, err := r.cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		Cmd: slices.Clone(cmd), AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return 0, nil, &runtime.Error{Op: "exec", Kind: runtime.NotRunning, Subject: id, Err: err}
		}
		return 0, nil, ctxErr(ctx, "exec", id, err)
	}
	att, err := r.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return 0, nil, ctxErr(ctx, "exec", id, err)
	}
	defer att.Close()

	// The hijacked connection ignores ctx: close it when ctx ends.
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			att.Close()
		case <-done:
		}
	}()
	out := &boundedBuffer{max: MaxExecOutput}
	_, copyErr := stdcopy.StdCopy(out, out, att.Reader)
	close(done)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return 0, out.bytes(), &runtime.Error{Op: "exec", Subject: id, Err: fmt.Errorf("%q: %w", cmd, err)}
	}
	if copyErr != nil {
		return 0, out.bytes(), ctxErr(ctx, "exec", id, fmt.Errorf("reading output: %w", copyErr))
	}
	ins, err := r.cli.ContainerExecInspect(ctx, created.ID)
	if err != nil {
		return 0, out.bytes(), ctxErr(ctx, "exec", id, err)
	}
	if ins.Running {
		return 0, out.bytes(), runtime.Errorf("exec", runtime.Other, id, "%q: output ended but the command still runs", cmd)
	}
	return ins.ExitCode, out.bytes(), nil
}

// boundedBuffer keeps the first max bytes written and drops the rest.
type boundedBuffer struct {
	max int
	buf []byte
}

var _ io.Writer = (*boundedBuffer)(nil)

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *boundedBuffer) bytes() []byte { return b.buf }
