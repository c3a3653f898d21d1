package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/images"
	"github.com/everynode/everynode/resources"
)

// ImageLoadCommand is "everynode image load FILE|-": it streams a docker
// save tarball to the servers' image store (docs/edge.md §4).
type ImageLoadCommand struct {
	main *Main
	clientFlags
	file string
}

func (c *ImageLoadCommand) flags(*pflag.FlagSet) {}

func (c *ImageLoadCommand) complete(pos []string) error {
	if len(pos) != 1 {
		return usageError("image load takes one FILE (or - for stdin)", "everynode image load app.tar, or docker save app:1 | everynode image load -")
	}
	c.file = pos[0]
	return nil
}

// Run uploads the tarball and prints each image stored.
func (c *ImageLoadCommand) Run(ctx context.Context, std IO) error {
	var in io.Reader = std.In
	if c.file != "-" {
		f, err := os.Open(c.file)
		if err != nil {
			return withFix(fmt.Errorf("cannot read the image tarball: %w", err), "make one with docker save IMAGE -o FILE")
		}
		defer f.Close()
		in = f
	}
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	resp, err := h.Stream(ctx, http.MethodPost, images.ImagesPath, nil, http.Header{"Content-Type": {"application/x-tar"}}, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var l images.List
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return fmt.Errorf("image load: reading the server's answer: %w", err)
	}
	for _, im := range l.Items {
		fmt.Fprintf(std.Out, "Loaded image: %s (%s)\n", images.Familiar(im.Name), im.PlatformList())
	}
	return nil
}

// ImageListCommand is "everynode image ls [--nodes]".
type ImageListCommand struct {
	main *Main
	clientFlags
	nodes bool
}

func (c *ImageListCommand) flags(fs *pflag.FlagSet) {
	fs.BoolVar(&c.nodes, "nodes", false, "show which nodes have each image (from the nodes' status.images)")
}

func (c *ImageListCommand) complete(pos []string) error {
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "image ls takes only flags")
	}
	return nil
}

// Run prints the stored images: name, platforms, size, load time and,
// with --nodes, the nodes that report having each.
func (c *ImageListCommand) Run(ctx context.Context, std IO) error {
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	data, err := h.RawGet(ctx, images.ImagesPath)
	if err != nil {
		return err
	}
	var l images.List
	if err := json.Unmarshal(data, &l); err != nil {
		return fmt.Errorf("image ls: reading the server's answer: %w", err)
	}
	if len(l.Items) == 0 {
		fmt.Fprintln(std.Err, "No images loaded.")
		return nil
	}
	have := map[string][]string{} // normalized name → nodes
	if c.nodes {
		objs, _, err := h.List(ctx, resources.Nodes, "", client.ListOptions{})
		if err != nil {
			return err
		}
		for _, o := range objs {
			n := o.(*corev1.Node)
			for _, ci := range n.Status.Images {
				for _, name := range ci.Names {
					if norm, err := images.Normalize(name); err == nil {
						have[norm] = append(have[norm], n.Name)
						break
					}
				}
			}
		}
	}
	tw := tabwriter.NewWriter(std.Out, 0, 8, 3, ' ', 0)
	hdr := "IMAGE\tPLATFORMS\tSIZE\tLOADED"
	servers := false // several servers: where the blobs are
	for _, im := range l.Items {
		servers = servers || len(im.Servers) > 0
	}
	if servers {
		hdr += "\tBLOBS ON SERVERS"
	}
	if c.nodes {
		hdr += "\tNODES"
	}
	fmt.Fprintln(tw, hdr)
	for _, im := range l.Items {
		var size int64
		if len(im.Platforms) > 0 {
			size = im.Platforms[0].Size()
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%s", images.Familiar(im.Name), strings.ReplaceAll(im.PlatformList(), " ", ""),
			humanBytes(size), im.Loaded.Format("2006-01-02T15:04:05Z"))
		if servers {
			row += "\t" + serverCopies(im.Servers)
		}
		if c.nodes {
			ns := have[im.Name]
			row += fmt.Sprintf("\t%d", len(ns))
			if len(ns) > 0 {
				row += " (" + strings.Join(ns, ",") + ")"
			}
		}
		fmt.Fprintln(tw, row)
	}
	return tw.Flush()
}

// serverCopies is "a (all), b (2/5)": which
// servers hold the image's blobs on disk. Any server serves the image;
// one that lacks a blob fetches it from one that has it.
func serverCopies(cs []images.ServerCopy) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		switch {
		case c.Blobs == c.Total:
			parts = append(parts, c.Server+" (all)")
		default:
			parts = append(parts, fmt.Sprintf("%s (%d/%d)", c.Server, c.Blobs, c.Total))
		}
	}
	return strings.Join(parts, ", ")
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

// ImageRemoveCommand is "everynode image rm IMAGE...".
type ImageRemoveCommand struct {
	main *Main
	clientFlags
	refs []string
}

func (c *ImageRemoveCommand) flags(*pflag.FlagSet) {}

func (c *ImageRemoveCommand) complete(pos []string) error {
	if len(pos) == 0 {
		return usageError("image rm needs an IMAGE", "everynode image rm app:1")
	}
	c.refs = pos
	return nil
}

// Run removes each image from the store (nodes keep their copies).
func (c *ImageRemoveCommand) Run(ctx context.Context, std IO) error {
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, ref := range c.refs {
		resp, err := h.Stream(ctx, http.MethodDelete, images.ImagesPath, url.Values{"name": {ref}}, nil, nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		fmt.Fprintf(std.Out, "Removed image: %s\n", ref)
	}
	return nil
}
