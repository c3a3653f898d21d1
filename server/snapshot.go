package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/everynode/everynode/store"
)

const (
	// SnapshotDir, in the data dir, holds etcd snapshots (mode 0700: they
	// hold every object, Secrets included).
	SnapshotDir = "snapshots"
	// snapshotExt ends every snapshot's file name.
	snapshotExt = ".db"
	// scheduledPrefix starts the names of scheduled snapshots; retention
	// removes only those.
	scheduledPrefix = "scheduled-"
)

// SnapshotInfo is one snapshot file.
type SnapshotInfo struct {
	Name string
	Path string
	Size int64
	Time time.Time
}

// EncryptionKeyFile is the file, in a server's data dir, holding the keys
// Secrets are encrypted with in etcd: key material, copied and backed up
// with ca.crt, ca.key and cluster-secret (docs/security.md §6).
const EncryptionKeyFile = store.EncryptionKeyFile

// SaveLocalSnapshot saves a snapshot of the etcd embedded by the server
// running on dataDir (reached on its private socket, so on its machine and
// as its user) as SaveSnapshot does.
func SaveLocalSnapshot(ctx context.Context, dataDir, name string) (string, error) {
	sock, err := store.SocketURL(dataDir)
	if err != nil {
		return "", err
	}
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{sock}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", fmt.Errorf("cannot reach the embedded etcd at %s: %w", sock, err)
	}
	defer ec.Close()
	return SaveSnapshot(ctx, ec, dataDir, name)
}

// SaveSnapshot streams a snapshot of the etcd c is connected to into
// dataDir/SnapshotDir/<name>.db (etcd appends its SHA-256, which restore
// checks) and returns its path. A partial file is never left under the
// final name.
func SaveSnapshot(ctx context.Context, c *clientv3.Client, dataDir, name string) (string, error) {
	if name == "" || strings.ContainsAny(name, `/\`) {
		return "", fmt.Errorf("snapshot name %q must be a plain file name", name)
	}
	dir := filepath.Join(dataDir, SnapshotDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	path := filepath.Join(dir, strings.TrimSuffix(name, snapshotExt)+snapshotExt)
	rc, err := c.Snapshot(ctx)
	if err != nil {
		return "", fmt.Errorf("etcd snapshot: %w", err)
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(dir, ".partial-*")
	if err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, rc); err != nil {
		tmp.Close()
		return "", fmt.Errorf("etcd snapshot: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("snapshot: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	return path, nil
}

// ListSnapshots lists dataDir's snapshots, oldest first.
func ListSnapshots(dataDir string) ([]SnapshotInfo, error) {
	dir := filepath.Join(dataDir, SnapshotDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []SnapshotInfo
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), snapshotExt) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, SnapshotInfo{Name: strings.TrimSuffix(e.Name(), snapshotExt), Path: filepath.Join(dir, e.Name()), Size: fi.Size(), Time: fi.ModTime()})
	}
	slices.SortFunc(out, func(a, b SnapshotInfo) int { return a.Time.Compare(b.Time) })
	return out, nil
}

// RestoreOptions say which member a restored data dir is.
type RestoreOptions struct {
	// Name and PeerURL, when PeerURL is set, restore the first member of a
	// cluster (its etcd member name and https peer URL; docs/ha.md): other
	// servers then --join it. Without them a single server is restored.
	Name, PeerURL string
}

// RestoreSnapshot restores the snapshot file into dataDir, which must hold
// no etcd data yet: after it a server started on dataDir serves every
// object of the snapshot with its resourceVersion. A damaged snapshot
// (its SHA-256 does not match) is refused and nothing is written.
func RestoreSnapshot(file, dataDir string, opts RestoreOptions) error {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	etcdDir := filepath.Join(abs, "etcd")
	if _, err := os.Stat(etcdDir); err == nil {
		return fmt.Errorf("%s already holds etcd data; restore onto a fresh data dir", abs)
	}
	if _, err := os.Stat(file); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return fmt.Errorf("create the data dir: %w", err)
	}
	name, peer := "everynode", "unix://"+filepath.Join(abs, store.SocketDir, "etcd-peer.sock")
	if opts.PeerURL != "" {
		name, peer = opts.Name, opts.PeerURL
	}
	tmp := filepath.Join(abs, ".etcd-restore")
	os.RemoveAll(tmp)
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath: file, Name: name, OutputDataDir: tmp, PeerURLs: []string{peer},
		InitialCluster: name + "=" + peer, InitialClusterToken: "everynode",
	})
	if err != nil {
		os.RemoveAll(tmp)
		if strings.Contains(err.Error(), "sha256") || strings.Contains(err.Error(), "hash") || strings.Contains(err.Error(), "invalid") {
			return fmt.Errorf("snapshot %s is damaged (its integrity check failed); nothing was restored", file)
		}
		return fmt.Errorf("snapshot %s cannot be restored (%v); nothing was restored", file, err)
	}
	if opts.PeerURL != "" {
		if err := writeMember(abs, &member{Name: name, PeerURL: peer}); err != nil {
			os.RemoveAll(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, etcdDir); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}

// snapshotLoop saves a scheduled snapshot every interval and keeps the
// newest retain scheduled ones.
func (s *Server) snapshotLoop(ctx context.Context, interval time.Duration, retain int) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		name := scheduledPrefix + s.serverName() + "-" + time.Now().UTC().Format("20060102T150405Z")
		path, err := SaveSnapshot(ctx, s.st.Client(), s.dataDir, name)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("scheduled etcd snapshot failed; will retry at the next interval", "err", err)
			}
			continue
		}
		s.log.Info("etcd snapshot saved", "path", path)
		if err := pruneSnapshots(s.dataDir, retain); err != nil {
			s.log.Warn("cannot prune old snapshots", "err", err)
		}
	}
}

// pruneSnapshots removes all but the newest retain scheduled snapshots.
func pruneSnapshots(dataDir string, retain int) error {
	all, err := ListSnapshots(dataDir)
	if err != nil {
		return err
	}
	var sched []SnapshotInfo
	for _, si := range all {
		if strings.HasPrefix(si.Name, scheduledPrefix) {
			sched = append(sched, si)
		}
	}
	for len(sched) > retain {
		if err := os.Remove(sched[0].Path); err != nil {
			return err
		}
		sched = sched[1:]
	}
	return nil
}
