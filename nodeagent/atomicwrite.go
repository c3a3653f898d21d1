package nodeagent

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Names of kubelet's AtomicWriter layout: the payload lives in a
// timestamped directory, dataDir is a symlink to it, and each top-level
// entry the container sees is a symlink through dataDir. An update writes a
// new timestamped directory and renames a fresh symlink over dataDir, so a
// reader sees either the old or the new payload, never a mix.
const (
	atomicDataDir    = "..data"
	atomicDataDirTmp = "..data_tmp"
)

// fileProjection is one file of a projected payload.
type fileProjection struct {
	Data []byte
	Mode os.FileMode
}

// writeAtomic makes dir hold payload (relative paths to files) with
// kubelet's AtomicWriter technique (k8s.io/kubernetes/pkg/volume/util, not
// imported for its dependencies on mount and SELinux libraries). It writes
// nothing when dir already holds payload; it reports whether it changed dir.
// dir must exist (writeVolume makes it, with its mode).
func writeAtomic(dir string, payload map[string]fileProjection, now time.Time) (bool, error) {
	for p := range payload {
		if p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "..") || slices.Contains(strings.Split(p, "/"), "..") {
			return false, fmt.Errorf("invalid path %q in volume payload", p)
		}
	}
	dataLink := filepath.Join(dir, atomicDataDir)
	old, err := os.Readlink(dataLink)
	if err != nil && !os.IsNotExist(err) {
		return false, err
	}
	if old != "" && sameContent(filepath.Join(dir, old), payload) {
		return false, nil
	}
	tsDir, err := os.MkdirTemp(dir, now.UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return false, err
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return false, err
	}
	for p, f := range payload {
		full := filepath.Join(tsDir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return false, err
		}
		if err := os.WriteFile(full, f.Data, f.Mode); err != nil {
			return false, err
		}
		// WriteFile's mode is filtered by the umask; the payload's is exact.
		if err := os.Chmod(full, f.Mode); err != nil {
			return false, err
		}
	}
	tmpLink := filepath.Join(dir, atomicDataDirTmp)
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(tsDir), tmpLink); err != nil {
		return false, err
	}
	if err := os.Rename(tmpLink, dataLink); err != nil {
		return false, err
	}
	// The user-visible entries: one symlink per top-level name.
	top := map[string]bool{}
	for p := range payload {
		top[strings.SplitN(p, "/", 2)[0]] = true
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join(atomicDataDir, name) {
			continue
		}
		if err := os.RemoveAll(link); err != nil {
			return false, err
		}
		if err := os.Symlink(filepath.Join(atomicDataDir, name), link); err != nil {
			return false, err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		n := e.Name()
		switch {
		case n == atomicDataDir || n == filepath.Base(tsDir):
		case strings.HasPrefix(n, ".."):
			if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
				return false, err
			}
		case !top[n]:
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// sameContent reports whether dir holds exactly payload with its modes.
func sameContent(dir string, payload map[string]fileProjection) bool {
	n := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		want, ok := payload[rel]
		if !ok {
			return os.ErrNotExist
		}
		info, err := d.Info()
		if err != nil || info.Mode().Perm() != want.Mode.Perm() {
			return os.ErrInvalid
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want.Data) {
			return os.ErrInvalid
		}
		n++
		return nil
	})
	return err == nil && n == len(payload)
}
