package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/images"
)

// ImageFetcher brings an image from the servers' image store into the
// runtime (images.Fetcher).
type ImageFetcher interface {
	Fetch(ctx context.Context, ref string, progress func(done, total int64)) (images.Result, error)
}

// fetchImage fetches c's image from the servers after a failed pull. It
// reports true once the image is loaded; false with a nil error when the
// servers do not hold it either (the pull's error stands).
func (a *Agent) fetchImage(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (bool, error) {
	if a.cfg.Images == nil {
		return false, nil
	}
	start := a.clock.Now()
	announced := false
	res, err := a.cfg.Images.Fetch(ctx, c.Image, func(done, total int64) {
		if !announced {
			announced = true
			a.event(pod, c.Name, corev1.EventTypeNormal, eventPulling,
				"Pulling image %q from the everynode servers (no registry answered): %d bytes", c.Image, total)
		}
	})
	if errors.Is(err, images.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("no registry has %s and fetching it from the everynode servers failed: %w", c.Image, err)
	}
	a.present.add(c.Image, res.Platform.Size())
	a.event(pod, c.Name, corev1.EventTypeNormal, eventPulled,
		"Successfully pulled image %q from the everynode servers (%s, %d bytes, %d transferred, %d of them from peers) in %s",
		c.Image, res.Platform, res.Platform.Size(), res.Downloaded, res.FromPeers, a.clock.Since(start).Round(1e6))
	a.log.Info("image fetched", "image", c.Image, "platform", res.Platform.String(),
		"bytes", res.Platform.Size(), "transferred", res.Downloaded, "from_peers", res.FromPeers)
	return true, nil
}

// presentImages are the images the agent found or brought onto the node.
type presentImages struct {
	mu   sync.Mutex
	size map[string]int64 // normalized name → bytes
}

func (p *presentImages) add(ref string, size int64) {
	name, err := images.Normalize(ref)
	if err != nil {
		name = ref
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.size == nil {
		p.size = map[string]int64{}
	}
	p.size[name] = size
}

// list is Node.status.images: one entry per image, its normalized and
// familiar names, by name.
func (p *presentImages) list() []corev1.ContainerImage {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]corev1.ContainerImage, 0, len(p.size))
	for name, size := range p.size {
		names := []string{name}
		if f := images.Familiar(name); f != name {
			names = append(names, f)
		}
		out = append(out, corev1.ContainerImage{Names: names, SizeBytes: size})
	}
	slices.SortFunc(out, func(a, b corev1.ContainerImage) int { return strings.Compare(a.Names[0], b.Names[0]) })
	if len(out) == 0 {
		return nil
	}
	return out
}

// requestPrePull hands the images the Node's pre-pull annotations name
// (images.NodePrePullPrefix, set by the DaemonSet controller) to the
// pre-pull loop, unless they are all present.
func (a *Agent) requestPrePull(node *corev1.Node) {
	var want []string
	for k, v := range node.Annotations {
		if !strings.HasPrefix(k, images.NodePrePullPrefix) {
			continue
		}
		for _, ref := range strings.Split(v, ",") {
			if ref = strings.TrimSpace(ref); ref != "" && !a.present.has(ref) && !slices.Contains(want, ref) {
				want = append(want, ref)
			}
		}
	}
	if len(want) == 0 {
		return
	}
	select {
	case <-a.prepull: // replaced by the newer request
	default:
	}
	select {
	case a.prepull <- want:
	default:
	}
}

// prePullLoop makes the requested images present: already there, pulled,
// or fetched from the servers. Once present they are reported in
// status.images, which releases the DaemonSet's rollout.
func (a *Agent) prePullLoop(ctx context.Context) {
	for {
		var want []string
		select {
		case <-ctx.Done():
			return
		case want = <-a.prepull:
		}
		for _, ref := range want {
			if ctx.Err() != nil {
				return
			}
			if err := a.prePullOne(ctx, ref); err != nil {
				a.log.Warn("pre-pull failed; retried at the next node status update", "image", ref, "err", err)
			}
		}
	}
}

func (a *Agent) prePullOne(ctx context.Context, ref string) error {
	if img, err := a.rt.ImageStatus(ctx, ref); err == nil {
		a.present.add(ref, img.Size)
		return nil
	}
	start := a.clock.Now()
	if _, perr := a.rt.PullImage(ctx, ref); perr == nil {
		if img, err := a.rt.ImageStatus(ctx, ref); err == nil {
			a.present.add(ref, img.Size)
		}
		a.log.Info("pre-pulled image", "image", ref, "elapsed", a.clock.Since(start))
		return nil
	} else if a.cfg.Images == nil {
		return perr
	}
	res, err := a.cfg.Images.Fetch(ctx, ref, nil)
	if err != nil {
		return err
	}
	a.present.add(ref, res.Platform.Size())
	a.log.Info("pre-pulled image from the servers", "image", ref, "bytes", res.Platform.Size(), "from_peers", res.FromPeers, "elapsed", a.clock.Since(start))
	return nil
}

func (p *presentImages) has(ref string) bool {
	name, err := images.Normalize(ref)
	if err != nil {
		name = ref
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.size[name]
	return ok
}
