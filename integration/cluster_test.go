package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/nodeagent/runtime"
	"github.com/everynode/everynode/nodeagent/runtime/fake"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/server"
)

// testLogger shows warnings and errors of every component (set
// EVERYNODE_TEST_LOG=debug for everything).
func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("EVERYNODE_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// tokens is the API's Authenticator: a token table the test grows as nodes join.
type tokens struct {
	mu sync.Mutex
	m  map[string]apiserver.UserInfo
}

func (t *tokens) AuthenticateToken(token string) (string, []string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u, ok := t.m[token]
	return u.Name, u.Groups, ok
}

func (t *tokens) add(token string, u apiserver.UserInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[token] = u
}

// simNode is one simulated node: a real agent on the fake runtime.
type simNode struct {
	name   string
	rt     *fake.Fake
	cancel context.CancelFunc
	done   chan struct{}
}

// cluster is one everynode control plane (server.Start, with the test's
// token table and a settable membership instead of gossip) plus simulated
// nodes.
type cluster struct {
	t       *testing.T // the (sub)test failures go to
	root    *testing.T // the test that owns the cluster's resources
	ctx     context.Context
	srv     *server.Server
	tokens  *tokens
	url     string
	caPEM   []byte
	admin   client.Interface // the test's own client: HTTPS, admin token (like kubectl)
	members *nodelifecycle.StaticMembership

	nodes *nodeSet
}

// startControllers runs fresh controllers (as a server that starts or
// takes over leadership does): new caches, no expectations.
func (c *cluster) startControllers() { c.srv.StartControllers() }

// stopControllers stops the running controllers and waits for them.
func (c *cluster) stopControllers() { c.srv.StopControllers() }

// nodeSet is the running simulated nodes.
type nodeSet struct {
	mu sync.Mutex
	m  map[string]*simNode
}

// sub returns c for use by the subtest t (failures go to t).
func (c *cluster) sub(t *testing.T) *cluster {
	cc := *c
	cc.t = t
	return &cc
}

// newCluster starts a server (etcd, the API, the controllers) and n nodes
// named node-0 … node-(n-1), and waits until every Node is registered.
func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	return newClusterWith(t, n, nil)
}

// newClusterWith is newCluster whose server.Config mod may change first.
func newClusterWith(t *testing.T, n int, mod func(*server.Config)) *cluster {
	t.Helper()
	log := testLogger()
	ctx, cancel := context.WithCancel(context.Background())
	toks := &tokens{m: map[string]apiserver.UserInfo{
		adminToken: {Name: "admin", Groups: []string{"system:masters"}},
	}}
	members := nodelifecycle.NewStaticMembership()
	startCtx, startCancel := context.WithTimeout(ctx, waitLong)
	cfg := server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", CompactInterval: -1,
		Logger: log, Membership: members, Authenticator: toks, OrphanQuarantine: orphanQuarantine}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := server.Start(startCtx, cfg)
	startCancel()
	if err != nil {
		cancel()
		t.Fatalf("server.Start: %v", err)
	}
	c := &cluster{t: t, root: t, ctx: ctx, srv: srv, tokens: toks, url: srv.URL(), caPEM: srv.CAPEM(),
		members: members, nodes: &nodeSet{m: map[string]*simNode{}}}
	c.admin = c.httpClient(adminToken)

	t.Cleanup(func() {
		if t.Failed() {
			c.dump()
		}
		c.nodes.mu.Lock()
		nodes := make([]*simNode, 0, len(c.nodes.m))
		for _, sn := range c.nodes.m {
			nodes = append(nodes, sn)
		}
		c.nodes.mu.Unlock()
		for _, sn := range nodes {
			sn.cancel()
		}
		for _, sn := range nodes {
			<-sn.done
		}
		c.stopControllers()
		// The controllers' informers and every List and Watch share the
		// store's cached objects: none may have been modified.
		vctx, vcancel := context.WithTimeout(context.Background(), waitLong)
		if err := srv.VerifyCache(vctx); err != nil {
			t.Errorf("watch cache differs from etcd: %v", err)
		}
		vcancel()
		cancel()
		if err := srv.Close(); err != nil {
			t.Errorf("server close: %v", err)
		}
	})
	for i := range n {
		c.startNode(fmt.Sprintf("node-%d", i), nil)
	}
	for i := range n {
		c.waitNode(fmt.Sprintf("node-%d", i))
	}
	return c
}

// httpClient is an HTTPS client of the cluster's API with token.
func (c *cluster) httpClient(token string) client.Interface {
	h, err := client.NewHTTP(client.Config{Server: c.url, CAPEM: c.caPEM, Token: token, Timeout: 10 * time.Second, ResourceFor: resources.ForObject})
	if err != nil {
		c.t.Fatalf("client.NewHTTP: %v", err)
	}
	c.root.Cleanup(h.Close)
	return h
}

// startNode starts a simulated node (its agent registers the Node) and
// marks it alive in the membership. It does not wait for registration.
func (c *cluster) startNode(name string, labels map[string]string) *simNode {
	c.t.Helper()
	token := "node-token-" + name
	c.tokens.add(token, apiserver.UserInfo{Name: "system:node:" + name, Groups: []string{"system:nodes"}})
	rt := fake.New(fake.Config{Images: []string{imageV1, imageV2}, Unpullable: "example/broken*", IP: "10.0.0.1"})
	return c.runAgent(rt, nodeagent.Config{
		NodeName:         name,
		NodeIP:           "192.0.2.1",
		Client:           c.httpClient(token),
		Runtime:          rt,
		Logger:           testLogger().With("component", "agent"),
		DataDir:          c.root.TempDir(),
		Labels:           labels,
		RelistPeriod:     100 * time.Millisecond,
		ResyncPeriod:     time.Second,
		NodeStatusPeriod: 5 * time.Second,
	})
}

// runAgent builds the node agent of cfg over rt, marks the node alive in the
// membership and runs the agent until the node is stopped.
func (c *cluster) runAgent(rt *fake.Fake, cfg nodeagent.Config) *simNode {
	c.t.Helper()
	name := cfg.NodeName
	agent, err := nodeagent.New(cfg)
	if err != nil {
		c.t.Fatalf("nodeagent.New(%s): %v", name, err)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	sn := &simNode{name: name, rt: rt, cancel: cancel, done: make(chan struct{})}
	c.members.SetAlive(name, true)
	go func() {
		defer close(sn.done)
		if err := agent.Run(ctx); err != nil && ctx.Err() == nil {
			c.root.Errorf("agent %s: %v", name, err) // the agent may outlive a subtest
		}
	}()
	c.nodes.mu.Lock()
	c.nodes.m[name] = sn
	c.nodes.mu.Unlock()
	return sn
}

// stopNode stops a node's agent (the machine goes away) and waits for it.
func (c *cluster) stopNode(name string) {
	c.t.Helper()
	c.nodes.mu.Lock()
	sn := c.nodes.m[name]
	delete(c.nodes.m, name)
	c.nodes.mu.Unlock()
	if sn == nil {
		c.t.Fatalf("no running node %s", name)
	}
	sn.cancel()
	<-sn.done
}

// waitNode waits until the Node object exists.
func (c *cluster) waitNode(name string) {
	c.t.Helper()
	eventually(c.t, waitLong, func() error {
		_, err := c.admin.Get(c.ctx, resources.Nodes, "", name)
		return err
	})
}

// dump logs the DaemonSets, revisions and pods of the namespace (on failure).
func (c *cluster) dump() {
	if objs, _, err := c.admin.List(c.ctx, resources.DaemonSets, ns, client.ListOptions{}); err == nil {
		for _, o := range objs {
			ds := o.(*appsv1.DaemonSet)
			c.t.Logf("dump: daemonset %s uid=%s gen=%d deleting=%v status=%+v", ds.Name, ds.UID, ds.Generation, ds.DeletionTimestamp != nil, ds.Status)
		}
	}
	for _, r := range c.revisions("") {
		c.t.Logf("dump: revision %s #%d owners=%v", r.Name, r.Revision, ownerUIDs(r.OwnerReferences))
	}
	pods, _ := c.pods("")
	for _, p := range pods {
		c.t.Logf("dump: pod %s uid=%s node=%s hash=%s phase=%s ready=%v deleting=%v owners=%v",
			p.Name, p.UID, p.Spec.NodeName, p.Labels[hashLabel], p.Status.Phase, podReady(p), p.DeletionTimestamp != nil, ownerUIDs(p.OwnerReferences))
	}
}

func ownerUIDs(refs []metav1.OwnerReference) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.Kind+"/"+r.Name+"/"+string(r.UID))
	}
	return out
}

// runningImages lists the images of the running containers of a simulated
// node's runtime: what the machine really runs.
func (c *cluster) runningImages(node string) ([]string, error) {
	c.nodes.mu.Lock()
	sn := c.nodes.m[node]
	c.nodes.mu.Unlock()
	if sn == nil {
		return nil, fmt.Errorf("no running node %s", node)
	}
	ctrs, err := sn.rt.ListContainers(c.ctx, nil)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ctr := range ctrs {
		if ctr.State == runtime.StateRunning {
			out = append(out, ctr.Image)
		}
	}
	sort.Strings(out)
	return out, nil
}
