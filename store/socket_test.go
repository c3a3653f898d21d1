package store

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/everynode/everynode/resources"
)

// The embedded etcd serves other clients on a unix socket only — 0600, in a
// 0700 directory of the data dir — and runs no peer listener; a client of
// the same user reaches it through ClientURL.
func TestEmbeddedServesOnPrivateSocketOnly(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testCtx(t), Config{DataDir: dir, Logger: testLogger(), unsafeNoFsync: true, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want, err := SocketURL(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.ClientURL() != want {
		t.Errorf("ClientURL = %s, want %s", s.ClientURL(), want)
	}
	sock := filepath.Join(dir, SocketDir, SocketFile)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %s: %v (err %v), want a socket of mode 0600", sock, fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket dir: %v (err %v), want mode 0700", fi.Mode(), err)
	}
	for _, l := range s.embedded.etcd.Clients {
		if n := l.Addr().Network(); n != "unix" {
			t.Errorf("etcd client listener on %s %s, want unix only", n, l.Addr())
		}
	}
	if n := len(s.embedded.etcd.Peers); n != 0 {
		t.Errorf("%d etcd peer listeners, want none", n)
	}

	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL()}, DialTimeout: dialTimeout, Logger: s.client.GetLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustCreate(t, s, resources.Pods, newPod("default", "p", "", nil))
	resp, err := c.Get(testCtx(t), "/registry/pods/default/p", clientv3.WithCountOnly())
	if err != nil || resp.Count != 1 {
		t.Fatalf("Get through the socket: %v, err %v", resp, err)
	}
}

// A TCP client URL, a relative socket path, a socket in a directory other
// users can enter, and a path too long for a socket are refused before etcd
// starts.
func TestOpenRefusesPublicClientURLs(t *testing.T) {
	open := t.TempDir()
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{
		"http://127.0.0.1:2379",
		"https://127.0.0.1:2379",
		"unix://localhost:2379",
		"unix://etcd.sock",
		socketURL(filepath.Join(open, "etcd.sock")),
		socketURL("/" + strings.Repeat("x", maxSocketPath)),
	} {
		s, err := Open(testCtx(t), Config{DataDir: t.TempDir(), ClientURL: u, Logger: slog.New(slog.DiscardHandler), unsafeNoFsync: true})
		if err == nil {
			s.Close()
			t.Errorf("Open with client URL %s succeeded", u)
			continue
		}
		t.Logf("%s: %v", u, err)
	}
	if fi, err := os.Stat(open); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("a directory outside the data dir was changed: %v %v", fi.Mode(), err)
	}
}

// An existing socket directory with loose permissions (an older version's,
// or an administrator's chmod) is tightened to 0700 at start.
func TestOpenTightensSocketDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, SocketDir), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, SocketDir), 0o777); err != nil {
		t.Fatal(err)
	}
	s, err := Open(testCtx(t), Config{DataDir: dir, Logger: testLogger(), unsafeNoFsync: true, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if fi, err := os.Stat(filepath.Join(dir, SocketDir)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket dir: %v (err %v), want mode 0700", fi.Mode(), err)
	}
}

// A second store on the same data dir fails at once and leaves the first
// one's socket working.
func TestSecondEmbeddedOnSameDataDirFails(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Logger: testLogger(), unsafeNoFsync: true, CompactInterval: -1}
	s, err := Open(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(testCtx(t), dialTimeout)
	defer cancel()
	if s2, err := Open(ctx, cfg); err == nil {
		s2.Close()
		t.Fatal("a second store opened on the same data dir")
	} else if !strings.Contains(err.Error(), "locked") {
		t.Errorf("second Open: %v, want the lock named", err)
	}
	ext, err := Open(testCtx(t), Config{Endpoints: []string{s.ClientURL()}, Logger: testLogger(), CompactInterval: -1})
	if err != nil {
		t.Fatalf("the first store's socket after the second Open: %v", err)
	}
	ext.Close()
}
