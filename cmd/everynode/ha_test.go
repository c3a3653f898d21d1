package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/cmd/everynode/internal/cli"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/server"
)

// peerPort is a free TCP port on ip.
func peerPort(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("loopback address %s not usable here: %v", ip, err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// haServerArgs are a clustered server's flags on its own loopback address.
func haServerArgs(t *testing.T, name, ip string, extra ...string) []string {
	return append([]string{"--name", name, "--listen", ip + ":0", "--no-agent", "--gossip", ip + ":0", "--gossip-profile", "local",
		"--log-level", "warn", "--advertise-address", ip, "--etcd-peer-port", peerPort(t, ip)}, extra...)
}

// TestServerClusterCLI forms a three-server cluster with the command line
// alone (--cluster-init, then --join with --token-file naming the first
// server's join-token file, each server on its own loopback address):
// every server answers "everynode get" with what another wrote, a join
// with another cluster's token fails with one line, and "everynode server
// remove" removes a stopped server and names an unknown one in one line.
func TestServerClusterCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three embedded etcds")
	}
	dir1, dir2, dir3 := t.TempDir(), t.TempDir(), t.TempDir()
	s1 := startServerArgs(t, dir1, haServerArgs(t, "s1", "127.0.0.1", "--cluster-init")...)
	tokenFile := filepath.Join(dir1, pki.JoinTokenFile)
	s2 := startServerArgs(t, dir2, haServerArgs(t, "s2", "127.0.0.2", "--join", s1.url(t), "--token-file", tokenFile)...)
	s3 := startServerArgs(t, dir3, haServerArgs(t, "s3", "127.0.0.3", "--join", s2.url(t), "--token-file", tokenFile)...)

	ns := filepath.Join(t.TempDir(), "ns.yaml")
	if err := os.WriteFile(ns, []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ha-cli\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s3.mustRun(t, "apply", "-f", ns)
	for _, s := range []*runningServer{s1, s2} {
		if out := s.mustRun(t, "get", "namespace", "ha-cli", "-o", "name"); strings.TrimSpace(out) != "namespace/ha-cli" {
			t.Fatalf("get through another server: %q", out)
		}
	}

	// Another cluster's token: refused before anything is sent.
	otherDir := t.TempDir()
	if _, err := pki.Load(otherDir); err != nil {
		t.Fatal(err)
	}
	m := &cli.Main{Getenv: func(string) string { return "" }}
	var out, errOut strings.Builder
	err := m.Run(context.Background(), append([]string{"server", "--data-dir", t.TempDir()},
		haServerArgs(t, "bad", "127.0.0.4", "--join", s1.url(t), "--token-file", filepath.Join(otherDir, pki.JoinTokenFile))...), nil, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "not the cluster of this join token") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("join with another cluster's token: %v", err)
	}
	t.Logf("refusal: %s", cli.FormatError(err))

	s3.stop(t)
	if out := s1.mustRun(t, "server", "remove", "s3"); !strings.Contains(out, "server s3 removed") {
		t.Fatalf("server remove: %q", out)
	}
	_, err = s1.run(t, "server", "remove", "nope")
	if err == nil || !strings.Contains(cli.FormatError(err), "nope") {
		t.Fatalf("removing an unknown server: %v", err)
	}
	t.Logf("refusal: %s", cli.FormatError(err))
}

// TestAgentFailover: an agent joined to the second of three servers keeps
// working when that server stops — with no restart of the agent and no
// change to its running pod: a pod created afterwards through another
// server starts on it, and its Node stays Ready. The time from the stop to
// the new pod Running is logged (docs/ha.md reports it).
func TestAgentFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three embedded etcds")
	}
	ctx := context.Background()
	dir1, dir2, dir3 := t.TempDir(), t.TempDir(), t.TempDir()
	s1 := startServerArgs(t, dir1, haServerArgs(t, "f1", "127.0.0.1", "--cluster-init")...)
	tokenFile := filepath.Join(dir1, pki.JoinTokenFile)
	s2 := startServerArgs(t, dir2, haServerArgs(t, "f2", "127.0.0.2", "--join", s1.url(t), "--token-file", tokenFile)...)
	startServerArgs(t, dir3, haServerArgs(t, "f3", "127.0.0.3", "--join", s1.url(t), "--token-file", tokenFile)...)

	admin := s1.client(t, "")
	agentDir := t.TempDir()
	a := startAgent(t, s2, "w-fo", agentDir)
	waitNodeReady(t, admin, "w-fo", corev1.ConditionTrue, joinWait)
	created, err := admin.Create(ctx, barePod("fo-before", "w-fo"), client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPodRunning(t, admin, "fo-before", created.GetUID())
	before, err := admin.Get(ctx, resources.Pods, "default", "fo-before")
	if err != nil {
		t.Fatal(err)
	}
	// The agent learns the other servers' API URLs from gossip.
	testkit.Eventually(t, joinWait, func() error {
		if n := len(gossipServers(t, agentDir)); n != 3 {
			return fmt.Errorf("%d servers in gossip, want 3", n)
		}
		return nil
	})

	s2.stop(t)
	stopped := time.Now()
	created2, err := admin.Create(ctx, barePod("fo-after", "w-fo"), client.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPodRunning(t, admin, "fo-after", created2.GetUID())
	t.Logf("a pod created after the agent's server stopped was Running %s after the stop", time.Since(stopped).Round(10*time.Millisecond))
	waitNodeReady(t, admin, "w-fo", corev1.ConditionTrue, joinWait)
	select {
	case err := <-a.done:
		t.Fatalf("the agent stopped: %v", err)
	default:
	}
	after, err := admin.Get(ctx, resources.Pods, "default", "fo-before")
	if err != nil {
		t.Fatal(err)
	}
	b, p := before.(*corev1.Pod), after.(*corev1.Pod)
	if p.UID != b.UID || p.Status.Phase != corev1.PodRunning || restarts(p) != restarts(b) {
		t.Fatalf("the pod changed across the failover: uid %s→%s, phase %s, restarts %d→%d", b.UID, p.UID, p.Status.Phase, restarts(b), restarts(p))
	}
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// gossipServers are the API URLs the servers announce in gossip, read by
// a probe member joined with the agent's saved key and seeds.
func gossipServers(t *testing.T, agentDir string) []string {
	t.Helper()
	_, key, seeds := savedCredentials(t, agentDir)
	m := newMember(t, "probe-"+strconv.Itoa(int(time.Now().UnixNano()%1e6)), key)
	if _, err := m.Join(seeds); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	return gossip.ServerAPIs(m.Members())
}

// runCLI runs one everynode command line and returns its stdout.
func runCLI(args ...string) (string, error) {
	var out, errOut strings.Builder
	m := &cli.Main{Getenv: func(string) string { return "" }}
	err := m.Run(context.Background(), args, nil, &out, &errOut)
	return out.String(), err
}

// TestSnapshotCLI: "etcd snapshot save" on a running server, "ls" lists
// it, a damaged copy is refused by "restore" with one line, and the
// snapshot restored onto a fresh data dir (with the old key material)
// serves what was written before.
func TestSnapshotCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	dir := t.TempDir()
	srv := startServer(t, dir)
	ns := filepath.Join(t.TempDir(), "ns.yaml")
	if err := os.WriteFile(ns, []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: snap-cli\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv.mustRun(t, "apply", "-f", ns)
	out, err := runCLI("etcd", "snapshot", "save", "--data-dir", dir, "before-upgrade")
	if err != nil {
		t.Fatal(cli.FormatError(err))
	}
	path := strings.TrimSpace(out)
	if out, err := runCLI("etcd", "snapshot", "ls", "--data-dir", dir); err != nil || !strings.Contains(out, "before-upgrade") {
		t.Fatalf("ls: %q %v", out, err)
	}
	srv.stop(t)

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	bad := filepath.Join(t.TempDir(), "bad.db")
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = runCLI("etcd", "snapshot", "restore", "--data-dir", t.TempDir(), bad)
	if err == nil || !strings.Contains(err.Error(), "damaged") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("restoring a damaged snapshot: %v", err)
	}
	t.Logf("refusal: %s", cli.FormatError(err))

	dir2 := t.TempDir()
	if _, err := runCLI("etcd", "snapshot", "restore", "--data-dir", dir2, path); err != nil {
		t.Fatal(cli.FormatError(err))
	}
	for _, f := range []string{pki.CACertFile, pki.CAKeyFile, pki.SecretFile, server.EncryptionKeyFile} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir2, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	srv2 := startServer(t, dir2)
	if out := srv2.mustRun(t, "get", "namespace", "snap-cli", "-o", "name"); strings.TrimSpace(out) != "namespace/snap-cli" {
		t.Fatalf("after restore: %q", out)
	}
}
