package agentcmd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/resources/nodelabels"
)

// Runtime names for --runtime.
const (
	runtimeDocker = agent.RuntimeDocker
	runtimeFake   = agent.RuntimeFake
)

// Flags are the node agent's flags, shared by "everynode agent",
// everynode-agent and the local agent of "everynode server".
type Flags struct {
	Name           string // --name
	labels         string
	taints         string
	runtime        string
	manifestDir    string
	nodeIP         string
	fakeImages     string
	fakeUnpullable string
	dockerHost     string
	gossip         string
	gossipProfile  string
	leaveOnStop    bool
	logListen      string

	// parsed
	labelMap map[string]string
	taintSet []corev1.Taint
}

// Register binds the flags to fs; gossipHelp is --gossip's help.
func (a *Flags) Register(fs *pflag.FlagSet, gossipHelp string) {
	fs.StringVar(&a.Name, "name", "", "node name (default: the host name, lower-cased)")
	fs.StringVar(&a.labels, "labels", "", "node labels, comma-separated key=value pairs (zone=edge,disk=ssd)")
	fs.StringVar(&a.taints, "taints", "", "node taints, comma-separated key=value:Effect or key:Effect (dedicated=edge:NoSchedule,gpu:NoExecute)")
	fs.StringVar(&a.runtime, "runtime", runtimeDocker, "container runtime: docker, or fake (simulated, for tests and demos without Docker)")
	fs.StringVar(&a.manifestDir, "manifest-dir", "", "directory of static pod manifests run without the API (empty: none)")
	fs.StringVar(&a.nodeIP, "node-ip", "", "IP reported for the node and its pods (default: the address this machine uses to reach the server)")
	fs.StringVar(&a.fakeImages, "fake-images", "", "--runtime fake: comma-separated images preloaded in the simulated image store")
	fs.StringVar(&a.fakeUnpullable, "fake-unpullable", "", "--runtime fake: glob of image references whose pulls fail")
	fs.StringVar(&a.dockerHost, "docker-host", "", "--runtime docker: engine address (default: DOCKER_HOST, else the local socket)")
	fs.StringVar(&a.gossip, "gossip", agent.DefaultGossipAddr, gossipHelp)
	fs.StringVar(&a.gossipProfile, "gossip-profile", gossip.ProfileLAN, "failure-detection timings: lan (≈1.5–2.5 s), wan (lossy links, ≈40–70 s) or local (one machine)")
	fs.StringVar(&a.logListen, "log-listen", agent.DefaultLogListen, "address (host:port) of the agent's HTTPS log endpoint the API server proxies \"logs\" to; port 0 picks a free one")
	fs.BoolVar(&a.leaveOnStop, "leave-on-stop", true, "announce a graceful leave when stopped (the Node goes Ready=False); false: the others detect the stop as a failure (Ready=Unknown)")
}

// Check validates and parses the flags.
func (a *Flags) Check() error {
	var err error
	if a.labelMap, err = nodeagent.ParseLabels(a.labels); err != nil {
		return UsageError(fmt.Sprintf("invalid --labels: %v", err), "use key=value,key2=value2")
	}
	if bad := nodelabels.ForbiddenOf(a.labelMap); len(bad) > 0 {
		return UsageError(fmt.Sprintf("invalid --labels: a node may not set %s on itself", strings.Join(bad, ", ")),
			"an admin sets them with \"everynode label node NAME KEY=VALUE\"; a node's own kubernetes.io labels must be in kubelet.kubernetes.io/ or node.kubernetes.io/")
	}
	if a.taintSet, err = nodeagent.ParseTaints(a.taints); err != nil {
		return UsageError(fmt.Sprintf("invalid --taints: %v", err), "use key=value:Effect or key:Effect, Effect one of NoSchedule, PreferNoSchedule, NoExecute")
	}
	switch a.runtime {
	case runtimeDocker, runtimeFake:
	default:
		return UsageError(fmt.Sprintf("unknown --runtime %q", a.runtime), "use docker or fake")
	}
	switch a.gossipProfile {
	case gossip.ProfileLAN, gossip.ProfileWAN, gossip.ProfileLocal:
	default:
		return UsageError(fmt.Sprintf("unknown --gossip-profile %q", a.gossipProfile), "use lan, wan or local")
	}
	if _, _, err := net.SplitHostPort(a.gossip); err != nil {
		return UsageError(fmt.Sprintf("invalid --gossip %q: %v", a.gossip, err), "use host:port with an IP or empty host, e.g. :7946 or 127.0.0.1:0")
	}
	if _, _, err := net.SplitHostPort(a.logListen); err != nil {
		return UsageError(fmt.Sprintf("invalid --log-listen %q: %v", a.logListen, err), "use host:port, e.g. :10250 or 127.0.0.1:0")
	}
	if a.nodeIP != "" && net.ParseIP(a.nodeIP) == nil {
		return UsageError(fmt.Sprintf("invalid --node-ip %q", a.nodeIP), "give an IP address")
	}
	if a.Name != "" {
		if msgs := validation.IsDNS1123Subdomain(a.Name); len(msgs) > 0 {
			return UsageError(fmt.Sprintf("invalid --name %q: %s", a.Name, strings.Join(msgs, "; ")), "use lower-case letters, digits, '-' and '.'")
		}
	}
	return nil
}

// NodeName is --name, else the host name lower-cased.
func (a *Flags) NodeName() (string, error) {
	if a.Name != "" {
		return a.Name, nil
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "", WithFix(fmt.Errorf("cannot read the host name: %v", err), "give the node a name with --name")
	}
	h = strings.ToLower(h)
	if msgs := validation.IsDNS1123Subdomain(h); len(msgs) > 0 {
		return "", UsageError(fmt.Sprintf("host name %q is not a valid node name: %s", h, strings.Join(msgs, "; ")), "give the node a name with --name")
	}
	return h, nil
}

// NodeOptions are the node's settings for the agent package; name is the
// node's name (NodeName).
func (a *Flags) NodeOptions(name string) agent.NodeOptions {
	return agent.NodeOptions{
		Name: name, IP: a.nodeIP, Labels: a.labelMap, Taints: a.taintSet, ManifestDir: a.manifestDir,
		Runtime: a.runtime, FakeImages: SplitList(a.fakeImages), FakeUnpullable: a.fakeUnpullable,
		DockerHost: a.dockerHost, LogListen: a.logListen,
	}
}

// GossipOptions are the member's settings for the agent and server packages.
func (a *Flags) GossipOptions() agent.GossipOptions {
	return agent.GossipOptions{Addr: a.gossip, Profile: a.gossipProfile, LeaveOnStop: a.leaveOnStop}
}

// Explain adds the flag that fixes a failure of the agent package to start
// or run; other errors come back unchanged.
func Explain(err error) error {
	var ae *agent.Error
	if errors.As(err, &ae) {
		switch ae.Part {
		case agent.PartJoin:
			return WithFix(err, "check --server and that \"everynode server\" is running and reachable from here")
		case agent.PartCredentials, agent.PartDataDir:
			return WithFix(err, "check --data-dir")
		case agent.PartRuntime:
			return WithFix(err, "start Docker, or run with --runtime fake (simulated) or, for a server, --no-agent")
		case agent.PartLogListen:
			return WithFix(err, "choose a free --log-listen address (port 0 picks one)")
		case agent.PartGossip:
			return WithFix(err, "choose a free --gossip address (port 0 picks one)")
		case agent.PartConfig:
			return WithFix(err, "check the agent's flags")
		}
	}
	return err
}
