package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// HostPath types, as Kubernetes' corev1.HostPathType values.
const (
	HostPathDirectoryOrCreate HostPathType = "DirectoryOrCreate"
	HostPathDirectory         HostPathType = "Directory"
	HostPathFileOrCreate      HostPathType = "FileOrCreate"
	HostPathFile              HostPathType = "File"
	HostPathSocket            HostPathType = "Socket"
	HostPathCharDev           HostPathType = "CharDevice"
	HostPathBlockDev          HostPathType = "BlockDevice"
)

// CheckHostPath checks path on this machine against typ as kubelet's
// hostPath volume plugin does, with its messages: DirectoryOrCreate makes the
// directory (0755, with parents) and FileOrCreate an empty file (0644, the
// parent must exist) when nothing is there; every other type, and the
// "OrCreate" types when something is there, must match what path is. An
// empty typ checks nothing.
func CheckHostPath(path string, typ HostPathType) error {
	if typ == "" {
		return nil
	}
	_, statErr := os.Stat(path)
	exists := statErr == nil
	switch typ {
	case HostPathDirectoryOrCreate:
		if !exists {
			if err := os.MkdirAll(path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			return nil
		}
		return typeMatched(path, "Directory", "directory")
	case HostPathDirectory:
		return typeMatched(path, "Directory", "directory")
	case HostPathFileOrCreate:
		if !exists {
			f, err := os.OpenFile(path, os.O_CREATE, 0o644)
			if f != nil {
				f.Close()
			}
			if err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			return nil
		}
		return typeMatched(path, "File", "file")
	case HostPathFile:
		return typeMatched(path, "File", "file")
	case HostPathSocket:
		return typeMatched(path, "Socket", "socket file")
	case HostPathCharDev:
		return typeMatched(path, "CharDevice", "character device")
	case HostPathBlockDev:
		return typeMatched(path, "BlockDevice", "block device")
	}
	return fmt.Errorf("%s is an invalid volume type", typ)
}

// typeMatched is kubelet's typeMatchedOrError.
func typeMatched(path, want, expected string) error {
	got, err := fileType(path)
	if err != nil {
		return fmt.Errorf("hostPath type check failed, %s is not a %s, unable to determine its type: %w", path, expected, err)
	}
	if got != want {
		return fmt.Errorf("hostPath type check failed: %s is not a %s, it's a %s", path, expected, got)
	}
	return nil
}

// fileType is kubelet's hostutil getFileType: the type of what path
// resolves to, in hostPath type names.
func fileType(path string) (string, error) {
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("path %q does not exist", path)
	}
	if err != nil {
		return "", err
	}
	m := info.Mode()
	switch {
	case m.IsDir():
		return "Directory", nil
	case m.IsRegular():
		return "File", nil
	case m&os.ModeSocket != 0:
		return "Socket", nil
	case m&os.ModeDevice != 0 && m&os.ModeCharDevice != 0:
		return "CharDevice", nil
	case m&os.ModeDevice != 0:
		return "BlockDevice", nil
	}
	return "", errors.New("only recognise file, directory, socket, block device and character device")
}
