package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

const (
	// SocketDir is the directory, in Config.DataDir, that holds the embedded
	// etcd's client socket. It is mode 0700: connecting to a unix socket
	// needs search permission on its directory, so no other local user can
	// reach etcd, whatever the socket's own mode (docs/security.md, "Local
	// users"). The name is short because a socket's path is limited to about
	// 100 bytes.
	SocketDir = "run"
	// SocketFile is the embedded etcd's client socket in SocketDir, mode
	// 0600.
	SocketFile = "etcd.sock"
	// lockFile, in the socket's directory, is held (flock) while the
	// embedded etcd runs, so a second server on the same data dir fails at
	// once instead of unlinking the first one's socket (etcd removes a
	// stale socket file before binding).
	lockFile = "etcd.lock"
)

// maxSocketPath is the longest path a unix socket can be bound to:
// sockaddr_un's sun_path less its terminating NUL.
var maxSocketPath = len(syscall.RawSockaddrUnix{}.Path) - 1

// SocketURL is the client URL of the embedded etcd of a store opened on
// dataDir with no Config.ClientURL: unix:// and the absolute socket path,
// as etcd's client (clientv3) takes it in its endpoints.
func SocketURL(dataDir string) (string, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", fmt.Errorf("store: data dir %s: %w", dataDir, err)
	}
	return socketURL(filepath.Join(abs, SocketDir, SocketFile)), nil
}

// socketURL is the client URL of the socket at the absolute path: written
// out, not URL-escaped, as clientv3 reads it.
func socketURL(path string) string { return "unix://" + path }

// socketPath is the embedded etcd's client socket: clientURL's path, or
// dataDir/SocketDir/SocketFile when clientURL is empty. Only unix:// URLs
// with an absolute path are accepted: etcd's client port has no
// authentication, so it never listens on TCP.
func socketPath(dataDir, clientURL string) (string, error) {
	var path string
	if clientURL == "" {
		abs, err := filepath.Abs(dataDir)
		if err != nil {
			return "", fmt.Errorf("store: data dir %s: %w", dataDir, err)
		}
		path = filepath.Join(abs, SocketDir, SocketFile)
	} else {
		p, ok := strings.CutPrefix(clientURL, "unix://")
		if !ok || !filepath.IsAbs(p) {
			return "", fmt.Errorf("store: client URL %q: the embedded etcd serves only on a unix socket, unix:///absolute/path "+
				"(its client port has no authentication, so it never listens on TCP)", clientURL)
		}
		path = filepath.Clean(p)
	}
	if len(path) > maxSocketPath {
		return "", fmt.Errorf("store: etcd socket path %s is %d bytes, longer than a unix socket allows (%d): use a shorter data dir path",
			path, len(path), maxSocketPath)
	}
	return path, nil
}

// privateDir makes sure dir is a directory that only this process's user
// can enter: it creates it with mode 0700, or checks an existing one. An
// existing directory in the data dir (own) is tightened to 0700; one
// elsewhere (named by Config.ClientURL) must already be 0700, since a
// shared directory such as /tmp must never be changed.
func privateDir(dir string, own bool) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("store: create the etcd socket directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("store: etcd socket directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("store: etcd socket directory %s is not a directory (%s)", dir, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("store: etcd socket directory %s belongs to uid %d, not to this server's user (uid %d)", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm() == 0o700 {
		return nil
	}
	if !own {
		return fmt.Errorf("store: etcd socket directory %s has mode %04o: other users could reach the socket; use a directory of mode 0700",
			dir, fi.Mode().Perm())
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("store: etcd socket directory: %w", err)
	}
	return nil
}

// lockSocket takes an exclusive flock on lockFile beside sock, held until
// the returned file is closed (or the process ends).
func lockSocket(sock string) (*os.File, error) {
	path := filepath.Join(filepath.Dir(sock), lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("store: another server's embedded etcd serves on %s (%s is locked)", sock, path)
		}
		return nil, fmt.Errorf("store: lock %s: %w", path, err)
	}
	return f, nil
}
