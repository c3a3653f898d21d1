package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/everynode/everynode/server"
)

// SnapshotSaveCommand is "everynode etcd snapshot save [NAME]": on the
// server's machine, as its user, through the embedded etcd's private socket.
type SnapshotSaveCommand struct {
	dataDir string
	name    string
}

func (c *SnapshotSaveCommand) flags(fs *pflag.FlagSet) {
	fs.StringVar(&c.dataDir, "data-dir", DefaultDataDir, "the running server's data dir (the snapshot goes to DATA_DIR/snapshots)")
}

func (c *SnapshotSaveCommand) complete(pos []string) error {
	switch len(pos) {
	case 0:
		c.name = "on-demand-" + time.Now().UTC().Format("20060102T150405Z")
	case 1:
		c.name = pos[0]
	default:
		return usageError(fmt.Sprintf("unexpected arguments %q", pos[1:]), "give at most one snapshot NAME")
	}
	return nil
}

// Run saves the snapshot.
func (c *SnapshotSaveCommand) Run(ctx context.Context, std IO) error {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	path, err := server.SaveLocalSnapshot(cctx, c.dataDir, c.name)
	if err != nil {
		return withFix(err, "run this on the server's machine as its user, and check that the server runs with --data-dir "+c.dataDir)
	}
	fmt.Fprintln(std.Out, path)
	return nil
}

// SnapshotListCommand is "everynode etcd snapshot ls".
type SnapshotListCommand struct{ dataDir string }

func (c *SnapshotListCommand) flags(fs *pflag.FlagSet) {
	fs.StringVar(&c.dataDir, "data-dir", DefaultDataDir, "the server's data dir")
}

func (c *SnapshotListCommand) complete(pos []string) error {
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "etcd snapshot ls takes no arguments")
	}
	return nil
}

// Run lists the snapshots, oldest first.
func (c *SnapshotListCommand) Run(_ context.Context, std IO) error {
	all, err := server.ListSnapshots(c.dataDir)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(std.Out, 0, 8, 3, ' ', 0)
	fmt.Fprintln(w, "NAME\tSIZE\tCREATED\tPATH")
	for _, s := range all {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", s.Name, s.Size, s.Time.UTC().Format(time.RFC3339), s.Path)
	}
	return w.Flush()
}

// SnapshotRestoreCommand is "everynode etcd snapshot restore FILE".
type SnapshotRestoreCommand struct {
	dataDir     string
	clusterInit bool
	name        string
	advertise   string
	peerPort    int
	file        string
}

func (c *SnapshotRestoreCommand) flags(fs *pflag.FlagSet) {
	fs.StringVar(&c.dataDir, "data-dir", DefaultDataDir, "a fresh data dir to restore into (with the old one's ca.crt, ca.key and cluster-secret)")
	fs.BoolVar(&c.clusterInit, "cluster-init", false, "restore the first server of a cluster, which others then --join")
	fs.StringVar(&c.name, "name", "", "with --cluster-init: the server's name (default: the host name)")
	fs.StringVar(&c.advertise, "advertise-address", "", "with --cluster-init: the server's IP for its peers")
	fs.IntVar(&c.peerPort, "etcd-peer-port", server.DefaultPeerPort, "with --cluster-init: the etcd peer port")
}

func (c *SnapshotRestoreCommand) complete(pos []string) error {
	if len(pos) != 1 {
		return usageError("etcd snapshot restore needs one FILE", "give the snapshot's path, as \"everynode etcd snapshot ls\" shows it")
	}
	c.file = pos[0]
	if c.clusterInit && net.ParseIP(c.advertise) == nil {
		return usageError("--cluster-init needs --advertise-address IP", "give the IP the other servers reach this one on")
	}
	return nil
}

// Run restores the snapshot into the fresh data dir.
func (c *SnapshotRestoreCommand) Run(_ context.Context, std IO) error {
	var opts server.RestoreOptions
	if c.clusterInit {
		name := c.name
		if name == "" {
			name = hostName()
		}
		opts.Name, opts.PeerURL = name, "https://"+net.JoinHostPort(c.advertise, strconv.Itoa(c.peerPort))
	}
	if err := server.RestoreSnapshot(c.file, c.dataDir, opts); err != nil {
		return err
	}
	fmt.Fprintf(std.Out, "restored %s into %s; start the server with --data-dir %s\n", c.file, c.dataDir, c.dataDir)
	return nil
}

// hostName is the lower-cased host name, or "server".
func hostName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "server"
	}
	return strings.ToLower(h)
}
