package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/rollout"
)

// daemonSetTarget parses the one DaemonSet a rollout verb acts on
// ("ds/NAME", "ds NAME", "daemonset.apps/NAME").
func daemonSetTarget(verb string, pos []string) (string, error) {
	if len(pos) == 0 {
		return "", usageError("required resource not specified", fmt.Sprintf("use \"everynode rollout %s ds/NAME\"", verb))
	}
	r, names, err := splitKindNames(pos)
	if err != nil {
		return "", err
	}
	if r != resources.DaemonSets {
		return "", usageError(fmt.Sprintf("no %s viewer has been implemented for %s", verb, r.Kind),
			"everynode rolls out DaemonSets only: use ds/NAME")
	}
	if len(names) != 1 {
		return "", usageError(fmt.Sprintf("rollout %s takes exactly one DaemonSet, got %d", verb, len(names)), "name one DaemonSet")
	}
	return names[0], nil
}

// RolloutStatusCommand is "everynode rollout status ds/NAME".
type RolloutStatusCommand struct {
	main *Main

	clientFlags
	watch    bool
	timeout  time.Duration
	progress bool
	// table: --nodes was given, so a table of every targeted node is
	// drawn (rollout_nodes.go) instead of a line per pod change.
	table    bool
	lastDraw time.Time // when runTable drew its last block
	name     string
	fs       *pflag.FlagSet
}

func (c *RolloutStatusCommand) flags(fs *pflag.FlagSet) {
	c.fs = fs
	fs.BoolVarP(&c.watch, "watch", "w", true, "wait until the rollout finishes, redrawing the --nodes table (false: print the status once)")
	fs.DurationVar(&c.timeout, "timeout", 0, "give up after this long (0: wait forever)")
	fs.BoolVar(&c.progress, "nodes", true, "given: a table of every targeted node's revision, state and reason, problems first; "+
		"not given: a line per node as its pod changes; false: kubectl's lines only")
}

func (c *RolloutStatusCommand) complete(pos []string) error {
	var err error
	c.name, err = daemonSetTarget("status", pos)
	c.table = c.progress && c.fs != nil && c.fs.Changed("nodes")
	return err
}

// Run implements the command.
func (c *RolloutStatusCommand) Run(ctx context.Context, std IO) error {
	return c.withClient(ctx, c.main, std.Out, c.run)
}

// daemonSetStatus is kubectl's DaemonSet status viewer, verbatim: the line
// to print and whether the rollout is done.
func daemonSetStatus(ds *appsv1.DaemonSet) (string, bool, error) {
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		return "", true, fmt.Errorf("rollout status is only available for %s strategy type", appsv1.RollingUpdateStatefulSetStrategyType)
	}
	if ds.Generation <= ds.Status.ObservedGeneration {
		if ds.Status.UpdatedNumberScheduled < ds.Status.DesiredNumberScheduled {
			return fmt.Sprintf("Waiting for daemon set %q rollout to finish: %d out of %d new pods have been updated...\n", ds.Name, ds.Status.UpdatedNumberScheduled, ds.Status.DesiredNumberScheduled), false, nil
		}
		if ds.Status.NumberAvailable < ds.Status.DesiredNumberScheduled {
			return fmt.Sprintf("Waiting for daemon set %q rollout to finish: %d of %d updated pods are available...\n", ds.Name, ds.Status.NumberAvailable, ds.Status.DesiredNumberScheduled), false, nil
		}
		return fmt.Sprintf("daemon set %q successfully rolled out\n", ds.Name), true, nil
	}
	return "Waiting for daemon set spec update to be observed...\n", false, nil
}

// rolloutStatus is daemonSetStatus with everynode's rollout settings
// (docs/rollouts.md). A paused rollout keeps waiting, as kubectl waits on a
// paused Deployment (--timeout bounds it). A canary or partition whose nodes
// are all updated and available is done — "canary: 3/3 updated and ready;
// waiting for promote" — as kubectl's StatefulSet viewer is done with a
// partitioned rollout ("partitioned roll out complete"): the rollout went as
// far as it was told to. A rollout whose condition says it failed
// (ProgressDeadlineExceeded, RolledBack, BadRevision) is an error naming
// the reason and the fix, so the command exits non-zero. A rollout complete
// on the reachable nodes says which unreachable nodes are still pending.
func rolloutStatus(ds *appsv1.DaemonSet) (string, bool, error) {
	st := ds.Status
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ds.Generation > st.ObservedGeneration {
		return daemonSetStatus(ds)
	}
	opts, errs := rollout.Parse(ds.Annotations)
	finished := st.UpdatedNumberScheduled >= st.DesiredNumberScheduled && st.NumberAvailable >= st.DesiredNumberScheduled
	cond := rollout.Condition(st, rollout.ConditionProgressing)
	if rollout.Failed(cond) {
		return "", true, rolloutFailed(ds.Name, cond)
	}
	switch {
	case finished && cond != nil && cond.Reason == rollout.ReasonUnreachablePending:
		// Complete on the reachable nodes; the status counts only them
		// (docs/rollouts.md §7).
		return fmt.Sprintf("daemon set %q successfully %s\n", ds.Name, cond.Message), true, nil
	case finished:
	case len(errs) > 0:
		return fmt.Sprintf("Waiting for daemon set %q rollout: held by an invalid rollout annotation: %v\n", ds.Name, errs.ToAggregate()), false, nil
	case opts.Paused:
		return fmt.Sprintf("Waiting for daemon set %q rollout to finish: paused with %d out of %d new pods updated; resume it with \"everynode rollout resume ds/%s\"\n",
			ds.Name, st.UpdatedNumberScheduled, st.DesiredNumberScheduled, ds.Name), false, nil
	case cond != nil && cond.Reason == rollout.ReasonPrePulling:
		return fmt.Sprintf("Waiting for daemon set %q rollout: %s\n", ds.Name, cond.Message), false, nil
	case opts.Limited() && cond != nil && cond.Reason == rollout.ReasonWaitingForPromote:
		return cond.Message + "\n", true, nil
	case opts.Limited() && cond != nil && cond.Reason == rollout.ReasonCanaryUpdating:
		return fmt.Sprintf("Waiting for daemon set %q canary to finish: %s\n", ds.Name, cond.Message), false, nil
	}
	return daemonSetStatus(ds)
}

// rolloutFailed is the error of a rollout whose Progressing condition says
// it failed (docs/rollouts.md §5, §6): the reason, the controller's message
// and the fix, on one line.
func rolloutFailed(name string, c *appsv1.DaemonSetCondition) error {
	switch c.Reason {
	case rollout.ReasonRolledBack:
		return withFix(fmt.Errorf("daemon set %q rollout failed and was rolled back automatically (%s): %s", name, c.Reason, c.Message),
			"fix the template and apply it again: the failed revision is not rolled out again until its template changes")
	case rollout.ReasonBadRevision:
		return withFix(fmt.Errorf("daemon set %q rollout held (%s): %s", name, c.Reason, c.Message),
			fmt.Sprintf("change the template, or retry it with \"everynode annotate ds/%s %s-\"", name, rollout.BadRevision))
	}
	return withFix(fmt.Errorf("daemon set %q rollout failed (%s): %s", name, c.Reason, c.Message),
		fmt.Sprintf("roll it back with \"everynode rollout undo ds/%s\", or fix the template and apply it again", name))
}

// maxPodWatchRestarts bounds how often in a row the pod watch behind the
// per-node lines is restarted without delivering an event.
const maxPodWatchRestarts = 5

// errRolloutTimeout is kubectl's message when --timeout passes.
var errRolloutTimeout = errors.New("timed out waiting for the condition")

// run watches the DaemonSet (and, for the per-node lines, its pods) until
// the status viewer says done, printing each new status line.
func (c *RolloutStatusCommand) run(ctx context.Context, h client.Interface, out io.Writer) error {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	if c.table {
		return c.runTable(ctx, h, out)
	}
	ns := c.ns()
	obj, err := h.Get(ctx, resources.DaemonSets, ns, c.name)
	if err != nil {
		return timeoutOr(ctx, err)
	}
	ds := obj.(*appsv1.DaemonSet)
	p := &rolloutPrinter{out: out, progress: c.progress}
	line, done, err := rolloutStatus(ds)
	if err != nil {
		return err
	}
	p.status(line)
	if done || !c.watch {
		return nil
	}
	dsW, err := h.Watch(ctx, resources.DaemonSets, ns, client.ListOptions{FieldSelector: "metadata.name=" + c.name, ResourceVersion: ds.ResourceVersion})
	if err != nil {
		return timeoutOr(ctx, err)
	}
	defer func() { dsW.Stop() }()
	var podW watch.Interface
	var podEvents <-chan watch.Event
	defer func() {
		if podW != nil {
			podW.Stop()
		}
	}()
	podSelector := ""
	// watchPods (re)starts the pod watch from the current state; the tracker
	// drops lines it printed already. The per-node lines are best effort.
	watchPods := func() {
		if podW != nil {
			podW.Stop()
		}
		podW, podEvents = nil, nil
		w, err := h.Watch(ctx, resources.Pods, ns, client.ListOptions{LabelSelector: podSelector, ResourceVersion: "0"})
		if err == nil {
			podW, podEvents = w, w.ResultChan()
		}
	}
	podRestarts := 0
	tracker := newNodeTracker()
	if c.progress {
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil {
			return fmt.Errorf("daemon set %q has an invalid selector: %w", ds.Name, err)
		}
		podSelector = sel.String()
		watchPods()
		tracker.observe(ctx, h, ds)
	}
	for {
		select {
		case <-ctx.Done():
			return timeoutOr(ctx, ctx.Err())
		case ev, ok := <-podEvents:
			if !ok || ev.Type == watch.Error {
				// Restart a stream that ended; give up on one that keeps failing.
				if podRestarts++; podRestarts <= maxPodWatchRestarts && ctx.Err() == nil {
					watchPods()
				} else {
					podW.Stop()
					podEvents = nil
				}
				continue
			}
			podRestarts = 0
			if pod, ok := ev.Object.(*corev1.Pod); ok && ownedBy(pod, ds) {
				for _, l := range tracker.update(pod, ev.Type == watch.Deleted) {
					p.node(l)
				}
			}
		case ev, ok := <-dsW.ResultChan():
			if !ok || ev.Type == watch.Error {
				// The stream ended (server timeout, 410): resume from a fresh read.
				dsW.Stop()
				obj, err := h.Get(ctx, resources.DaemonSets, ns, c.name)
				if err != nil {
					return timeoutOr(ctx, err)
				}
				ds = obj.(*appsv1.DaemonSet)
				if dsW, err = h.Watch(ctx, resources.DaemonSets, ns, client.ListOptions{FieldSelector: "metadata.name=" + c.name, ResourceVersion: ds.ResourceVersion}); err != nil {
					return timeoutOr(ctx, err)
				}
			} else if ev.Type == watch.Deleted {
				return fmt.Errorf("daemon set %q was deleted while waiting for its rollout", c.name)
			} else if d, ok := ev.Object.(*appsv1.DaemonSet); ok {
				ds = d
				if c.progress {
					tracker.observe(ctx, h, ds)
				}
			} else {
				continue
			}
			line, done, err := rolloutStatus(ds)
			if err != nil {
				return err
			}
			p.status(line)
			if done {
				return nil
			}
		}
	}
}

func timeoutOr(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return withFix(errRolloutTimeout, "the rollout is still going: run \"everynode rollout status\" again, or look at the pods with \"everynode get pods -o wide\"")
	}
	return err
}

// rolloutPrinter prints kubectl's status lines (each once in a row) and the
// per-node lines.
type rolloutPrinter struct {
	out      io.Writer
	progress bool
	last     string
}

func (p *rolloutPrinter) status(line string) {
	if line == p.last {
		return
	}
	p.last = line
	fmt.Fprint(p.out, line)
}

func (p *rolloutPrinter) node(line string) {
	if p.progress {
		fmt.Fprintln(p.out, line)
	}
}

// ownedBy reports whether the DaemonSet is the pod's controller.
func ownedBy(pod *corev1.Pod, ds *appsv1.DaemonSet) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.UID == ds.UID
}

// currentRevisionHash is the controller-revision-hash of the DaemonSet's
// newest ControllerRevision ("" when unknown).
func currentRevisionHash(ctx context.Context, h client.Interface, ds *appsv1.DaemonSet) string {
	revs, err := daemonSetHistory(ctx, h, ds)
	if err != nil || len(revs) == 0 {
		return ""
	}
	return revs[len(revs)-1].Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
}

// nodeTracker remembers the line last printed for each node's pod.
type nodeTracker struct {
	current string            // hash of the current revision, "" while unknown
	gen     int64             // the DaemonSet generation current belongs to
	lines   map[string]string // node/pod → last line
}

// observe learns the current revision once the controller has observed the
// DaemonSet's generation (before that, its newest ControllerRevision may
// still be the previous template's).
func (t *nodeTracker) observe(ctx context.Context, h client.Interface, ds *appsv1.DaemonSet) {
	if ds.Generation == t.gen {
		return
	}
	if ds.Status.ObservedGeneration < ds.Generation {
		t.current = ""
		return
	}
	t.current, t.gen = currentRevisionHash(ctx, h, ds), ds.Generation
}

func newNodeTracker() *nodeTracker {
	return &nodeTracker{lines: map[string]string{}}
}

func (t *nodeTracker) setCurrent(hash string) { t.current = hash }

// update records a pod event and returns the lines to print (none when
// nothing a reader cares about changed).
func (t *nodeTracker) update(pod *corev1.Pod, deleted bool) []string {
	node := pod.Spec.NodeName
	if node == "" {
		return nil
	}
	line := nodeProgressLine(pod, t.current, deleted)
	if t.lines[node+"/"+pod.Name] == line {
		return nil
	}
	t.lines[node+"/"+pod.Name] = line
	return []string{line}
}

// nodeProgressLine is one per-node line of "everynode rollout status":
// node, pod, revision hash (marked new when it is the current revision),
// and the pod's state.
func nodeProgressLine(pod *corev1.Pod, current string, deleted bool) string {
	hash := pod.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
	rev := orNone(hash)
	if current != "" {
		if hash == current {
			rev += " (new)"
		} else {
			rev += " (old)"
		}
	}
	state := "not ready"
	switch {
	case deleted:
		state = "deleted"
	case pod.DeletionTimestamp != nil:
		state = "terminating"
	case podIsReady(pod):
		state = "ready"
	case pod.Status.Phase == corev1.PodFailed:
		state = "failed"
	default:
		if w := waitingReason(pod); w != "" {
			state = "not ready (" + w + ")"
		}
	}
	return fmt.Sprintf("  node %s: pod %s revision %s %s", pod.Spec.NodeName, pod.Name, rev, state)
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func waitingReason(p *corev1.Pod) string {
	var rs []string
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			rs = append(rs, cs.State.Waiting.Reason)
		}
	}
	sort.Strings(rs)
	return strings.Join(rs, ",")
}
