package integration

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller"
	"github.com/everynode/everynode/controller/nodelifecycle"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/nodeagent/runtime"
	"github.com/everynode/everynode/nodeagent/runtime/fake"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

const (
	ns         = "default"
	adminToken = "admin-token"
	imageV1    = "example/daemon:v1"
	imageV2    = "example/daemon:v2"
	// brokenImage can never be pulled by the simulated nodes.
	brokenImage = "example/broken:v1"
	hashLabel   = appsv1.ControllerRevisionHashLabelKey
	// waitLong bounds any single convergence in these tests.
	waitLong = 30 * time.Second
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

// fakeMembership is the gossip membership the node lifecycle controller
// reads: the test says which nodes are alive.
type fakeMembership struct {
	mu      sync.Mutex
	members map[string]bool
	changed chan struct{}
}

var _ nodelifecycle.Membership = (*fakeMembership)(nil)

func newFakeMembership() *fakeMembership {
	return &fakeMembership{members: map[string]bool{}, changed: make(chan struct{}, 1)}
}

func (m *fakeMembership) Members() []nodelifecycle.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]nodelifecycle.Member, 0, len(m.members))
	for name, alive := range m.members {
		out = append(out, nodelifecycle.Member{Name: name, Alive: alive})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (m *fakeMembership) Changed() <-chan struct{} { return m.changed }

// set records a member as alive or dead; remove forgets it.
func (m *fakeMembership) set(name string, alive bool) {
	m.mu.Lock()
	m.members[name] = alive
	m.mu.Unlock()
	m.hint()
}

func (m *fakeMembership) remove(name string) {
	m.mu.Lock()
	delete(m.members, name)
	m.mu.Unlock()
	m.hint()
}

func (m *fakeMembership) hint() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// simNode is one simulated node: a real agent on the fake runtime.
type simNode struct {
	name   string
	rt     *fake.Fake
	cancel context.CancelFunc
	done   chan struct{}
}

// cluster is one everynode control plane plus simulated nodes.
type cluster struct {
	t       *testing.T
	ctx     context.Context
	api     *apiserver.Server
	tokens  *tokens
	url     string
	caPEM   []byte
	admin   client.Interface // the test's own client: HTTPS, admin token (like kubectl)
	members *fakeMembership

	nodes *nodeSet
}

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

// newCluster starts etcd, the API, the controllers and n nodes named
// node-0 … node-(n-1), and waits until every Node is registered.
func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	log := testLogger()
	ctx, cancel := context.WithCancel(context.Background())

	openCtx, openCancel := context.WithTimeout(ctx, waitLong)
	st, err := store.Open(openCtx, store.Config{DataDir: t.TempDir(), CompactInterval: -1, Logger: log.With("component", "store")})
	openCancel()
	if err != nil {
		cancel()
		t.Fatalf("store.Open: %v", err)
	}
	toks := &tokens{m: map[string]apiserver.UserInfo{
		adminToken: {Name: "admin", Groups: []string{"system:masters"}},
	}}
	api, err := apiserver.New(apiserver.Config{Store: st, Authenticator: toks, Logger: log.With("component", "apiserver")})
	if err != nil {
		cancel()
		_ = st.Close()
		t.Fatalf("apiserver.New: %v", err)
	}
	if err := api.EnsureNamespaces(ctx, "default", "kube-system", "kube-public"); err != nil {
		cancel()
		_ = st.Close()
		t.Fatalf("EnsureNamespaces: %v", err)
	}
	srv := httptest.NewUnstartedServer(api.Handler())
	srv.EnableHTTP2 = true
	srv.StartTLS()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	c := &cluster{t: t, ctx: ctx, api: api, tokens: toks, url: srv.URL, caPEM: caPEM,
		members: newFakeMembership(), nodes: &nodeSet{m: map[string]*simNode{}}}
	c.admin = c.httpClient(adminToken)

	ctrlDone := make(chan struct{})
	local := apiserver.NewLocalClient(api, "system:controller:everynode", "system:masters")
	go func() {
		defer close(ctrlDone)
		if err := controller.RunAll(ctx, controller.Config{Client: local, Membership: c.members,
			Logger: log.With("component", "controllers")}); err != nil {
			t.Errorf("controller.RunAll: %v", err)
		}
	}()

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
		cancel()
		<-ctrlDone
		api.Stop()
		srv.Close()
		if err := st.Close(); err != nil {
			t.Errorf("store close: %v", err)
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
	h, err := client.NewHTTP(client.Config{Server: c.url, CAPEM: c.caPEM, Token: token, Timeout: 10 * time.Second})
	if err != nil {
		c.t.Fatalf("client.NewHTTP: %v", err)
	}
	c.t.Cleanup(h.Close)
	return h
}

// startNode starts a simulated node (its agent registers the Node) and
// marks it alive in the membership. It does not wait for registration.
func (c *cluster) startNode(name string, labels map[string]string) *simNode {
	c.t.Helper()
	token := "node-token-" + name
	c.tokens.add(token, apiserver.UserInfo{Name: "system:node:" + name, Groups: []string{"system:nodes"}})
	rt := fake.New(fake.Config{Images: []string{imageV1, imageV2}, Unpullable: "example/broken*", IP: "10.0.0.1"})
	agent, err := nodeagent.New(nodeagent.Config{
		NodeName:         name,
		NodeIP:           "192.0.2.1",
		Client:           c.httpClient(token),
		Runtime:          rt,
		Logger:           testLogger().With("component", "agent"),
		DataDir:          c.t.TempDir(),
		Labels:           labels,
		RelistPeriod:     100 * time.Millisecond,
		ResyncPeriod:     time.Second,
		NodeStatusPeriod: 5 * time.Second,
	})
	if err != nil {
		c.t.Fatalf("nodeagent.New(%s): %v", name, err)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	sn := &simNode{name: name, rt: rt, cancel: cancel, done: make(chan struct{})}
	c.members.set(name, true)
	go func() {
		defer close(sn.done)
		if err := agent.Run(ctx); err != nil && ctx.Err() == nil {
			c.t.Errorf("agent %s: %v", name, err)
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

// eventually calls fn until it returns nil, failing the test with fn's last
// error after timeout.
func eventually(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not true after %s: %v", timeout, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// consistently calls fn for d and fails the test as soon as it returns an
// error: for "nothing happens" assertions, after a positive convergence.
func consistently(t testing.TB, d time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := fn(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// newDaemonSet is a DaemonSet selecting app=<name>, running imageV1, with a
// RollingUpdate strategy of maxUnavailable 1 (the API's default).
func newDaemonSet(name string) *appsv1.DaemonSet {
	grace := int64(5)
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers:                    []corev1.Container{{Name: "daemon", Image: imageV1}},
				},
			},
		},
	}
	resources.DaemonSets.SetTypeMeta(ds)
	return ds
}

func maxUnavailable(n int) *appsv1.RollingUpdateDaemonSet {
	v := intstr.FromInt32(int32(n))
	return &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &v}
}

func (c *cluster) createDS(ds *appsv1.DaemonSet) *appsv1.DaemonSet {
	c.t.Helper()
	out, err := c.admin.Create(c.ctx, ds, client.WriteOptions{})
	if err != nil {
		c.t.Fatalf("create daemonset %s: %v", ds.Name, err)
	}
	return out.(*appsv1.DaemonSet)
}

func (c *cluster) getDS(name string) *appsv1.DaemonSet {
	c.t.Helper()
	out, err := c.admin.Get(c.ctx, resources.DaemonSets, ns, name)
	if err != nil {
		c.t.Fatalf("get daemonset %s: %v", name, err)
	}
	return out.(*appsv1.DaemonSet)
}

// updateDS applies mutate to the latest DaemonSet, retrying on conflicts.
func (c *cluster) updateDS(name string, mutate func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	c.t.Helper()
	for {
		ds := c.getDS(name)
		mutate(ds)
		out, err := c.admin.Update(c.ctx, ds, client.WriteOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			c.t.Fatalf("update daemonset %s: %v", name, err)
		}
		return out.(*appsv1.DaemonSet)
	}
}

// patchNode applies a strategic-merge patch to a Node (kubectl label/taint).
func (c *cluster) patchNode(name string, patch any) {
	c.t.Helper()
	data, err := json.Marshal(patch)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.admin.Patch(c.ctx, resources.Nodes, "", name, types.StrategicMergePatchType, data, client.WriteOptions{}, ""); err != nil {
		c.t.Fatalf("patch node %s: %v", name, err)
	}
}

// setTaints replaces a Node's taints (retrying on conflicts with its agent).
func (c *cluster) setTaints(name string, taints ...corev1.Taint) {
	c.t.Helper()
	for {
		obj, err := c.admin.Get(c.ctx, resources.Nodes, "", name)
		if err != nil {
			c.t.Fatalf("get node %s: %v", name, err)
		}
		node := obj.(*corev1.Node)
		var keep []corev1.Taint
		for _, tt := range node.Spec.Taints {
			if strings.HasPrefix(tt.Key, "node.kubernetes.io/") {
				keep = append(keep, tt)
			}
		}
		node.Spec.Taints = append(keep, taints...)
		_, err = c.admin.Update(c.ctx, node, client.WriteOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			c.t.Fatalf("update node %s taints: %v", name, err)
		}
		return
	}
}

// pods lists the pods with the label selector.
func (c *cluster) pods(selector string) ([]*corev1.Pod, error) {
	objs, _, err := c.admin.List(c.ctx, resources.Pods, ns, client.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	return out, nil
}

// byNode groups pods by spec.nodeName ("" for unbound ones).
func byNode(pods []*corev1.Pod) map[string][]*corev1.Pod {
	m := map[string][]*corev1.Pod{}
	for _, p := range pods {
		m[p.Spec.NodeName] = append(m[p.Spec.NodeName], p)
	}
	return m
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// runningReady is a pod that runs, is Ready and is not being deleted.
func runningReady(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p)
}

// onePodPerNode checks that exactly the given nodes have exactly one pod of
// the selector each, bound, running, ready, not terminating and (if hash is
// not empty) on that revision; it returns the pods by node.
func (c *cluster) onePodPerNode(selector string, nodes []string, hash string) (map[string]*corev1.Pod, error) {
	pods, err := c.pods(selector)
	if err != nil {
		return nil, err
	}
	grouped := byNode(pods)
	want := map[string]bool{}
	for _, n := range nodes {
		want[n] = true
	}
	out := map[string]*corev1.Pod{}
	for node, ps := range grouped {
		if !want[node] {
			return nil, fmt.Errorf("%d pod(s) on node %q, which should have none (%s)", len(ps), node, podNames(ps))
		}
	}
	for _, n := range nodes {
		ps := grouped[n]
		if len(ps) != 1 {
			return nil, fmt.Errorf("node %s has %d pods (%s), want 1", n, len(ps), podNames(ps))
		}
		p := ps[0]
		if !runningReady(p) {
			return nil, fmt.Errorf("pod %s on %s: phase %s, ready %v, deleting %v", p.Name, n, p.Status.Phase, podReady(p), p.DeletionTimestamp != nil)
		}
		if hash != "" && p.Labels[hashLabel] != hash {
			return nil, fmt.Errorf("pod %s on %s has revision %q, want %q", p.Name, n, p.Labels[hashLabel], hash)
		}
		out[n] = p
	}
	return out, nil
}

func podNames(ps []*corev1.Pod) string {
	var names []string
	for _, p := range ps {
		s := p.Name
		if p.DeletionTimestamp != nil {
			s += "(deleting)"
		}
		names = append(names, s)
	}
	return strings.Join(names, ",")
}

// uids maps node → pod uid.
func uids(m map[string]*corev1.Pod) map[string]types.UID {
	out := make(map[string]types.UID, len(m))
	for n, p := range m {
		out[n] = p.UID
	}
	return out
}

// counts are the status counters a test expects.
type counts struct {
	desired, current, ready, updated, available, misscheduled int32
}

// waitStatus waits until the DaemonSet's status has the counters and has
// observed its current generation; it returns the DaemonSet.
func (c *cluster) waitStatus(name string, want counts) *appsv1.DaemonSet {
	c.t.Helper()
	var ds *appsv1.DaemonSet
	eventually(c.t, waitLong, func() error {
		ds = c.getDS(name)
		s := ds.Status
		got := counts{s.DesiredNumberScheduled, s.CurrentNumberScheduled, s.NumberReady, s.UpdatedNumberScheduled, s.NumberAvailable, s.NumberMisscheduled}
		if got != want {
			return fmt.Errorf("status %s: got %+v, want %+v", name, got, want)
		}
		if s.NumberUnavailable != want.desired-want.available {
			return fmt.Errorf("status %s: numberUnavailable %d, want %d", name, s.NumberUnavailable, want.desired-want.available)
		}
		if s.ObservedGeneration != ds.Generation {
			return fmt.Errorf("status %s: observedGeneration %d, generation %d", name, s.ObservedGeneration, ds.Generation)
		}
		return nil
	})
	return ds
}

// revisions lists the ControllerRevisions of the selector, by revision.
func (c *cluster) revisions(selector string) []*appsv1.ControllerRevision {
	c.t.Helper()
	objs, _, err := c.admin.List(c.ctx, resources.ControllerRevisions, ns, client.ListOptions{LabelSelector: selector})
	if err != nil {
		c.t.Fatalf("list controllerrevisions: %v", err)
	}
	out := make([]*appsv1.ControllerRevision, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*appsv1.ControllerRevision))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out
}

// currentHash waits until the DaemonSet has a ControllerRevision matching
// generation gen's template and returns the highest-numbered revision: the
// current one once the controller has observed the generation.
func (c *cluster) currentRevision(name, selector string) *appsv1.ControllerRevision {
	c.t.Helper()
	var cur *appsv1.ControllerRevision
	eventually(c.t, waitLong, func() error {
		ds := c.getDS(name)
		if ds.Status.ObservedGeneration != ds.Generation {
			return fmt.Errorf("generation %d not observed yet (%d)", ds.Generation, ds.Status.ObservedGeneration)
		}
		revs := c.revisions(selector)
		if len(revs) == 0 {
			return errors.New("no controllerrevisions")
		}
		cur = revs[len(revs)-1]
		return nil
	})
	return cur
}

// nodeNames returns node-0 … node-(n-1).
func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i)
	}
	return out
}

// rolloutWatcher follows the pods of a selector during a rollout in two
// ways and records the worst moments either saw: it polls (lists as fast as
// the API answers) and it watches, re-evaluating the whole pod set after
// every event — the watch delivers every change in etcd order, so no
// intermediate state escapes it.
type rolloutWatcher struct {
	stop  chan struct{}
	done  sync.WaitGroup
	nodes []string

	mu sync.Mutex
	// maxNodesWithoutReady is the largest number of nodes seen at once
	// without a running, ready, non-terminating pod.
	maxNodesWithoutReady int
	worstWithoutReady    string
	// maxPodsOnANode is the most pods (terminating included) seen on one node.
	maxPodsOnANode int
	worstPods      string
	polls, events  int
	errs           []error

	// dsName, when set, is also read each poll: the lowest
	// status.numberAvailable and any desiredNumberScheduled other than
	// len(nodes) are recorded.
	dsName       string
	minAvailable int32
	badDesired   []int32
}

func (c *cluster) watchRollout(selector string, nodes []string) *rolloutWatcher {
	return c.watchRolloutStatus(selector, nodes, "")
}

// watchRolloutStatus is watchRollout that also follows dsName's status.
func (c *cluster) watchRolloutStatus(selector string, nodes []string, dsName string) *rolloutWatcher {
	w := &rolloutWatcher{stop: make(chan struct{}), nodes: nodes, dsName: dsName, minAvailable: int32(len(nodes))}
	// The watch starts from a list, before the poller, so it sees everything.
	objs, rv, err := c.admin.List(c.ctx, resources.Pods, ns, client.ListOptions{LabelSelector: selector})
	if err != nil {
		c.t.Fatalf("rollout watcher: list: %v", err)
	}
	state := map[types.UID]*corev1.Pod{}
	for _, o := range objs {
		state[o.GetUID()] = o.(*corev1.Pod)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	wi, err := c.admin.Watch(ctx, resources.Pods, ns, client.ListOptions{LabelSelector: selector, ResourceVersion: rv})
	if err != nil {
		cancel()
		c.t.Fatalf("rollout watcher: watch: %v", err)
	}
	w.done.Add(2)
	go func() {
		defer w.done.Done()
		defer cancel()
		defer wi.Stop()
		for {
			select {
			case <-w.stop:
				return
			case ev, ok := <-wi.ResultChan():
				if !ok {
					w.mu.Lock()
					w.errs = append(w.errs, errors.New("pod watch ended early"))
					w.mu.Unlock()
					<-w.stop
					return
				}
				p, isPod := ev.Object.(*corev1.Pod)
				if !isPod {
					w.mu.Lock()
					w.errs = append(w.errs, fmt.Errorf("pod watch: %s event with %T", ev.Type, ev.Object))
					w.mu.Unlock()
					continue
				}
				if ev.Type == watch.Deleted {
					delete(state, p.UID)
				} else {
					state[p.UID] = p
				}
				pods := make([]*corev1.Pod, 0, len(state))
				for _, p := range state {
					pods = append(pods, p)
				}
				w.mu.Lock()
				w.events++
				w.observe(pods)
				w.mu.Unlock()
			}
		}
	}()
	go func() {
		defer w.done.Done()
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			if dsName != "" {
				obj, err := c.admin.Get(c.ctx, resources.DaemonSets, ns, dsName)
				if err == nil {
					st := obj.(*appsv1.DaemonSet).Status
					w.mu.Lock()
					w.minAvailable = min(w.minAvailable, st.NumberAvailable)
					if st.DesiredNumberScheduled != int32(len(nodes)) {
						w.badDesired = append(w.badDesired, st.DesiredNumberScheduled)
					}
					w.mu.Unlock()
				}
			}
			pods, err := c.pods(selector)
			w.mu.Lock()
			if err != nil {
				w.errs = append(w.errs, err)
			} else {
				w.polls++
				w.observe(pods)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// observe records the figures of one view of the pods; w.mu is held.
func (w *rolloutWatcher) observe(pods []*corev1.Pod) {
	grouped := byNode(pods)
	without := 0
	var missing []string
	for _, n := range w.nodes {
		ok := false
		for _, p := range grouped[n] {
			if runningReady(p) {
				ok = true
			}
		}
		if !ok {
			without++
			missing = append(missing, n)
		}
		if len(grouped[n]) > w.maxPodsOnANode {
			w.maxPodsOnANode = len(grouped[n])
			w.worstPods = n + ": " + podNames(grouped[n])
		}
	}
	if without > w.maxNodesWithoutReady {
		w.maxNodesWithoutReady = without
		w.worstWithoutReady = strings.Join(missing, ",")
	}
}

// lowestAvailable is the lowest status.numberAvailable seen (after finish).
func (w *rolloutWatcher) lowestAvailable() int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.minAvailable
}

// finish stops polling and returns the figures.
func (w *rolloutWatcher) finish(t testing.TB) (maxWithout, maxPods, polls int) {
	t.Helper()
	close(w.stop)
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) > 0 {
		t.Errorf("rollout watcher: %d list errors, first: %v", len(w.errs), w.errs[0])
	}
	t.Logf("rollout watcher: %d polls, %d watch events; max nodes without a ready pod %d (%s); max pods on a node %d (%s)",
		w.polls, w.events, w.maxNodesWithoutReady, w.worstWithoutReady, w.maxPodsOnANode, w.worstPods)
	if w.dsName != "" {
		t.Logf("rollout watcher: %s status: lowest numberAvailable %d", w.dsName, w.minAvailable)
		if len(w.badDesired) > 0 {
			t.Errorf("rollout watcher: %s desiredNumberScheduled seen as %v during the rollout", w.dsName, w.badDesired)
		}
	}
	return w.maxNodesWithoutReady, w.maxPodsOnANode, w.polls
}

// deletePod deletes a pod as kubectl delete pod does (default grace).
func (c *cluster) deletePod(name string) {
	c.t.Helper()
	if _, err := c.admin.Delete(c.ctx, resources.Pods, ns, name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatalf("delete pod %s: %v", name, err)
	}
}

// podGone reports nil once no pod name with uid (any uid if empty) exists.
func (c *cluster) podGone(name string, uid types.UID) error {
	obj, err := c.admin.Get(c.ctx, resources.Pods, ns, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if uid != "" && obj.GetUID() != uid {
		return nil
	}
	return fmt.Errorf("pod %s (%s) still exists", name, uid)
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
