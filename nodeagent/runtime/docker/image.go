package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// progressEvery is how often a running pull logs its progress.
const progressEvery = 5 * time.Second

// ImageStatus reports a locally present image; an absent one is kind
// ImageNotFound.
func (r *Runtime) ImageStatus(ctx context.Context, ref string) (runtime.Image, error) {
	img, err := r.cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return runtime.Image{}, &runtime.Error{Op: "image status", Kind: runtime.ImageNotFound, Subject: ref, Err: err}
		}
		return runtime.Image{}, ctxErr(ctx, "image status", ref, err)
	}
	out := runtime.Image{ID: img.ID, Refs: slices.Concat(img.RepoTags, img.RepoDigests), Size: img.Size}
	if img.Config != nil {
		out.User = img.Config.User
	}
	return out, nil
}

// PullImage pulls ref from its registry, logging progress (a summary every
// few seconds, not per byte), and returns the image ID. A registry that does
// not answer is kind PullFailed; one that does not know ref is kind
// ImageNotFound.
func (r *Runtime) PullImage(ctx context.Context, ref string) (string, error) {
	log := r.log.With("image", ref)
	log.Info("pulling image")
	start := time.Now()
	rc, err := r.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return "", pullError(ctx, ref, err)
	}
	defer rc.Close()
	p := &pullProgress{layers: make(map[string]*layer)}
	dec := json.NewDecoder(rc)
	next := time.Now().Add(progressEvery)
	for {
		var m pullMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return "", pullError(ctx, ref, fmt.Errorf("reading the engine's progress: %w", err))
		}
		if m.Error != nil {
			return "", pullError(ctx, ref, errors.New(m.Error.Message))
		}
		p.add(m)
		if now := time.Now(); now.After(next) {
			next = now.Add(progressEvery)
			done, total, cur, size := p.summary()
			log.Info("pulling image", "layers_done", done, "layers", total, "downloaded_bytes", cur, "known_bytes", size, "elapsed", now.Sub(start).Round(time.Second))
		}
	}
	img, err := r.ImageStatus(ctx, ref)
	if err != nil {
		return "", &runtime.Error{Op: "pull", Kind: runtime.PullFailed, Subject: ref, Err: fmt.Errorf("pulled, but not found locally: %w", err)}
	}
	done, total, _, size := p.summary()
	log.Info("pulled image", "id", img.ID, "layers_done", done, "layers", total, "known_bytes", size, "status", p.last, "elapsed", time.Since(start).Round(time.Millisecond))
	return img.ID, nil
}

// pullError classifies a pull failure: the registry said the image does not
// exist (ImageNotFound), or anything else, such as no registry answering
// (PullFailed).
func pullError(ctx context.Context, ref string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return &runtime.Error{Op: "pull", Kind: runtime.PullFailed, Subject: ref, Err: fmt.Errorf("%w (%v)", cerr, err)}
	}
	msg := strings.ToLower(err.Error())
	kind := runtime.PullFailed
	switch {
	case strings.Contains(msg, "manifest unknown"), strings.Contains(msg, "not found"),
		strings.Contains(msg, "does not exist"):
		kind = runtime.ImageNotFound
		if strings.Contains(msg, "no such host") || strings.Contains(msg, "dial tcp") {
			kind = runtime.PullFailed
		}
	case cerrdefs.IsNotFound(err):
		kind = runtime.ImageNotFound
	}
	hint := "no registry answered; build or load the image on this node (docker build / docker load)"
	if kind == runtime.ImageNotFound {
		hint = "the registry does not know this image"
	}
	return &runtime.Error{Op: "pull", Kind: kind, Subject: ref, Err: fmt.Errorf("%s: %w", hint, err)}
}

// pullMessage is one message of the engine's pull progress stream: the
// fields of Docker's jsonmessage.JSONMessage the agent reads. (That package
// renders progress bars on terminals; decoding four fields does not need it.)
type pullMessage struct {
	ID       string              `json:"id,omitempty"`
	Status   string              `json:"status,omitempty"`
	Progress *pullProgressDetail `json:"progressDetail,omitempty"`
	Error    *pullErrorDetail    `json:"errorDetail,omitempty"`
}

// pullProgressDetail is a layer's download progress in bytes.
type pullProgressDetail struct {
	Current int64 `json:"current,omitempty"`
	Total   int64 `json:"total,omitempty"`
}

// pullErrorDetail is the error that ends a failed pull.
type pullErrorDetail struct {
	Message string `json:"message,omitempty"`
}

// pullProgress sums up the engine's per-layer progress messages.
type pullProgress struct {
	layers map[string]*layer
	last   string // the last status without a layer ("Digest: …", "Status: …")
}

type layer struct {
	current, total int64
	done           bool
}

func (p *pullProgress) add(m pullMessage) {
	if m.ID == "" || strings.HasPrefix(m.Status, "Pulling from") {
		if m.Status != "" {
			p.last = m.Status
		}
		return
	}
	l := p.layers[m.ID]
	if l == nil {
		l = &layer{}
		p.layers[m.ID] = l
	}
	switch m.Status {
	case "Pull complete", "Already exists":
		l.done = true
		l.current = l.total
	case "Downloading":
		if m.Progress != nil {
			l.current, l.total = m.Progress.Current, m.Progress.Total
		}
	}
}

func (p *pullProgress) summary() (done, total int, current, size int64) {
	for _, l := range p.layers {
		total++
		if l.done {
			done++
		}
		current += l.current
		size += l.total
	}
	return done, total, current, size
}

// LoadImage loads a `docker save` tarball into the engine (docker load),
// for images fetched from the everynode servers rather than a registry.
func (r *Runtime) LoadImage(ctx context.Context, rd io.Reader) error {
	resp, err := r.cli.ImageLoad(ctx, rd, client.ImageLoadWithQuiet(true))
	if err != nil {
		return ctxErr(ctx, "load image", "", err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m pullMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("load image: reading the engine's answer: %w", err)
		}
		if m.Error != nil {
			return fmt.Errorf("load image: %s", m.Error.Message)
		}
	}
}
