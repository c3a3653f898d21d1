package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// TestDataDirsArePrivate audits the data dirs of a running server (with
// its local agent) and of a joined agent, each holding a pod: every
// directory is 0700, every file 0600 — sockets, keys, tokens, kubeconfig,
// etcd's files, credentials, pods' state — except the *.crt certificates,
// 0644, and a pod's volume directories, which are bind-mounted into
// containers that may run as another user: they keep the volume's modes
// (an emptyDir 0777; a written volume's directories 0755, files 0644 by
// default, the atomic writer's symlinks)
// behind the pod's private directories. Data dirs created by a user's mkdir
// (0755) are tightened at start.
func TestDataDirsArePrivate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	ctx := context.Background()
	cfg := localConfig(t)
	if err := os.Chmod(cfg.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	agentDir := filepath.Join(t.TempDir(), "agent")
	if err := os.Mkdir(agentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := agent.Start(ctx, agent.Config{
		Server: s.URL(), Token: s.JoinToken(), DataDir: agentDir, Logger: testLogger(t),
		Node:   agent.NodeOptions{Name: "a1", IP: "127.0.0.1", Runtime: agent.RuntimeFake, LogListen: "127.0.0.1:0"},
		Gossip: agent.GossipOptions{Addr: "127.0.0.1:0", Profile: gossip.ProfileLocal, LeaveOnStop: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// A pod on each node, so each agent writes its pods' state and the pod's
	// service account token volume. The audit waits for the server's local
	// agent's volume, which needs no token request over the network (the
	// joined agent's may come later; it is audited if it is there).
	var want []string
	for node, dir := range map[string]string{"local": filepath.Join(cfg.DataDir, "agent"), "a1": agentDir} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + node, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox",
				VolumeMounts: []corev1.VolumeMount{{Name: emptyDirName, MountPath: "/scratch"}}}},
				Volumes: []corev1.Volume{{Name: emptyDirName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}}
		created, err := s.Admin().Create(ctx, pod, client.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, filepath.Join(dir, "pods", "assigned.json"))
		if node == "local" {
			want = append(want, filepath.Join(dir, "pods", string(created.GetUID()), "volumes", "*", "..data"),
				filepath.Join(dir, "pods", string(created.GetUID()), "volumes", emptyDirName))
		}
	}
	for _, pattern := range want {
		testkit.EventuallyTrue(t, 30*time.Second, pattern+" to be written", func() bool {
			m, _ := filepath.Glob(pattern)
			return len(m) > 0
		})
	}

	seen := map[string]bool{}
	for _, root := range []string{cfg.DataDir, agentDir} {
		auditModes(t, root, seen)
	}
	// The audit saw what it must judge (it cannot pass on an empty dir).
	for _, want := range []string{pki.CAKeyFile, pki.CACertFile, pki.SecretFile, pki.JoinTokenFile, AdminKubeconfigFile,
		"server-id", store.SocketFile, "db", agent.CredentialsFile, "assigned.json", "volumes", "..data", "token", emptyDirName} {
		if !seen[want] {
			t.Errorf("the audit found no %s in the data dirs", want)
		}
	}
}

// emptyDirName is the emptyDir volume of TestDataDirsArePrivate's pods.
const emptyDirName = "scratch"

// inVolume reports whether path is a pod's volume directory or inside one:
// .../pods/<uid>/volumes/<volume>[/...].
func inVolume(path string) bool {
	parts := strings.Split(filepath.ToSlash(path), "/")
	for i := 0; i+3 < len(parts); i++ {
		if parts[i] == "pods" && parts[i+2] == "volumes" {
			return true
		}
	}
	return false
}

// auditModes walks root and fails on any entry other users may read,
// write or enter (but for volumes, inVolume); it records the names it saw.
func auditModes(t *testing.T, root string, seen map[string]bool) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // a temporary file renamed away while walking
		}
		if err != nil {
			return err
		}
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		seen[d.Name()] = true
		var want fs.FileMode
		switch mode := fi.Mode(); {
		case inVolume(path):
			// A volume's own modes, as kubelet makes them.
			switch {
			case mode.IsDir() && filepath.Base(path) == emptyDirName:
				want = 0o777 // containers write it
			case mode.IsDir():
				want = 0o755
			case mode.IsRegular():
				want = 0o644
			case mode.Type() == fs.ModeSymlink:
				return nil
			default:
				t.Errorf("%s: unexpected file type %s in a volume", path, mode.Type())
				return nil
			}
		case mode.IsDir():
			want = 0o700
		case mode.IsRegular() && strings.HasSuffix(path, ".crt"):
			want = 0o644
		case mode.IsRegular(), mode.Type() == fs.ModeSocket:
			want = 0o600
		default:
			t.Errorf("%s: unexpected file type %s", path, mode.Type())
			return nil
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", path, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// attackEnv carries an attack's targets to the test binary re-executed as
// another user (see TestMain).
const attackEnv = "EVERYNODE_TEST_ATTACK"

// attack is what the unprivileged helper tries, and what it found.
type attack struct {
	Socket  string   // the embedded etcd's socket
	Secrets []string // files to read and to write
	Dirs    []string // directories to list
	Public  []string // files it should be able to read (the control)
}

type attackResult struct {
	UID     int
	Results map[string]string // "<what> <path>" -> "ok" or the error
}

// runAttack is the helper's side: it tries everything in the attack and
// prints the outcomes as JSON. It runs as uid 65534.
func runAttack(spec string) int {
	var a attack
	if err := json.Unmarshal([]byte(spec), &a); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	r := attackResult{UID: os.Getuid(), Results: map[string]string{}}
	outcome := func(what string, err error) {
		if err == nil {
			r.Results[what] = "ok"
		} else {
			r.Results[what] = err.Error()
		}
	}
	if a.Socket != "" {
		c, err := net.DialTimeout("unix", a.Socket, 5*time.Second)
		if err == nil {
			c.Close()
		}
		outcome("dial "+a.Socket, err)
		ec, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + a.Socket}, DialTimeout: time.Second})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = ec.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			cancel()
			ec.Close()
		}
		outcome("etcd-get "+a.Socket, err)
		ec, err = clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + a.Socket}, DialTimeout: time.Second})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = ec.Put(ctx, "/registry/namespaces/attacker", "{}")
			cancel()
			ec.Close()
		}
		outcome("etcd-put "+a.Socket, err)
	}
	for _, f := range a.Secrets {
		_, err := os.ReadFile(f)
		outcome("read "+f, err)
		w, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			w.Close()
		}
		outcome("write "+f, err)
	}
	for _, d := range a.Dirs {
		_, err := os.ReadDir(d)
		outcome("list "+d, err)
	}
	for _, f := range a.Public {
		_, err := os.ReadFile(f)
		outcome("read "+f, err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 2
	}
	return 0
}

// nobodyBinary is a copy of the test binary that uid 65534 can execute
// (the original lies in the go tool's 0700 work directory).
func nobodyBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(publicTempDir(t), "attack.test")
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// asNobody runs the attack as uid/gid 65534 from bin (nobodyBinary) and
// returns what it found.
func asNobody(t *testing.T, bin string, a attack) attackResult {
	t.Helper()
	spec, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = "/"
	cmd.Env = []string{attackEnv + "=" + string(spec)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the attack helper as uid 65534: %v\n%s", err, stderr.String())
	}
	var r attackResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("the attack helper's output %q: %v", out, err)
	}
	if r.UID != 65534 {
		t.Fatalf("the attack helper ran as uid %d, want 65534", r.UID)
	}
	return r
}

// publicTempDir is a new directory that every user may enter and read
// (t.TempDir's are 0700), removed at the end of the test.
func publicTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "everynode-attack-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLocalUserCannotReachEtcdOrSecrets attacks a running server as
// another local user (uid 65534, "nobody"): connecting to the embedded
// etcd (a raw dial, an etcd read and an etcd write), reading or writing
// the data dir's secrets and listing it all fail with "permission denied"
// — first as the server leaves its data dir, then after an administrator
// opened the data dir itself to everyone (0755), when the socket's 0700
// directory and the files' 0600 modes alone must hold while the
// certificates become readable (the attacker's control). The server keeps
// working, and its process listens on no TCP port but the API's and
// gossip's: etcd has no network listener.
func TestLocalUserCannotReachEtcdOrSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: this attack needs root to run its helper as uid 65534 (nobody); run the tests as root, as CI does")
	}
	ctx := context.Background()
	cfg := localConfig(t)
	cfg.Agent = nil
	cfg.DataDir = filepath.Join(publicTempDir(t), "server")
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	url, err := store.SocketURL(s.DataDir())
	if err != nil {
		t.Fatal(err)
	}
	sock, ok := strings.CutPrefix(url, "unix://")
	if !ok {
		t.Fatalf("etcd client URL %s is not a unix socket", url)
	}
	dir := s.DataDir()
	a := attack{
		Socket: sock,
		Secrets: []string{filepath.Join(dir, pki.CAKeyFile), filepath.Join(dir, pki.SecretFile),
			filepath.Join(dir, pki.JoinTokenFile), filepath.Join(dir, AdminKubeconfigFile), filepath.Join(dir, "server-id"),
			filepath.Join(dir, "etcd", "member", "snap", "db")},
		Dirs: []string{dir, filepath.Dir(sock), filepath.Join(dir, "etcd")},
	}
	denied := func(r attackResult, what string) {
		t.Helper()
		got, ok := r.Results[what]
		switch {
		case !ok:
			t.Errorf("as nobody: %s: not tried", what)
		case got == "ok":
			t.Errorf("as nobody: %s succeeded", what)
		case !strings.Contains(got, "permission denied") && !strings.HasPrefix(what, "etcd-"):
			t.Errorf("as nobody: %s: %s, want permission denied", what, got)
		}
	}
	check := func(r attackResult, dirs []string) {
		t.Helper()
		denied(r, "dial "+sock)
		denied(r, "etcd-get "+sock)
		denied(r, "etcd-put "+sock)
		for _, f := range a.Secrets {
			denied(r, "read "+f)
			denied(r, "write "+f)
		}
		for _, d := range dirs {
			denied(r, "list "+d)
		}
	}

	// As started: the data dir is the owner's only.
	bin := nobodyBinary(t)
	check(asNobody(t, bin, a), a.Dirs)

	// The data dir opened to all: only its certificates become readable.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	a.Public = []string{filepath.Join(dir, pki.CACertFile)}
	r := asNobody(t, bin, a)
	if got := r.Results["list "+dir]; got != "ok" {
		t.Errorf("as nobody, with the data dir open: listing it: %s; the attack cannot judge the inner layers", got)
	}
	if got := r.Results["read "+a.Public[0]]; got != "ok" {
		t.Errorf("as nobody, with the data dir open: reading %s: %s; want it readable", a.Public[0], got)
	}
	check(r, a.Dirs[1:])

	// The server still works: the API, and etcd through its socket for
	// its own user.
	if _, err := s.Admin().Get(ctx, resources.Namespaces, "", "default"); err != nil {
		t.Errorf("API after the attack: %v", err)
	}
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if resp, err := ec.Get(gctx, "/registry/namespaces/attacker"); err != nil || resp.Count != 0 {
		t.Errorf("etcd through its socket as the server's user: %v (err %v); want it answering, without the attacker's key", resp, err)
	}

	// No TCP listener but the API's and gossip's.
	allowed := map[int]bool{portOf(t, s.Addr().String()): true, portOf(t, s.Member().LocalAddr()): true}
	for _, port := range listeningTCPPorts(t) {
		if !allowed[port] {
			t.Errorf("the server's process listens on TCP port %d, which is neither the API's nor gossip's", port)
		}
	}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// listeningTCPPorts are the ports of this process's listening TCP sockets:
// the sockets in /proc/net/tcp{,6} in state LISTEN whose inodes are among
// /proc/self/fd's.
func listeningTCPPorts(t *testing.T) []int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	mine := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			mine[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var ports []int
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !mine[fields[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			port, err := strconv.ParseInt(hexPort, 16, 32)
			if err != nil {
				t.Fatalf("%s: %q: %v", table, fields[1], err)
			}
			ports = append(ports, int(port))
		}
		f.Close()
	}
	return ports
}

func TestStreamPing(t *testing.T) {
	cases := []struct {
		profile string
		timeout time.Duration
		want    apiserver.StreamPing
	}{
		{gossip.ProfileLAN, 0, apiserver.StreamPing{}},
		{gossip.ProfileWAN, 0, apiserver.StreamPing{Interval: 10 * time.Second, Timeout: 10 * time.Second}},
		{gossip.ProfileLAN, 5 * time.Second, apiserver.StreamPing{Timeout: 5 * time.Second}},
		{gossip.ProfileWAN, 5 * time.Second, apiserver.StreamPing{Interval: 10 * time.Second, Timeout: 5 * time.Second}},
	}
	for _, c := range cases {
		if got := streamPing(c.profile, c.timeout); got != c.want {
			t.Errorf("streamPing(%q, %s) = %+v, want %+v", c.profile, c.timeout, got, c.want)
		}
	}
}
