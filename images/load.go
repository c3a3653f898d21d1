package images

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// BadTarballError is a tarball Load refuses: truncated, corrupt, or not
// an image archive. Its message names the fix.
type BadTarballError struct{ Reason string }

func (e *BadTarballError) Error() string {
	return "the image tarball " + e.Reason + "; make it again with `docker save IMAGE -o FILE` (or `docker save IMAGE | everynode image load -`)"
}

func bad(format string, args ...any) error {
	return &BadTarballError{Reason: fmt.Sprintf(format, args...)}
}

// Media types of image indexes (OCI, and Docker's manifest list).
const (
	dockerManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"
	containerdNameKey  = "io.containerd.image.name"
)

// Load reads a `docker save` tarball from r and stores every image in it:
// with the OCI layout (index.json, Docker 25 and later) every platform
// whose blobs the tarball holds, otherwise Docker's manifest.json layout.
// Every blob is checked against its digest before anything is stored; a
// refused tarball leaves the store as it was.
func (s *Store) Load(r io.Reader) ([]Image, error) {
	dir, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), "load-")
	if err != nil {
		return nil, fmt.Errorf("images: cannot stage the tarball: %w", err)
	}
	defer os.RemoveAll(dir)
	st := &staging{dir: dir, byPath: map[string]stagedFile{}, byDigest: map[string]string{}}
	links := map[string]string{}
	tr := tar.NewReader(bufio.NewReaderSize(r, 1<<20))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if len(st.byPath) == 0 {
				return nil, bad("is empty or not a tar archive (%v)", err)
			}
			return nil, tarError(err)
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		switch hdr.Typeflag {
		case tar.TypeReg:
			if err := st.stageFile(name, tr); err != nil {
				if _, ok := err.(*os.PathError); ok {
					return nil, fmt.Errorf("images: cannot stage the tarball on the server's disk: %w", err)
				}
				return nil, tarError(err)
			}
		case tar.TypeSymlink, tar.TypeLink:
			target := hdr.Linkname
			if hdr.Typeflag == tar.TypeSymlink {
				target = path.Join(path.Dir(name), target)
			}
			links[name] = path.Clean(target)
		}
	}
	if len(st.byPath) == 0 {
		return nil, bad("is empty or not a tar archive")
	}
	for name, target := range links {
		for range 8 { // chains of links
			if next, ok := links[target]; ok {
				target = next
			}
		}
		if f, ok := st.byPath[target]; ok {
			st.byPath[name] = f
		}
	}
	var ims []Image
	if _, ok := st.byPath["index.json"]; ok {
		ims, err = st.ociImages()
	} else if _, ok := st.byPath["manifest.json"]; ok {
		ims, err = st.dockerImages()
	} else {
		return nil, bad("holds neither manifest.json nor index.json, so it is not a docker save archive")
	}
	if err != nil {
		return nil, err
	}
	if len(ims) == 0 {
		return nil, bad("holds no tagged image (tag it with docker tag before docker save)")
	}
	if err := s.commit(st, ims); err != nil {
		return nil, err
	}
	return ims, nil
}

func tarError(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return bad("is truncated (it ends in the middle of a file)")
	}
	return bad("is corrupt (%v)", err)
}

// dockerManifest is one entry of Docker's manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// imageConfig is the part of an image config Load reads.
type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant"`
	RootFS       struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

func (st *staging) dockerImages() ([]Image, error) {
	data, _ := st.read("manifest.json")
	var ms []dockerManifest
	if err := json.Unmarshal(data, &ms); err != nil {
		return nil, bad("has a manifest.json that is not valid JSON (%v)", err)
	}
	byName := map[string]*Image{}
	var order []string
	for _, m := range ms {
		cfgFile, ok := st.byPath[path.Clean(m.Config)]
		if !ok {
			return nil, bad("lacks the image config %s that manifest.json names", m.Config)
		}
		// The config's file name is its digest, in both layouts.
		if want := "sha256:" + strings.TrimSuffix(path.Base(m.Config), ".json"); isDigest(want) && want != cfgFile.digest {
			return nil, bad("is corrupt: the image config %s does not match its digest", m.Config)
		}
		cfgData, _ := st.read(path.Clean(m.Config))
		var cfg imageConfig
		if err := json.Unmarshal(cfgData, &cfg); err != nil {
			return nil, bad("is corrupt: the image config %s is not valid JSON", m.Config)
		}
		if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
			return nil, bad("is corrupt: %s names %d layers, its config %d", "manifest.json", len(m.Layers), len(cfg.RootFS.DiffIDs))
		}
		p := Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant,
			Config: Descriptor{Digest: cfgFile.digest, Size: cfgFile.size}}
		for i, l := range m.Layers {
			f, ok := st.byPath[path.Clean(l)]
			if !ok {
				return nil, bad("lacks the layer %s that manifest.json names", l)
			}
			if err := st.checkLayer(l, f, cfg.RootFS.DiffIDs[i]); err != nil {
				return nil, err
			}
			p.Layers = append(p.Layers, Descriptor{Digest: f.digest, Size: f.size})
		}
		for _, tag := range m.RepoTags {
			name, err := Normalize(tag)
			if err != nil {
				return nil, bad("names an invalid image %q", tag)
			}
			im := byName[name]
			if im == nil {
				im = &Image{Name: name}
				byName[name] = im
				order = append(order, name)
			}
			im.Platforms = addPlatform(im.Platforms, p)
		}
	}
	out := make([]Image, 0, len(order))
	for _, n := range order {
		out = append(out, *byName[n])
	}
	return out, nil
}

// checkLayer verifies an uncompressed layer against the config's diff ID
// (the layer's digest in Docker's layout; in the OCI layout its file name
// is checked as well). Compressed layers are checked by name only.
func (st *staging) checkLayer(name string, f stagedFile, diffID string) error {
	if want := "sha256:" + path.Base(name); strings.HasPrefix(name, "blobs/sha256/") && want != f.digest {
		return bad("is corrupt: the layer %s does not match its digest", name)
	}
	raw, err := os.Open(f.file)
	if err != nil {
		return err
	}
	defer raw.Close()
	var magic [2]byte
	io.ReadFull(raw, magic[:])
	compressed := magic == [2]byte{0x1f, 0x8b} || (magic[0] == 0x28 && magic[1] == 0xb5)
	if !compressed && f.digest != diffID {
		return bad("is corrupt: the layer %s does not match its digest %s", name, diffID)
	}
	return nil
}

func isDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	return ok && len(h) == 64 && strings.Trim(h, "0123456789abcdef") == ""
}

// addPlatform adds p unless a platform of the same OS, architecture and
// variant is there already.
func addPlatform(ps []Platform, p Platform) []Platform {
	for _, q := range ps {
		if q.String() == p.String() {
			return ps
		}
	}
	return append(ps, p)
}

// ociImages reads the OCI layout: index.json's manifests (each an image
// manifest or an index of them), named by their io.containerd.image.name
// annotation or, failing that, by manifest.json's RepoTags.
func (st *staging) ociImages() ([]Image, error) {
	data, _ := st.read("index.json")
	var idx ocispec.Index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, bad("has an index.json that is not valid JSON (%v)", err)
	}
	tags := st.legacyTags()
	byName := map[string]*Image{}
	var order []string
	for _, d := range idx.Manifests {
		ps, err := st.ociPlatforms(d, 0)
		if err != nil {
			return nil, err
		}
		var names []string
		if n := d.Annotations[containerdNameKey]; n != "" {
			names = []string{n}
		} else {
			for _, p := range ps {
				names = append(names, tags[p.Config.Digest]...)
			}
		}
		for _, n := range names {
			name, err := Normalize(n)
			if err != nil {
				return nil, bad("names an invalid image %q", n)
			}
			im := byName[name]
			if im == nil {
				im = &Image{Name: name}
				byName[name] = im
				order = append(order, name)
			}
			for _, p := range ps {
				im.Platforms = addPlatform(im.Platforms, p)
			}
		}
	}
	out := make([]Image, 0, len(order))
	for _, n := range order {
		if len(byName[n].Platforms) == 0 {
			return nil, bad("holds none of the platform images of %s (only its index)", Familiar(n))
		}
		out = append(out, *byName[n])
	}
	return out, nil
}

// legacyTags maps config digests to the RepoTags of manifest.json, when the
// tarball has one.
func (st *staging) legacyTags() map[string][]string {
	out := map[string][]string{}
	data, err := st.read("manifest.json")
	if err != nil {
		return out
	}
	var ms []dockerManifest
	if json.Unmarshal(data, &ms) != nil {
		return out
	}
	for _, m := range ms {
		if f, ok := st.byPath[path.Clean(m.Config)]; ok {
			out[f.digest] = append(out[f.digest], m.RepoTags...)
		}
	}
	return out
}

// blob returns the staged blob d, checked against its digest and size.
func (st *staging) blob(d ocispec.Descriptor) (stagedFile, bool, error) {
	p := "blobs/" + strings.Replace(d.Digest.String(), ":", "/", 1)
	f, ok := st.byPath[p]
	if !ok {
		return stagedFile{}, false, nil
	}
	if f.digest != d.Digest.String() || (d.Size > 0 && f.size != d.Size) {
		return stagedFile{}, false, bad("is corrupt: the blob %s does not match its digest", d.Digest)
	}
	return f, true, nil
}

// ociPlatforms returns the platform images under descriptor d whose
// blobs the tarball holds (a multi-platform image saved from one machine
// often carries only some).
func (st *staging) ociPlatforms(d ocispec.Descriptor, depth int) ([]Platform, error) {
	if depth > 4 {
		return nil, bad("nests image indexes too deep")
	}
	f, ok, err := st.blob(d)
	if err != nil || !ok {
		return nil, err
	}
	data, _ := os.ReadFile(f.file)
	switch d.MediaType {
	case ocispec.MediaTypeImageIndex, dockerManifestList:
		var idx ocispec.Index
		if err := json.Unmarshal(data, &idx); err != nil {
			return nil, bad("is corrupt: the index %s is not valid JSON", d.Digest)
		}
		var out []Platform
		for _, m := range idx.Manifests {
			ps, err := st.ociPlatforms(m, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, ps...)
		}
		return out, nil
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, bad("is corrupt: the manifest %s is not valid JSON", d.Digest)
	}
	if m.Config.Digest == "" {
		return nil, nil // not an image manifest (an attestation, say)
	}
	cf, ok, err := st.blob(m.Config)
	if err != nil || !ok {
		return nil, err
	}
	cfgData, _ := os.ReadFile(cf.file)
	var cfg imageConfig
	if err := json.Unmarshal(cfgData, &cfg); err != nil || cfg.Architecture == "" {
		return nil, nil // not an image config
	}
	p := Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant,
		Config: Descriptor{Digest: cf.digest, Size: cf.size}}
	for _, l := range m.Layers {
		lf, ok, err := st.blob(l)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, nil
		}
		p.Layers = append(p.Layers, Descriptor{Digest: lf.digest, Size: lf.size})
	}
	return []Platform{p}, nil
}
