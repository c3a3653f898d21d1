package images

import (
	"fmt"
	"strings"
	"time"

	"github.com/distribution/reference"
)

// Paths under which Handler serves the store.
const (
	// ImagesPath lists (GET), loads (POST, a tarball body) and removes
	// (DELETE ?name=REF) images; GET ?name=REF returns one.
	ImagesPath = "/everynode/v1/images"
	// BlobsPath is the prefix of a blob's path: BlobsPath + "sha256:<hex>".
	BlobsPath = "/everynode/v1/blobs/"
)

// Image is one stored image name and the platforms it has.
type Image struct {
	// Name is the normalized reference ("docker.io/library/app:1").
	Name string `json:"name"`
	// Platforms are the image's variants, one per OS/architecture.
	Platforms []Platform `json:"platforms"`
	// Loaded is when the name was last loaded.
	Loaded time.Time `json:"loaded"`
	// Holders are Ready nodes that report having the image and serve its
	// blobs to their peers; only in the answer to GET ImagesPath?name=.
	Holders []Holder `json:"holders,omitempty"`
	// Servers are, when several servers share the image store, the live
	// servers and how many of the image's blobs each holds on its disk (a
	// server serves the others by fetching them from one that has them);
	// only in answers, never stored.
	Servers []ServerCopy `json:"servers,omitempty"`
}

// ServerCopy is how much of an image one server holds.
type ServerCopy struct {
	Server string `json:"server"`
	Blobs  int    `json:"blobs"` // of the image's blobs, all platforms
	Total  int    `json:"total"`
}

// Blobs are the digests of every platform's config and layers, without repeats.
func (im Image) Blobs() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range im.Platforms {
		for _, d := range append([]Descriptor{p.Config}, p.Layers...) {
			if !seen[d.Digest] {
				seen[d.Digest] = true
				out = append(out, d.Digest)
			}
		}
	}
	return out
}

// withServers returns im with Servers set from holders.
func (im Image) withServers(holders []ServerBlobs) Image {
	if len(holders) == 0 {
		return im
	}
	blobs := im.Blobs()
	im.Servers = nil
	for _, h := range holders {
		n := 0
		for _, d := range blobs {
			if h.Has(d) {
				n++
			}
		}
		im.Servers = append(im.Servers, ServerCopy{Server: h.Name, Blobs: n, Total: len(blobs)})
	}
	return im
}

// Holder is a node that has an image: its name and the base URL of its
// agent's endpoint (https://IP:port), where BlobsPath serves blobs.
type Holder struct {
	Node string `json:"node"`
	URL  string `json:"url"`
}

// Platform is one platform's image: its config and layers.
type Platform struct {
	OS           string       `json:"os"`
	Architecture string       `json:"architecture"`
	Variant      string       `json:"variant,omitempty"`
	Config       Descriptor   `json:"config"`
	Layers       []Descriptor `json:"layers"`
}

// Descriptor names one blob.
type Descriptor struct {
	Digest string `json:"digest"` // "sha256:<hex>"
	Size   int64  `json:"size"`
}

// String is "os/arch[/variant]".
func (p Platform) String() string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// Size is the sum of the platform's blob sizes: what a node downloads.
func (p Platform) Size() int64 {
	n := p.Config.Size
	for _, l := range p.Layers {
		n += l.Size
	}
	return n
}

// Match returns the platform for os/arch (variant when given; arm64's
// variant v8 is its default), or false.
func (im Image) Match(os, arch, variant string) (Platform, bool) {
	for _, p := range im.Platforms {
		if p.OS != os || p.Architecture != arch {
			continue
		}
		if variant == "" || p.Variant == "" || p.Variant == variant {
			return p, true
		}
	}
	return Platform{}, false
}

// PlatformList is "linux/amd64, linux/arm64".
func (im Image) PlatformList() string {
	s := make([]string, len(im.Platforms))
	for i, p := range im.Platforms {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// Normalize returns ref as Docker resolves it ("app:1" is
// "docker.io/library/app:1", no tag is ":latest"), so names given on the
// command line, in a pod and in a tarball compare equal.
func Normalize(ref string) (string, error) {
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", ref, err)
	}
	return reference.TagNameOnly(n).String(), nil
}

// Familiar is the short form Docker prints ("app:1").
func Familiar(name string) string {
	n, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return name
	}
	return reference.FamiliarString(n)
}

// Pre-pull (docs/edge.md §5).
const (
	// PrePullAnnotation "true" on a DaemonSet makes its nodes pull (or
	// fetch) a new revision's images before any of its pods is replaced.
	PrePullAnnotation = "image.everynode.io/prepull"
	// NodePrePullPrefix + "<namespace>.<name>" on a Node lists, comma
	// separated, the images the DaemonSet controller asks the node's agent
	// to pull; the agent reports them in status.images once present.
	NodePrePullPrefix = "prepull.image.everynode.io/"
)
