package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/everynode/everynode/internal/bench"
	"github.com/everynode/everynode/server"
)

// parse parses args for the verb v as Main.Run does (its flags, the global
// flags, complete) without running it.
func parse(v runner, args []string) error {
	root := NewMain().newRoot(discard, []verbSpec{{name: "x", v: v}})
	noRun(root)
	root.SetArgs(append([]string{"x"}, args...))
	return root.ExecuteContext(context.Background())
}

// noRun makes every verb under cmd stop after parsing.
func noRun(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		if c.PreRunE != nil {
			c.RunE = func(*cobra.Command, []string) error { return nil }
		}
		noRun(c)
	}
}

// parseTree parses a whole command line with the real command tree, without
// running the verb, and returns the verbs by path.
func parseTree(args []string) (map[string]runner, error) {
	m := NewMain()
	specs := m.verbs()
	root := m.newRoot(discard, specs)
	noRun(root)
	root.SetArgs(args)
	verbs := map[string]runner{}
	var walk func(prefix string, specs []verbSpec)
	walk = func(prefix string, specs []verbSpec) {
		for _, s := range specs {
			verbs[prefix+s.name] = s.v
			walk(prefix+s.name+" ", s.sub)
		}
	}
	walk("", specs)
	return verbs, root.ExecuteContext(context.Background())
}

// flagCase is one flag of one verb as it was before cobra: its name, short
// form and default, and a command line that must set field to want.
type flagCase struct {
	path, flag, short, def string
	args                   string // after the path
	field                  string // dotted field path in the verb's struct
	want                   any
}

// agentFlagCases are the node agent's flags, shared by server and agent.
func agentFlagCases(path string) []flagCase {
	return []flagCase{
		{path, "name", "", "", "--name n1", "agent.Name", "n1"},
		{path, "labels", "", "", "--labels a=b", "agent.labels", "a=b"},
		{path, "taints", "", "", "--taints k:NoSchedule", "agent.taints", "k:NoSchedule"},
		{path, "runtime", "", "docker", "--runtime fake", "agent.runtime", "fake"},
		{path, "manifest-dir", "", "", "--manifest-dir /m", "agent.manifestDir", "/m"},
		{path, "node-ip", "", "", "--node-ip 10.0.0.9", "agent.nodeIP", "10.0.0.9"},
		{path, "fake-images", "", "", "--fake-images a,b", "agent.fakeImages", "a,b"},
		{path, "fake-unpullable", "", "", "--fake-unpullable bad*", "agent.fakeUnpullable", "bad*"},
		{path, "docker-host", "", "", "--docker-host unix:///d.sock", "agent.dockerHost", "unix:///d.sock"},
		{path, "gossip", "", ":7946", "--gossip 127.0.0.1:0", "agent.gossip", "127.0.0.1:0"},
		{path, "gossip-profile", "", "lan", "--gossip-profile wan", "agent.gossipProfile", "wan"},
		{path, "log-listen", "", ":10250", "--log-listen 127.0.0.1:0", "agent.logListen", "127.0.0.1:0"},
		{path, "leave-on-stop", "", "true", "--leave-on-stop=false", "agent.leaveOnStop", false},
	}
}

// everyFlag is every verb's flags, written down from the hand-written flag
// layer this command line replaced (every fs.*Var call): none may be lost.
func everyFlag() []flagCase {
	const join = "--server https://s:6443 --token T " // agent requires them
	cases := []flagCase{
		{"", "kubeconfig", "", "", "", "", nil},
		{"", "namespace", "n", "", "", "", nil},

		{"server", "data-dir", "", "./everynode-data", "--data-dir /d", "dataDir", "/d"},
		{"server", "listen", "", "127.0.0.1:6443", "--listen :0", "listen", ":0"},
		{"server", "etcd-endpoints", "", "", "--etcd-endpoints http://a:2379", "endpoints", "http://a:2379"},
		{"server", "tls-san", "", "", "--tls-san a.example,10.0.0.1", "tlsSANs", "a.example,10.0.0.1"},
		{"server", "no-agent", "", "false", "--no-agent", "noAgent", true},
		{"server", "log-level", "", "info", "--log-level debug", "logLevel", "debug"},
		{"server", "event-ttl", "", server.DefaultEventTTL.String(), "--event-ttl 90m", "eventTTL", 90 * time.Minute},
		{"server", "audit-log", "", "", "--audit-log /var/log/everynode-audit.log", "auditLog", "/var/log/everynode-audit.log"},
		{"server", "audit-log-maxsize", "", "100", "--audit-log-maxsize 5", "auditMaxSize", 5},
		{"server", "audit-log-maxbackup", "", "10", "--audit-log-maxbackup 3", "auditMaxBackups", 3},
		{"server", "unreachable-grace", "", server.DefaultUnreachableGrace.String(), "--unreachable-grace 1m", "grace", time.Minute},
		{"server", "cluster-init", "", "false", "--cluster-init", "clusterInit", true},
		{"server", "join", "", "", "--join https://a:6443 --token-file /dev/null", "joinURL", "https://a:6443"},
		{"server", "token-file", "", "", "--join https://a:6443 --token-file /f", "tokenFile", "/f"},
		{"server", "advertise-address", "", "", "--advertise-address 10.0.0.2", "advertise", "10.0.0.2"},
		{"server", "etcd-peer-port", "", "2380", "--etcd-peer-port 2390", "peerPort", 2390},
		{"server", "snapshot-interval", "", "0s", "--snapshot-interval 6h", "snapEvery", 6 * time.Hour},
		{"server", "snapshot-retention", "", "5", "--snapshot-retention 3", "snapKeep", 3},
		{"server", "memory-limit", "", "none", "--memory-limit 256Mi", "memLimit", "256Mi"},

		{"agent", "server", "", "", join, "server", "https://s:6443"},
		{"agent", "token", "", "", join, "token", "T"},
		{"agent", "token-file", "", "", "--server https://s:6443 --token-file /dev/null", "tokenFile", "/dev/null"},
		{"token create", "ttl", "", "24h0m0s", "--ttl 1h", "ttl", time.Hour},
		{"token create", "description", "", "", "--description d", "description", "d"},
		{"agent", "data-dir", "", "./everynode-agent-data", join + "--data-dir /a", "dataDir", "/a"},
		{"agent", "log-level", "", "info", join + "--log-level warn", "logLevel", "warn"},

		// install's own flags; install server|agent also take the role's
		// flags, which the role's rows cover.
		{"install server", "init", "", "auto", "--init openrc", "svc.init", "openrc"},
		{"install server", "root", "", "", "--root /r", "svc.root", "/r"},
		{"install server", "no-start", "", "false", "--no-start", "noStart", true},
		{"install agent", "init", "", "auto", join + "--init systemd", "svc.init", "systemd"},
		{"install agent", "root", "", "", join + "--root /r", "svc.root", "/r"},
		{"install agent", "no-start", "", "false", join + "--no-start", "noStart", true},
		{"uninstall", "init", "", "auto", "--init openrc", "svc.init", "openrc"},
		{"uninstall", "root", "", "", "--root /r", "svc.root", "/r"},
		{"uninstall", "purge", "", "false", "--purge", "purge", true},

		{"apply", "filename", "f", "", "-f ds.yaml", "filename", "ds.yaml"},
		{"plan", "filename", "f", "", "-f ds.yaml", "filename", "ds.yaml"},

		{"get", "all-namespaces", "A", "false", "ds -A", "allNamespaces", true},
		{"get", "output", "o", "", "ds -oyaml", "output", "yaml"},
		{"get", "selector", "l", "", "ds -l app=x", "selector", "app=x"},
		{"get", "watch", "w", "false", "ds -w", "watch", true},
		{"image ls", "nodes", "", "false", "--nodes", "nodes", true},

		{"delete", "cascade", "", "background", "ds a --cascade orphan", "cascade", "orphan"},
		{"delete", "selector", "l", "", "ds -l app=x", "selector", "app=x"},
		{"delete", "wait", "", "true", "ds a --wait=false", "wait", false},
		{"delete", "timeout", "", "1m0s", "ds a --timeout 5s", "timeout", 5 * time.Second},
		{"delete", "ignore-not-found", "", "false", "ds a --ignore-not-found", "ignoreNotFound", true},

		{"logs", "container", "c", "", "p -c app", "container", "app"},
		{"logs", "follow", "f", "false", "p -f", "follow", true},
		{"logs", "tail", "", "-1", "p --tail 5", "tail", int64(5)},
		{"logs", "timestamps", "", "false", "p --timestamps", "timestamps", true},
		{"logs", "since", "", "0s", "p --since 2m", "since", 2 * time.Minute},
		{"logs", "since-time", "", "", "p --since-time 2026-01-02T03:04:05Z", "sinceTime", "2026-01-02T03:04:05Z"},
		{"logs", "previous", "p", "false", "p -p", "previous", true},
		{"logs", "limit-bytes", "", "0", "p --limit-bytes 10", "limitBytes", int64(10)},

		{"rollout status", "watch", "w", "true", "ds/a -w=false", "watch", false},
		{"rollout status", "timeout", "", "0s", "ds/a --timeout 5m", "timeout", 5 * time.Minute},
		{"rollout status", "nodes", "", "true", "ds/a --nodes=false", "progress", false},
		{"rollout history", "revision", "", "0", "ds/a --revision 2", "revision", int64(2)},
		{"rollout undo", "to-revision", "", "0", "ds/a --to-revision=1", "toRevision", int64(1)},

		{"label", "overwrite", "", "false", "no n1 a=b --overwrite", "overwrite", true},
		{"label", "all", "", "false", "no a=b --all", "targetFlags.all", true},
		{"label", "selector", "l", "", "no a=b -l x=y", "targetFlags.selector", "x=y"},
		{"annotate", "overwrite", "", "false", "no n1 a=b --overwrite", "overwrite", true},
		{"annotate", "all", "", "false", "no a=b --all", "targetFlags.all", true},
		{"annotate", "selector", "l", "", "no a=b -l x=y", "targetFlags.selector", "x=y"},
		{"taint", "overwrite", "", "false", "node n1 k:NoSchedule --overwrite", "overwrite", true},
		{"taint", "all", "", "false", "node k:NoSchedule --all", "targetFlags.all", true},
		{"taint", "selector", "l", "", "node k:NoSchedule -l x=y", "targetFlags.selector", "x=y"},
		{"cordon", "selector", "l", "", "-l x=y", "selector", "x=y"},
		{"uncordon", "selector", "l", "", "-l x=y", "selector", "x=y"},

		{"drain", "ignore-daemonsets", "", "false", "n1 --ignore-daemonsets", "ignoreDaemonSets", true},
		{"drain", "delete-emptydir-data", "", "false", "n1 --delete-emptydir-data", "deleteEmptyDirData", true},
		{"drain", "force", "", "false", "n1 --force", "force", true},
		{"drain", "grace-period", "", "-1", "n1 --grace-period 3", "gracePeriod", int64(3)},
		{"drain", "timeout", "", "0s", "n1 --timeout 1m", "timeout", time.Minute},

		{"version", "client", "", "false", "--client", "clientOnly", true},
		{"etcd snapshot save", "data-dir", "", "./everynode-data", "--data-dir /d", "dataDir", "/d"},
		{"etcd snapshot ls", "data-dir", "", "./everynode-data", "--data-dir /d", "dataDir", "/d"},
		{"etcd snapshot restore", "data-dir", "", "./everynode-data", "f.db --data-dir /d", "dataDir", "/d"},
		{"etcd snapshot restore", "cluster-init", "", "false", "f.db --cluster-init --advertise-address 10.0.0.1", "clusterInit", true},
		{"etcd snapshot restore", "name", "", "", "f.db --name s1", "name", "s1"},
		{"etcd snapshot restore", "advertise-address", "", "", "f.db --advertise-address 10.0.0.1", "advertise", "10.0.0.1"},
		{"etcd snapshot restore", "etcd-peer-port", "", "2380", "f.db --etcd-peer-port 2390", "peerPort", 2390},

		{"bench fleet", "nodes", "", "100", "--nodes 7", "nodes", 7},
		{"bench fleet", "json", "", "false", "--json", "asJSON", true},
		{"bench fleet", "memory-limit", "", "none", "--memory-limit 160Mi", "memLimit", "160Mi"},
		{"bench fleet", "gossip", "", "false", "--gossip", "gsp", true},
		{"bench fleet", "rollout", "", "false", "--rollout", "rollout", true},
		{"bench fleet", "detect", "", "false", "--detect", "detect", true},
		{"bench fleet", "cpuprofile", "", "", "--cpuprofile c.out", "cpuProfile", "c.out"},
		{"bench fleet", "memprofile", "", "", "--memprofile m.out", "memProfile", "m.out"},
		{"bench fleet", "fanout-cpuprofile", "", "", "--fanout-cpuprofile f.out", "fanoutProfile", "f.out"},
		{"bench fleet", "log-level", "", "warn", "--log-level debug", "logLevel", "debug"},
		{"bench fleet", "agent-binary", "", "", "--agent-binary none", "agentBin", "none"},
		{"bench fleet", "soak", "", "0s", "--soak 10m", "soak", 10 * time.Minute},
		{"bench fleet", "agent-idle", "", bench.DefaultAgentIdle.String(), "--agent-idle 1s", "idle", time.Second},
		{"bench fleet", "agent-procs", "", "0", "--agent-procs 4", "agentProcs", 4},
		{"bench fleet", "cpu-load", "", "0", "--cpu-load 2", "cpuLoad", 2},
		{"bench fleet", "rollout-unreachable", "", "0", "--rollout-unreachable 5", "unreachable", 5},
		{"bench fleet", "gossip-profile", "", "lan", "--gossip-profile wan", "gossipProfile", "wan"},
		{"bench fleet", "idle-traffic", "", "0s", "--idle-traffic 5m", "idleTraffic", 5 * time.Minute},
		{"bench fleet", "idle-settle", "", "0s", "--idle-traffic 5m --idle-settle 10m", "idleSettle", 10 * time.Minute},
		{"bench fleet", "idle-cpu", "", "0s", "--agent-procs 2 --idle-cpu 30s", "idleCPU", 30 * time.Second},
		{"bench fleet", "agents-cpuprofile", "", "", "--agent-procs 2 --agents-cpuprofile a.pprof", "agentsProfile", "a.pprof"},
		{"bench fleet", "idle-cpuprofile", "", "", "--agent-procs 2 --idle-cpu 30s --idle-cpuprofile a.pprof", "idleCPUProfile", "a.pprof"},
		{"bench fleet", "unreachable-blocks", "", "false", "--rollout-unreachable 5 --unreachable-blocks", "unreachableBlocks", true},
		{"bench fleet", "own-connections", "", "false", "--own-connections", "ownConns", true},
		{"bench agents", "log-level", "", "warn", "--log-level info", "logLevel", "info"},
		{"bench report", "output", "o", "", "r.json -o out.md", "outPath", "out.md"},
		{"bench report", "command", "", "make bench-fleet", "r.json --command x", "command", "x"},
		{"bench report", "notes", "", "", "r.json --notes n.md", "notes", "n.md"},
		{"bench report", "docker", "", "", "r.json --docker docker.txt", "docker", "docker.txt"},
	}
	cases = append(cases, agentFlagCases("server")...)
	for _, c := range agentFlagCases("agent") {
		c.args = join + c.args
		cases = append(cases, c)
	}
	return cases
}

// TestEveryFlagKept checks every verb's flags against the list written down
// before the move to cobra: the same names, short forms and defaults, each
// setting the same field, and no flag more or less.
func TestEveryFlagKept(t *testing.T) {
	m := NewMain()
	root := m.newRoot(discard, m.verbs())
	cases := everyFlag()
	want := map[string]bool{}
	for _, c := range cases {
		key := strings.TrimSpace(c.path + " --" + c.flag)
		want[key] = true
		t.Run(key, func(t *testing.T) {
			cmd := root
			if c.path != "" {
				var err error
				if cmd, _, err = root.Find(strings.Fields(c.path)); err != nil || cmd.CommandPath() != "everynode "+c.path {
					t.Fatalf("verb %q: found %q, %v", c.path, cmd.CommandPath(), err)
				}
			}
			f := cmd.Flags().Lookup(c.flag)
			if f == nil {
				t.Fatalf("everynode %s has no --%s", c.path, c.flag)
			}
			if f.Shorthand != c.short || f.DefValue != c.def {
				t.Errorf("--%s: short %q default %q, want %q %q", c.flag, f.Shorthand, f.DefValue, c.short, c.def)
			}
			if c.field == "" {
				return
			}
			verbs, err := parseTree(append(strings.Fields(c.path), strings.Fields(c.args)...))
			if err != nil {
				t.Fatalf("everynode %s %s: %v", c.path, c.args, err)
			}
			got := reflect.ValueOf(verbs[c.path]).Elem()
			for _, name := range strings.Split(c.field, ".") {
				got = got.FieldByName(name)
			}
			if !sameValue(got, c.want) {
				t.Errorf("everynode %s %s: %s = %v, want %v", c.path, c.args, c.field, got, c.want)
			}
		})
	}

	// No flag appeared or went missing.
	var have []string
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		path := strings.TrimSpace(strings.TrimPrefix(cmd.CommandPath(), "everynode"))
		if path == "completion" || path == "help" {
			return // cobra's own commands
		}
		fs := cmd.LocalNonPersistentFlags()
		if cmd == root {
			fs = cmd.PersistentFlags()
		}
		role := path == "install server" || path == "install agent"
		fs.VisitAll(func(f *pflag.Flag) {
			if role && !slices.Contains(installFlags, f.Name) {
				return // the role's own flags, listed under the role
			}
			if f.Name != "help" {
				have = append(have, strings.TrimSpace(path+" --"+f.Name))
			}
		})
		for _, c := range cmd.Commands() {
			walk(c)
		}
	}
	root.InitDefaultHelpFlag()
	walk(root)
	sort.Strings(have)
	var wantList []string
	for k := range want {
		wantList = append(wantList, k)
	}
	sort.Strings(wantList)
	if !slices.Equal(have, wantList) {
		t.Errorf("flags in the tree:\n%q\nwritten down:\n%q", have, wantList)
	}
}

// sameValue compares a (possibly unexported) field with want.
func sameValue(got reflect.Value, want any) bool {
	w := reflect.ValueOf(want)
	if !got.IsValid() || got.Kind() != w.Kind() {
		return false
	}
	switch got.Kind() {
	case reflect.String:
		return got.String() == w.String()
	case reflect.Bool:
		return got.Bool() == w.Bool()
	case reflect.Int, reflect.Int64:
		return got.Int() == w.Int()
	}
	return false
}

// TestEveryVerbKept checks that every verb of the hand-written dispatcher is
// still a command, with "bench agents" hidden.
func TestEveryVerbKept(t *testing.T) {
	m := NewMain()
	root := m.newRoot(discard, m.verbs())
	for _, path := range []string{"server", "agent", "apply", "plan", "get", "describe", "delete", "logs", "version",
		"rollout status", "rollout history", "rollout undo", "rollout restart", "rollout pause", "rollout resume", "rollout promote", "label", "annotate", "taint",
		"cordon", "uncordon", "drain", "set image", "bench fleet", "bench report", "bench agents",
		"token create", "token list", "token delete", "token rotate", "secrets rotate-key",
		"image load", "image ls", "image rm",
		"completion bash", "completion zsh", "completion fish"} {
		cmd, _, err := root.Find(strings.Fields(path))
		if err != nil || cmd.CommandPath() != "everynode "+path {
			t.Errorf("everynode %s: found %q, %v", path, cmd.CommandPath(), err)
			continue
		}
		if hidden := path == "bench agents"; cmd.Hidden != hidden {
			t.Errorf("everynode %s: hidden %v, want %v", path, cmd.Hidden, hidden)
		}
	}
}

// TestGlobalFlags: --kubeconfig and -n may stand before the verb, as in
// kubectl, in every spelling.
func TestGlobalFlags(t *testing.T) {
	for _, tt := range []struct {
		args           string
		kubeconfig, ns string
	}{
		{"-n kube-system get pods", "", "kube-system"},
		{"-nkube-system get pods", "", "kube-system"},
		{"--namespace=kube-system get pods", "", "kube-system"},
		{"--kubeconfig F get nodes", "F", "default"},
		{"--kubeconfig=F -n x get pods -n y", "F", "y"},
		{"get pods --kubeconfig F --namespace x", "F", "x"},
	} {
		verbs, err := parseTree(strings.Fields(tt.args))
		if err != nil {
			t.Errorf("%s: %v", tt.args, err)
			continue
		}
		c := verbs["get"].(*GetCommand)
		if c.kubeconfig != tt.kubeconfig || c.ns() != tt.ns || c.r == nil {
			t.Errorf("%s: kubeconfig %q ns %q r %v, want %q %q", tt.args, c.kubeconfig, c.ns(), c.r, tt.kubeconfig, tt.ns)
		}
	}
}

// TestErrorsAreOneLine: mistakes give one line naming the cause and the fix,
// and print nothing else (main prints the line).
func TestErrorsAreOneLine(t *testing.T) {
	for _, tt := range []struct{ args, want string }{
		{"frobnicate", `error: unknown command "frobnicate"; see "everynode -h" for the commands`},
		{"gte pods", `error: unknown command "gte"; did you mean "get"? see "everynode -h" for the commands`},
		{"get pods --bogus", `error: unknown flag: --bogus; see "everynode get -h"`},
		{"--bogus get pods", `error: unknown flag: --bogus; see "everynode -h"`}, // as kubectl: "get" may be its value
		{"rollout status ds/a -x", `error: unknown shorthand flag: 'x' in -x; see "everynode rollout status -h"`},
		{"rollout frobnicate ds/a", `error: unknown rollout subcommand "frobnicate"; use history, pause, promote, restart, resume, status, undo`},
		{"server --listen", `error: flag needs an argument: --listen; see "everynode server -h"`},
		{"bench fleet --nodes many", `error: invalid argument "many" for "--nodes" flag: strconv.ParseInt: parsing "many": invalid syntax; see "everynode bench fleet -h"`},
	} {
		var out, errOut bytes.Buffer
		err := NewMain().Run(context.Background(), strings.Fields(tt.args), strings.NewReader(""), &out, &errOut)
		if got := FormatError(err); err == nil || got != tt.want {
			t.Errorf("%s: %q, want %q", tt.args, got, tt.want)
		}
		if out.Len() != 0 || errOut.Len() != 0 {
			t.Errorf("%s: printed %q %q besides the error", tt.args, out.String(), errOut.String())
		}
	}
}

// TestHelp: -h, --help and "help" print help on stdout and succeed; a verb's
// help lists its flags and the global ones, kubectl-style.
func TestHelp(t *testing.T) {
	help := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := NewMain().Run(context.Background(), args, strings.NewReader(""), &out, &errOut); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if errOut.Len() != 0 {
			t.Errorf("%q: stderr %q", args, errOut.String())
		}
		return out.String()
	}
	root := help("-h")
	if root != help("--help") || root != help("help") {
		t.Error("-h, --help and help differ")
	}
	for _, want := range []string{"everynode server [flags]", "everynode get KIND", "everynode rollout status|history|undo|restart|pause|resume|promote ds/NAME",
		"everynode completion bash|fish|powershell|zsh", "everynode bench fleet|report", "KIND is a resource name", "--kubeconfig", "-n, --namespace"} {
		if !strings.Contains(root, want) {
			t.Errorf("everynode -h lacks %q:\n%s", want, root)
		}
	}
	m := NewMain()
	for _, s := range m.verbs() {
		if !s.hidden && !strings.Contains(root, "everynode "+s.name+" ") {
			t.Errorf("everynode -h does not list %q", s.name)
		}
	}
	get := help("get", "-h")
	if get != help("help", "get") || get != help("get", "pods", "--help") {
		t.Error("get -h, help get and get pods --help differ")
	}
	for _, want := range []string{"everynode get KIND[,KIND...]|all [NAME...] [flags]", "-o, --output string", "-A, --all-namespaces",
		"-l, --selector", "-w, --watch", "Global Flags:", "-n, --namespace string", "--kubeconfig string"} {
		if !strings.Contains(get, want) {
			t.Errorf("everynode get -h lacks %q:\n%s", want, get)
		}
	}
	if b := help("bench", "-h"); strings.Contains(b, "agents") || !strings.Contains(b, "fleet") {
		t.Errorf("everynode bench -h shows the hidden agents or lacks fleet:\n%s", b)
	}
	if s := help("server", "-h"); !strings.Contains(s, "--fake-images") || !strings.Contains(s, "--tls-san") {
		t.Errorf("everynode server -h lacks the agent or server flags:\n%s", s)
	}
}

// TestNoCommand: "everynode" alone prints the help on stderr and fails.
func TestNoCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	err := NewMain().Run(context.Background(), nil, nil, &out, &errOut)
	if got := FormatError(err); got != `error: no command given; run "everynode server" to start a cluster, or see "everynode -h"` {
		t.Errorf("no command: %q", got)
	}
	if out.Len() != 0 || !strings.Contains(errOut.String(), "everynode server [flags]") {
		t.Errorf("no command: stdout %q, stderr %q", out.String(), errOut.String())
	}
}

// TestCompletion runs cobra's completion generators: each prints a script,
// and bash accepts the bash one.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		var out, errOut bytes.Buffer
		if err := NewMain().Run(context.Background(), []string{"completion", sh}, nil, &out, &errOut); err != nil {
			t.Fatalf("completion %s: %v (%s)", sh, err, errOut.String())
		}
		if !strings.Contains(out.String(), "everynode") || out.Len() < 1000 {
			t.Fatalf("completion %s: %d bytes: %q", sh, out.Len(), out.String())
		}
		if sh != "bash" {
			continue
		}
		bash, err := exec.LookPath("bash")
		if err != nil {
			t.Fatalf("bash is needed to check the bash completion: %v", err)
		}
		script := filepath.Join(t.TempDir(), "everynode.bash")
		if err := os.WriteFile(script, out.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		if msg, err := exec.Command(bash, "-n", script).CombinedOutput(); err != nil {
			t.Errorf("bash -n rejects the completion script: %v\n%s", err, msg)
		}
	}

	// The scripts call "everynode __complete": verbs, then kinds for get.
	complete := func(args ...string) string {
		var out bytes.Buffer
		if err := NewMain().Run(context.Background(), append([]string{"__complete"}, args...), nil, &out, &bytes.Buffer{}); err != nil {
			t.Fatalf("__complete %q: %v", args, err)
		}
		return out.String()
	}
	if got := complete("ro"); !strings.Contains(got, "rollout") {
		t.Errorf("__complete ro: %q", got)
	}
	if got := complete("get", "d"); !strings.Contains(got, "daemonsets\n") || !strings.Contains(got, "ds\n") {
		t.Errorf("__complete get d: %q", got)
	}
}
