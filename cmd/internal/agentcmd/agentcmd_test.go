package agentcmd

import (
	"os"

	"github.com/spf13/pflag"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseAgent(t *testing.T) {
	c := &Command{}
	err := parse(c, strings.Fields("--server https://10.0.0.1:6443 --token K10x --name edge-1 --labels zone=edge,disk=ssd "+
		"--taints dedicated=edge:NoSchedule,gpu:NoExecute --runtime fake --data-dir /d --gossip 127.0.0.1:0 --gossip-profile wan "+
		"--fake-images busybox,app:v2 --fake-unpullable broken* --log-listen 127.0.0.1:0 --leave-on-stop=false"))
	if err != nil {
		t.Fatal(err)
	}
	if c.server != "https://10.0.0.1:6443" || c.agent.Name != "edge-1" || c.agent.labelMap["disk"] != "ssd" || len(c.agent.taintSet) != 2 ||
		c.agent.runtime != "fake" || c.agent.gossipProfile != "wan" || c.agent.leaveOnStop || c.dataDir != "/d" {
		t.Fatalf("parsed %+v", c)
	}
	base := "--server https://s:6443 --token K10x "
	for args, want := range map[string]string{
		"--token K10x":                                           "--server is required",
		"--server http://s:6443 --token K10":                     "invalid --server",
		"--server https://s:6443":                                "join refused: no join token given; copy <data-dir>/join-token from the server and give it with --token-file (or EVERYNODE_TOKEN, or --token)",
		base + "--token-file /x":                                 "both --token and --token-file given",
		base + "--labels zone":                                   "invalid --labels",
		base + "--labels node-role.kubernetes.io/control-plane=": "invalid --labels: a node may not set node-role.kubernetes.io/control-plane on itself",
		base + "--labels node-restriction.kubernetes.io/x=1":     "invalid --labels: a node may not set node-restriction.kubernetes.io/x on itself",
		base + "--taints gpu=yes":                                "invalid --taints",
		base + "--taints gpu:Sometimes":                          "invalid --taints",
		base + "--runtime rkt":                                   "unknown --runtime",
		base + "--gossip-profile moon":                           "unknown --gossip-profile",
		base + "--gossip 7946":                                   "invalid --gossip",
		base + "--node-ip nope":                                  "invalid --node-ip",
		base + "--name Edge_1":                                   "invalid --name",
		base + "extra":                                           "unexpected arguments",
	} {
		err := parse(&Command{}, strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", args, err, want)
		}
	}
}

// TestAgentTokenSources: the join token comes from --token (with a warning
// at run time), --token-file or EVERYNODE_TOKEN, in that order.
func TestAgentTokenSources(t *testing.T) {
	file := filepath.Join(t.TempDir(), "join-token")
	if err := os.WriteFile(file, []byte("K10file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		if k == TokenEnv {
			return " K10env\n"
		}
		return ""
	}
	for _, tt := range []struct {
		args   string
		getenv func(string) string
		want   string
		onArgv bool
	}{
		{"--token K10argv", env, "K10argv", true},
		{"--token-file " + file, env, "K10file", false},
		{"", env, "K10env", false},
	} {
		c := &Command{Getenv: tt.getenv}
		if err := parse(c, strings.Fields("--server https://s:6443 "+tt.args)); err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		got, err := c.JoinToken()
		if err != nil || got != tt.want || c.tokenOnArgv != tt.onArgv {
			t.Errorf("%q: token %q (%v) onArgv %v, want %q %v", tt.args, got, err, c.tokenOnArgv, tt.want, tt.onArgv)
		}
	}
	c := &Command{tokenFile: filepath.Join(t.TempDir(), "missing")}
	if _, err := c.JoinToken(); err == nil || !strings.Contains(err.Error(), "cannot read --token-file") {
		t.Errorf("missing token file: %v", err)
	}
}

// parse parses args as the agent's command line and checks them.
func parse(c *Command, args []string) error {
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	c.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return c.Complete(fs.Args())
}
