package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

const (
	// sigkillAgents is the number of agent processes (nodes).
	sigkillAgents = 4
	// sigkillIterations is the number of rolling updates, each interrupted
	// by one SIGKILL of the server.
	sigkillIterations = 20
	// sigkillMaxKillDelay bounds the time between a template change and
	// the SIGKILL.
	sigkillMaxKillDelay = 1500 * time.Millisecond
	// sigkillRolloutWait bounds one iteration, from the template change to
	// the completed rollout (it includes the restart and the agents'
	// reconnection back-off).
	sigkillRolloutWait = 60 * time.Second
	// sigkillName is the DaemonSet (and its app label).
	sigkillName     = "sigkill"
	sigkillSelector = "app=" + sigkillName
	// sigkillSeedEnv, when set, replaces the time-based seed of the kill
	// points, to replay a failure (as far as timing allows).
	sigkillSeedEnv = "EVERYNODE_SIGKILL_SEED"
	// sigkillTraceEnv, when set, logs every iteration's trace (what the
	// watcher saw, with times since the template change), not only a
	// failed one's.
	sigkillTraceEnv = "EVERYNODE_SIGKILL_TRACE"
)

// TestSIGKILLServerDuringRollout is issue 3's crash test, with processes:
// an "everynode server --no-agent" and four "everynode agent --runtime
// fake" processes. Twenty times, once the server's controllers lead, the
// DaemonSet's template changes (the strategy alternates between
// maxUnavailable=1 and maxSurge=1 with maxUnavailable=0) and the server is
// killed with SIGKILL at a random point of the rollout (controllers, API
// and embedded etcd die together, nothing is flushed or resigned), then
// restarted on the same data dir and addresses. The agents stay up, go
// offline and reconnect. An independent watcher, which re-lists after
// every reconnect, checks every state it observes: never two pods of one
// controller-revision-hash on a node, never more than 1+maxSurge pods on a
// node (terminating pods counted, so a replacement started before its
// predecessor is gone counts too). Each rollout must complete: every node
// runs exactly one ready pod of the newest revision and the status says so
// for the current generation.
//
// The kill point is drawn (seeded, the seed is logged) as a number of the
// rollout's pod events, 0 to all of them, plus 0–20 ms, and at most 1.5 s
// after the change: on the fake runtime a whole rollout of four nodes takes
// about 100 ms, so a plain random delay would mostly hit a finished one.
// The restarted server keeps its identity (DIR/server-id) and releases the
// crashed incarnation's election key at once, so the controllers lead again
// within about a second; most of each iteration is the agents' reconnection
// back-off after the API returns.
func TestSIGKILLServerDuringRollout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs 20 server crashes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(sigkillSeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", sigkillSeedEnv, s, err)
		}
		seed = v
	}
	t.Logf("seed %d (%s=%d replays the kill points)", seed, sigkillSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	bin := buildEverynode(t)
	dir := t.TempDir()
	srv := &sigkillServer{bin: bin, dataDir: filepath.Join(dir, "server"),
		listen: sigkillFreeAddr(t), gossip: sigkillFreeAddr(t)}
	srv.start(t)
	admin, url := adminFromKubeconfig(t, srv.kubeconfig())
	token, err := os.ReadFile(filepath.Join(srv.dataDir, "join-token"))
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]string, sigkillAgents)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("sk-node-%d", i)
		startProc(t, nodes[i], bin, "agent", "--server", url, "--token", strings.TrimSpace(string(token)),
			"--name", nodes[i], "--runtime", "fake", "--data-dir", filepath.Join(dir, nodes[i]),
			"--gossip", "127.0.0.1:0", "--gossip-profile", "local", "--log-listen", "127.0.0.1:0", "--log-level", "warn")
	}
	ctx := context.Background()

	// The first rollout is an ordinary creation, without a crash.
	ds := newDaemonSet(sigkillName)
	sigkillStrategy(ds, 0)
	ds.Spec.Template.Spec.Containers[0].Image = sigkillImage(0)
	if _, err := admin.Create(ctx, ds, client.WriteOptions{}); err != nil {
		t.Fatalf("create daemonset: %v", err)
	}
	if _, err := sigkillWaitRollout(ctx, admin, nodes, sigkillImage(0), 2*sigkillRolloutWait); err != nil {
		t.Fatalf("initial rollout: %v\n%s", err, sigkillDump(ctx, admin))
	}
	revision, err := sigkillCheckHistory(ctx, admin, 0)
	if err != nil {
		t.Fatalf("initial rollout: %v\n%s", err, sigkillDump(ctx, admin))
	}

	w := newSigkillWatcher(admin, nodes)
	wctx, stopWatcher := context.WithCancel(ctx)
	go w.run(wctx)
	t.Cleanup(func() {
		stopWatcher()
		<-w.done
	})

	if err := srv.waitLeading(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	var killDelays, restarts, leads, rollouts []time.Duration
	midRollout := 0
	for i := 1; i <= sigkillIterations; i++ {
		bound := 1
		if i%2 == 1 {
			bound = 2 // maxSurge 1
		}
		w.begin(i, bound)
		image := sigkillImage(i)
		// The kill point: after a random number of the rollout's pod
		// events (a node's replacement is four: deletion requested, pod
		// gone, new pod created, new pod ready; in surge order for
		// maxSurge), plus a random jitter, and at most sigkillMaxKillDelay
		// after the template change.
		afterEvents := rng.IntN(4*sigkillAgents + 1)
		jitter := time.Duration(rng.IntN(21)) * time.Millisecond
		updated := time.Now()
		if err := sigkillUpdate(ctx, admin, func(ds *appsv1.DaemonSet) {
			sigkillStrategy(ds, i)
			ds.Spec.Template.Spec.Containers[0].Image = image
		}); err != nil {
			t.Fatalf("iteration %d: %v", i, err)
		}
		w.waitEvents(afterEvents, updated.Add(sigkillMaxKillDelay))
		// A random point of the rollout, not an assertion.
		time.Sleep(min(jitter, time.Until(updated.Add(sigkillMaxKillDelay))))
		killedAt := time.Since(updated)
		progress, complete := w.progress(image)
		if !complete {
			midRollout++
		}
		w.mark("SIGKILL of server run %d", srv.runs)
		srv.kill(t)
		restartBegan := time.Now()
		srv.start(t)
		apiBack := time.Since(restartBegan)
		w.mark("server run %d: API ready", srv.runs)
		if err := srv.waitLeading(sigkillRolloutWait); err != nil {
			t.Fatalf("iteration %d: %v", i, err)
		}
		leading := time.Since(restartBegan)
		w.mark("server run %d: controllers leading", srv.runs)
		pods, err := sigkillWaitRollout(ctx, admin, nodes, image, sigkillRolloutWait-time.Since(updated))
		if err != nil {
			t.Fatalf("iteration %d (seed %d, %s, killed %s after the update): rollout did not complete within %s: %v\n%s\nwatcher's trace:\n%s",
				i, seed, sigkillStrategyName(i), killedAt.Round(time.Millisecond), sigkillRolloutWait, err, sigkillDump(ctx, admin), w.traced())
		}
		done := time.Since(updated)
		if revision, err = sigkillCheckHistory(ctx, admin, revision); err != nil {
			t.Errorf("iteration %d (seed %d): %v\n%s", i, seed, err, sigkillDump(ctx, admin))
		}
		if err := w.caughtUp(pods, 20*time.Second); err != nil {
			t.Fatalf("iteration %d: %v\ntrace:\n%s", i, err, w.traced())
		}
		st := w.end()
		if os.Getenv(sigkillTraceEnv) != "" {
			t.Logf("iteration %d trace (killed at %s):\n%s", i, killedAt.Round(time.Millisecond), w.traced())
		}
		t.Logf("iteration %2d %-18s killed %5s after the update (%2d events + %2dms: %s); restart: API %5s, leading %6s; rollout complete %6s after the update; watcher: max %d pod(s) on a node, max %d node(s) without a ready pod",
			i, sigkillStrategyName(i), killedAt.Round(time.Millisecond), afterEvents, jitter.Milliseconds(), progress,
			apiBack.Round(10*time.Millisecond), leading.Round(10*time.Millisecond),
			done.Round(10*time.Millisecond), st.maxPods, st.maxWithoutReady)
		killDelays, restarts, leads, rollouts = append(killDelays, killedAt), append(restarts, apiBack), append(leads, leading), append(rollouts, done)
		if v := w.violationsSoFar(); len(v) > 0 {
			t.Fatalf("iteration %d (seed %d): invariant violated:\n%s\n%s\nwatcher's trace:\n%s", i, seed, strings.Join(v, "\n"), sigkillDump(ctx, admin), w.traced())
		}
	}
	stopWatcher()
	<-w.done
	t.Logf("%d crashes (%d in mid-rollout) in %s; kill points %s; restart → API ready %s; restart → controllers leading %s; rollout (update → complete, crash included) %s; watcher: %d list(s), %d watch resume(s), %d event(s)",
		sigkillIterations, midRollout, time.Since(started).Round(100*time.Millisecond), sigkillSpread(killDelays), sigkillSpread(restarts),
		sigkillSpread(leads), sigkillSpread(rollouts), w.lists, w.resumes, w.events)
	if v := w.violationsSoFar(); len(v) > 0 {
		t.Fatalf("invariant violated (seed %d):\n%s", seed, strings.Join(v, "\n"))
	}
	// Old revisions are cleaned up to revisionHistoryLimit (default 10)
	// plus the current one.
	t.Cleanup(func() { // before the server stops
		if t.Failed() {
			t.Log(sigkillDump(ctx, admin))
		}
	})
	eventually(t, 10*time.Second, func() error {
		revs, _, err := admin.List(ctx, resources.ControllerRevisions, ns, client.ListOptions{LabelSelector: sigkillSelector})
		if err != nil || len(revs) > 11 {
			return fmt.Errorf("%d ControllerRevisions (%v), want at most 11", len(revs), err)
		}
		return nil
	})
}

// sigkillCheckHistory checks the history after a completed rollout to a
// new template: exactly one ControllerRevision per hash, the newest one
// numbered prev+1, and no hash collision counted (a revision the crashed
// incarnation created is the restarted one's, not a collision). It returns
// the newest revision number.
func sigkillCheckHistory(ctx context.Context, c client.Interface, prev int64) (int64, error) {
	obj, err := c.Get(ctx, resources.DaemonSets, ns, sigkillName)
	if err != nil {
		return prev, err
	}
	if cc := obj.(*appsv1.DaemonSet).Status.CollisionCount; cc != nil && *cc != 0 {
		return prev, fmt.Errorf("status.collisionCount %d, want 0", *cc)
	}
	revs, _, err := c.List(ctx, resources.ControllerRevisions, ns, client.ListOptions{LabelSelector: sigkillSelector})
	if err != nil {
		return prev, err
	}
	byHash := map[string][]string{}
	newest := int64(0)
	for _, o := range revs {
		cr := o.(*appsv1.ControllerRevision)
		byHash[cr.Labels[hashLabel]] = append(byHash[cr.Labels[hashLabel]], fmt.Sprintf("%s(%d)", cr.Name, cr.Revision))
		newest = max(newest, cr.Revision)
	}
	for hash, names := range byHash {
		if len(names) > 1 {
			return prev, fmt.Errorf("%d ControllerRevisions of hash %s: %v", len(names), hash, names)
		}
	}
	if newest != prev+1 {
		return newest, fmt.Errorf("newest ControllerRevision is number %d, want %d", newest, prev+1)
	}
	return newest, nil
}

// sigkillImage is iteration i's image: every iteration a new template.
func sigkillImage(i int) string { return fmt.Sprintf("example/daemon:crash-%d", i) }

// sigkillStrategy sets iteration i's strategy: odd iterations surge
// (maxSurge 1, maxUnavailable 0), even ones maxUnavailable 1.
func sigkillStrategy(ds *appsv1.DaemonSet, i int) {
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	ru := &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &one, MaxSurge: &zero}
	if i%2 == 1 {
		ru = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &zero, MaxSurge: &one}
	}
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: ru}
}

func sigkillStrategyName(i int) string {
	if i%2 == 1 {
		return "(maxSurge=1)"
	}
	return "(maxUnavailable=1)"
}

// sigkillUpdate applies mutate to the DaemonSet, retrying conflicts.
func sigkillUpdate(ctx context.Context, c client.Interface, mutate func(*appsv1.DaemonSet)) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		obj, err := c.Get(ctx, resources.DaemonSets, ns, sigkillName)
		if err == nil {
			ds := obj.(*appsv1.DaemonSet)
			mutate(ds)
			if _, err = c.Update(ctx, ds, client.WriteOptions{}); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("update daemonset %s: %w", sigkillName, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sigkillWaitRollout polls until the rollout to image is complete (see
// sigkillRolledOut) and returns the pods; errors of a server that is down
// or starting are retried until within ends.
func sigkillWaitRollout(ctx context.Context, c client.Interface, nodes []string, image string, within time.Duration) ([]*corev1.Pod, error) {
	deadline := time.Now().Add(within)
	for {
		pods, err := sigkillRolledOut(ctx, c, nodes, image)
		if err == nil {
			return pods, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sigkillRolledOut reports nil when the status has observed the current
// generation with every counter at len(nodes), and every node runs exactly
// one pod (terminating ones counted), running, ready, with image and the
// newest ControllerRevision's hash.
func sigkillRolledOut(ctx context.Context, c client.Interface, nodes []string, image string) ([]*corev1.Pod, error) {
	obj, err := c.Get(ctx, resources.DaemonSets, ns, sigkillName)
	if err != nil {
		return nil, err
	}
	ds := obj.(*appsv1.DaemonSet)
	s, n := ds.Status, int32(len(nodes))
	if s.ObservedGeneration != ds.Generation {
		return nil, fmt.Errorf("status: observedGeneration %d, generation %d", s.ObservedGeneration, ds.Generation)
	}
	if s.DesiredNumberScheduled != n || s.CurrentNumberScheduled != n || s.UpdatedNumberScheduled != n ||
		s.NumberReady != n || s.NumberAvailable != n || s.NumberMisscheduled != 0 || s.NumberUnavailable != 0 {
		return nil, fmt.Errorf("status: desired %d current %d updated %d ready %d available %d unavailable %d misscheduled %d, want %d each (0 for the last two)",
			s.DesiredNumberScheduled, s.CurrentNumberScheduled, s.UpdatedNumberScheduled, s.NumberReady, s.NumberAvailable,
			s.NumberUnavailable, s.NumberMisscheduled, n)
	}
	revs, _, err := c.List(ctx, resources.ControllerRevisions, ns, client.ListOptions{LabelSelector: sigkillSelector})
	if err != nil {
		return nil, err
	}
	var newest *appsv1.ControllerRevision
	for _, o := range revs {
		if cr := o.(*appsv1.ControllerRevision); newest == nil || cr.Revision > newest.Revision {
			newest = cr
		}
	}
	if newest == nil {
		return nil, errors.New("no ControllerRevisions")
	}
	hash := newest.Labels[hashLabel]
	objs, _, err := c.List(ctx, resources.Pods, ns, client.ListOptions{LabelSelector: sigkillSelector})
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		pods = append(pods, o.(*corev1.Pod))
	}
	grouped := byNode(pods)
	if len(grouped) != len(nodes) {
		return nil, fmt.Errorf("pods on %d node(s), want %d: %s", len(grouped), len(nodes), sigkillPods(pods))
	}
	for _, node := range nodes {
		ps := grouped[node]
		if len(ps) != 1 {
			return nil, fmt.Errorf("node %s has %d pods: %s", node, len(ps), sigkillPods(ps))
		}
		p := ps[0]
		if !runningReady(p) || p.Labels[hashLabel] != hash || p.Spec.Containers[0].Image != image {
			return nil, fmt.Errorf("node %s: want one running ready pod of revision %s (%s), have %s", node, hash, image, sigkillPods(ps))
		}
	}
	return pods, nil
}

// sigkillPods describes pods: name[hash,phase,ready,deleting].
func sigkillPods(ps []*corev1.Pod) string {
	sorted := append([]*corev1.Pod(nil), ps...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Spec.NodeName != sorted[j].Spec.NodeName {
			return sorted[i].Spec.NodeName < sorted[j].Spec.NodeName
		}
		return sorted[i].CreationTimestamp.Before(&sorted[j].CreationTimestamp)
	})
	var out []string
	for _, p := range sorted {
		s := fmt.Sprintf("%s@%s[%s %s ready=%v", p.Name, p.Spec.NodeName, p.Labels[hashLabel], p.Status.Phase, podReady(p))
		if p.DeletionTimestamp != nil {
			s += " deleting"
		}
		out = append(out, s+"]")
	}
	return strings.Join(out, " ")
}

// sigkillDump is the cluster state for a failure message.
func sigkillDump(ctx context.Context, c client.Interface) string {
	var b strings.Builder
	if obj, err := c.Get(ctx, resources.DaemonSets, ns, sigkillName); err != nil {
		fmt.Fprintf(&b, "daemonset: %v\n", err)
	} else {
		ds := obj.(*appsv1.DaemonSet)
		fmt.Fprintf(&b, "daemonset generation %d status %+v\n", ds.Generation, ds.Status)
	}
	if objs, _, err := c.List(ctx, resources.Pods, ns, client.ListOptions{LabelSelector: sigkillSelector}); err != nil {
		fmt.Fprintf(&b, "pods: %v\n", err)
	} else {
		pods := make([]*corev1.Pod, 0, len(objs))
		for _, o := range objs {
			pods = append(pods, o.(*corev1.Pod))
		}
		fmt.Fprintf(&b, "pods: %s\n", sigkillPods(pods))
	}
	if objs, _, err := c.List(ctx, resources.ControllerRevisions, ns, client.ListOptions{LabelSelector: sigkillSelector}); err != nil {
		fmt.Fprintf(&b, "controllerrevisions: %v\n", err)
	} else {
		for _, o := range objs {
			cr := o.(*appsv1.ControllerRevision)
			fmt.Fprintf(&b, "controllerrevision %s revision %d hash %s\n", cr.Name, cr.Revision, cr.Labels[hashLabel])
		}
	}
	if objs, _, err := c.List(ctx, resources.Nodes, "", client.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "nodes: %v\n", err)
	} else {
		for _, o := range objs {
			n := o.(*corev1.Node)
			var taints []string
			for _, tt := range n.Spec.Taints {
				taints = append(taints, tt.Key+":"+string(tt.Effect))
			}
			fmt.Fprintf(&b, "node %s ready=%s taints=%v\n", n.Name, nodeReady(n), taints)
		}
	}
	return b.String()
}

// sigkillSpread summarizes durations: min / median / max.
func sigkillSpread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return fmt.Sprintf("min %s / median %s / max %s", r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]))
}

// sigkillFreeAddr returns a loopback host:port that was free (TCP and
// UDP, for gossip) a moment ago.
func sigkillFreeAddr(t *testing.T) string {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err == nil {
			pc.Close()
			return addr
		}
	}
	t.Fatal("no free TCP+UDP loopback port")
	return ""
}

// sigkillServer is the server process, restarted on fixed addresses.
type sigkillServer struct {
	bin, dataDir, listen, gossip string
	runs                         int
	proc                         *wiringProc
}

func (s *sigkillServer) kubeconfig() string { return filepath.Join(s.dataDir, "admin.kubeconfig") }

// start runs a new server process and waits until its API is ready (it
// writes admin.kubeconfig then).
func (s *sigkillServer) start(t *testing.T) {
	t.Helper()
	// A kubeconfig of the previous run would look like readiness.
	if err := os.Remove(s.kubeconfig()); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	s.runs++
	s.proc = startProc(t, fmt.Sprintf("server (run %d)", s.runs), s.bin, "server", "--no-agent",
		"--data-dir", s.dataDir, "--listen", s.listen, "--gossip", s.gossip, "--gossip-profile", "local", "--log-level", "info")
	s.proc.waitFile(t, s.kubeconfig(), 60*time.Second)
}

// waitLeading waits until the server's controllers run: it has won the
// election, which after a crash means the dead incarnation's lease
// expired.
func (s *sigkillServer) waitLeading(within time.Duration) error {
	deadline := time.Now().Add(within)
	for !strings.Contains(s.proc.out.String(), "leading: controllers start") {
		if time.Now().After(deadline) {
			return fmt.Errorf("server run %d: controllers not leading after %s", s.runs, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *sigkillServer) kill(t *testing.T) {
	t.Helper()
	if err := s.proc.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill server: %v", err)
	}
	err := <-s.proc.done
	s.proc.done <- err // the cleanup's stop sees the process has exited
}

// sigkillWatcher follows the DaemonSet's pods through server crashes and
// checks every state it observes.
type sigkillWatcher struct {
	c     client.Interface
	nodes []string
	done  chan struct{}

	mu    sync.Mutex
	state map[types.UID]*corev1.Pod
	iter  int
	bound int // most pods allowed on a node: 1 + maxSurge
	stats sigkillStats
	// began is when the iteration began; trace lists what the watcher
	// saw since (the iteration's story, shown on failure).
	began time.Time
	trace []string
	// iterEvents counts the iteration's pod events.
	iterEvents int
	// violations are the first invariant violations seen.
	violations             []string
	lists, resumes, events int
}

// sigkillStats are one iteration's worst moments.
type sigkillStats struct {
	maxPods, maxWithoutReady int
}

func newSigkillWatcher(c client.Interface, nodes []string) *sigkillWatcher {
	return &sigkillWatcher{c: c, nodes: nodes, done: make(chan struct{}), bound: 1}
}

// begin starts iteration i, whose bound is the most pods a node may have.
func (w *sigkillWatcher) begin(i, bound int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.iter, w.bound, w.stats, w.began, w.trace, w.iterEvents = i, bound, sigkillStats{}, time.Now(), nil, 0
}

// waitEvents waits until the iteration has seen n pod events, or until
// the deadline.
func (w *sigkillWatcher) waitEvents(n int, deadline time.Time) {
	for time.Now().Before(deadline) {
		w.mu.Lock()
		seen := w.iterEvents
		w.mu.Unlock()
		if seen >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// traced returns the iteration's trace.
func (w *sigkillWatcher) traced() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.trace, "\n")
}

// mark adds a test step to the trace.
func (w *sigkillWatcher) mark(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.note("--- "+format, args...)
}

// note adds a line to the trace; w.mu is held.
func (w *sigkillWatcher) note(format string, args ...any) {
	if len(w.trace) < 400 {
		w.trace = append(w.trace, fmt.Sprintf("%8s ", time.Since(w.began).Round(time.Millisecond))+fmt.Sprintf(format, args...))
	}
}

// end returns the iteration's worst moments.
func (w *sigkillWatcher) end() sigkillStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

func (w *sigkillWatcher) violationsSoFar() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.violations...)
}

// progress describes how far the rollout to image is in the watcher's
// latest state: nodes done (only a running, ready pod of image) and pods
// of image created.
func (w *sigkillWatcher) progress(image string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pods := make([]*corev1.Pod, 0, len(w.state))
	created := 0
	for _, p := range w.state {
		pods = append(pods, p)
		if p.Spec.Containers[0].Image == image {
			created++
		}
	}
	grouped := byNode(pods)
	done := 0
	for _, node := range w.nodes {
		if ps := grouped[node]; len(ps) == 1 && runningReady(ps[0]) && ps[0].Spec.Containers[0].Image == image {
			done++
		}
	}
	if done == len(w.nodes) {
		return "rollout already complete", true
	}
	return fmt.Sprintf("%d new pod(s), %d/%d node(s) done", created, done, len(w.nodes)), false
}

// caughtUp waits until the watcher's state holds exactly the pods (by
// uid), so no event of the finished iteration is judged by the next one's
// bound.
func (w *sigkillWatcher) caughtUp(pods []*corev1.Pod, within time.Duration) error {
	want := map[types.UID]bool{}
	for _, p := range pods {
		want[p.UID] = true
	}
	deadline := time.Now().Add(within)
	for {
		w.mu.Lock()
		same := len(w.state) == len(want)
		for uid := range w.state {
			same = same && want[uid]
		}
		have := len(w.state)
		w.mu.Unlock()
		if same {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("watcher did not catch up within %s: it holds %d pods, the completed rollout %d", within, have, len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run lists, then watches from the list (or from the last event after a
// broken watch: the server then replays what happened since, or answers
// 410 and the watcher lists again), until ctx ends. Every list and every
// event is checked.
func (w *sigkillWatcher) run(ctx context.Context) {
	defer close(w.done)
	rv := ""
	pause := func() {
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	for ctx.Err() == nil {
		listed := rv == ""
		if listed {
			objs, listRV, err := w.c.List(ctx, resources.Pods, ns, client.ListOptions{LabelSelector: sigkillSelector})
			if err != nil {
				pause()
				continue
			}
			state := make(map[types.UID]*corev1.Pod, len(objs))
			for _, o := range objs {
				state[o.GetUID()] = o.(*corev1.Pod)
			}
			w.mu.Lock()
			w.state = state
			w.lists++
			w.note("list at rv %s: %s", listRV, sigkillPods(sigkillValues(state)))
			w.check("list at rv " + listRV)
			w.mu.Unlock()
			rv = listRV
		}
		wi, err := w.c.Watch(ctx, resources.Pods, ns, client.ListOptions{LabelSelector: sigkillSelector, ResourceVersion: rv})
		if err != nil {
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				rv = ""
			}
			pause()
			continue
		}
		if !listed {
			w.mu.Lock()
			w.resumes++
			w.note("watch resumed from rv %s", rv)
			w.mu.Unlock()
		}
		rv = w.follow(ctx, wi, rv)
		wi.Stop()
	}
}

// follow applies the watch's events and returns the resourceVersion to
// resume from ("" to list again).
func (w *sigkillWatcher) follow(ctx context.Context, wi watch.Interface, rv string) string {
	for {
		select {
		case <-ctx.Done():
			return rv
		case ev, ok := <-wi.ResultChan():
			if !ok {
				w.mu.Lock()
				w.note("watch ended")
				w.mu.Unlock()
				return rv
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if ev.Type == watch.Error || !isPod {
				w.mu.Lock()
				w.note("watch %s event (%T): list again", ev.Type, ev.Object)
				w.mu.Unlock()
				return "" // 410 Gone or a broken stream: list again
			}
			if ev.Type == watch.Bookmark {
				rv = p.ResourceVersion
				continue
			}
			w.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(w.state, p.UID)
			} else {
				w.state[p.UID] = p
			}
			w.events++
			w.iterEvents++
			w.note("%s %s", ev.Type, sigkillPods([]*corev1.Pod{p}))
			w.check(fmt.Sprintf("%s %s rv %s", ev.Type, p.Name, p.ResourceVersion))
			w.mu.Unlock()
			if p.ResourceVersion != "" {
				rv = p.ResourceVersion
			}
		}
	}
}

func sigkillValues(m map[types.UID]*corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	return out
}

// check judges the current state; w.mu is held.
func (w *sigkillWatcher) check(after string) {
	pods := make([]*corev1.Pod, 0, len(w.state))
	for _, p := range w.state {
		pods = append(pods, p)
	}
	grouped := byNode(pods)
	without := 0
	for _, node := range w.nodes {
		ps := grouped[node]
		w.stats.maxPods = max(w.stats.maxPods, len(ps))
		ready := false
		perHash := map[string]int{}
		for _, p := range ps {
			ready = ready || runningReady(p)
			perHash[p.Labels[hashLabel]]++
		}
		if !ready {
			without++
		}
		var bad []string
		if len(ps) > w.bound {
			bad = append(bad, fmt.Sprintf("%d pods (bound %d)", len(ps), w.bound))
		}
		for hash, n := range perHash {
			if n > 1 {
				bad = append(bad, fmt.Sprintf("%d pods of revision %s", n, hash))
			}
		}
		if len(bad) > 0 && len(w.violations) < 20 {
			w.violations = append(w.violations, fmt.Sprintf("iteration %d, after %s: node %s has %s: %s",
				w.iter, after, node, strings.Join(bad, " and "), sigkillPods(ps)))
		}
	}
	w.stats.maxWithoutReady = max(w.stats.maxWithoutReady, without)
}
