package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spf13/pflag"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// DrainCommand is "everynode drain NODE": cordon the node, then delete the
// pods on it that something else will recreate elsewhere, and wait until
// they are gone. DaemonSet pods belong on the node and are refused unless
// --ignore-daemonsets (then left running); static (mirror) pods are skipped.
type DrainCommand struct {
	main *Main

	clientFlags
	ignoreDaemonSets   bool
	deleteEmptyDirData bool
	force              bool
	gracePeriod        int64
	timeout            time.Duration
	names              []string
}

func (c *DrainCommand) flags(fs *pflag.FlagSet) {
	fs.BoolVar(&c.ignoreDaemonSets, "ignore-daemonsets", false, "leave DaemonSet-managed pods running instead of refusing")
	fs.BoolVar(&c.deleteEmptyDirData, "delete-emptydir-data", false, "also delete pods with emptyDir volumes (their data is lost)")
	fs.BoolVar(&c.force, "force", false, "also delete pods no controller manages (they are not recreated)")
	fs.Int64Var(&c.gracePeriod, "grace-period", -1, "seconds each pod gets to stop; -1 uses the pod's own")
	fs.DurationVar(&c.timeout, "timeout", 0, "give up after this long (0: wait forever)")
}

func (c *DrainCommand) complete(pos []string) error {
	var err error
	if c.names, err = nodeNamesArg(pos); err != nil {
		return err
	}
	if len(c.names) == 0 {
		return usageError("USAGE: drain NODE [flags]", "name the node to drain")
	}
	return nil
}

// Run implements the command.
func (c *DrainCommand) Run(ctx context.Context, std IO) error {
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	return eachName(ctx, c.names, func(err error) { fmt.Fprintln(std.Err, FormatError(err)) }, func(ctx context.Context, name string) error {
		return explainTransport(c.drain(ctx, h, name, std), h.Server())
	})
}

func (c *DrainCommand) drain(ctx context.Context, h client.Interface, node string, std IO) error {
	if err := setUnschedulable(ctx, h, node, true, std.Out); err != nil {
		return err
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	objs, _, err := h.List(ctx, resources.Pods, "", client.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return err
	}
	var pods []*corev1.Pod
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	plan, err := c.plan(ctx, h, pods)
	if err != nil {
		return err
	}
	if errs := plan.errors(); len(errs) > 0 {
		// kubectl's report: the errors, the pending node, then the errors again.
		fmt.Fprintf(std.Err, "error: unable to drain node %q due to error: [%s], continuing command...\n", node, strings.Join(errs, ", "))
		fmt.Fprintf(std.Err, "There are pending nodes to be drained:\n %s\n", node)
		return withFix(errors.New(strings.Join(errs, "; ")),
			fmt.Sprintf("node %s stays cordoned: fix the cause and drain it again, or \"everynode uncordon %s\"", node, node))
	}
	if ws := plan.warnings(); len(ws) > 0 {
		fmt.Fprintf(std.Err, "Warning: %s\n", strings.Join(ws, "; "))
	}
	del := plan.toDelete()
	for _, p := range del {
		opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}
		if c.gracePeriod >= 0 {
			g := c.gracePeriod
			opts.GracePeriodSeconds = &g
		}
		if _, err := h.Delete(ctx, resources.Pods, p.Namespace, p.Name, opts); err != nil && !apierrors.IsNotFound(err) {
			return timeoutDrain(ctx, node, err)
		}
	}
	for _, p := range del {
		if err := waitDeleted(ctx, h, resources.Pods, p.Namespace, p.Name, string(p.UID), forever(ctx)); err != nil {
			return timeoutDrain(ctx, node, err)
		}
		fmt.Fprintf(std.Out, "pod/%s deleted\n", p.Name)
	}
	_, err = fmt.Fprintf(std.Out, "node/%s drained\n", node)
	return err
}

// forever is the wait bound when ctx carries the real deadline.
func forever(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d) + time.Second
	}
	return 100 * 365 * 24 * time.Hour
}

func timeoutDrain(ctx context.Context, node string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return withFix(fmt.Errorf("error when waiting for pods on node %q to be deleted: global timeout reached", node),
			"raise --timeout, or look at the node's remaining pods with \"everynode get pods -A -o wide\"")
	}
	return err
}

// drainVerdict is what drain does with one pod.
type drainVerdict struct {
	pod     *corev1.Pod
	delete  bool
	warning string // reason, grouped in one "Warning:" line
	fatal   string // reason, grouped in the error
}

// drainPlan is the verdict for every pod on the node.
type drainPlan []drainVerdict

// Messages are kubectl's (k8s.io/kubectl/pkg/drain/filters.go).
const (
	daemonSetFatal      = "DaemonSet-managed Pods (use --ignore-daemonsets to ignore)"
	daemonSetWarning    = "ignoring DaemonSet-managed Pods"
	localStorageFatal   = "Pods with local storage (use --delete-emptydir-data to override)"
	localStorageWarning = "deleting Pods with local storage"
	unmanagedFatal      = "Pods that declare no controller (use --force to override)"
	unmanagedWarning    = "deleting Pods that declare no controller"
	mirrorWarning       = "ignoring static (mirror) Pods, which the node's agent owns"
)

// plan runs kubectl's pod filters in order: already deleting, DaemonSet,
// mirror, local storage, unreplicated.
func (c *DrainCommand) plan(ctx context.Context, h client.Interface, pods []*corev1.Pod) (drainPlan, error) {
	var plan drainPlan
	for _, p := range pods {
		v := drainVerdict{pod: p, delete: true}
		finished := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		ref := metav1.GetControllerOf(p)
		switch {
		case p.DeletionTimestamp != nil:
			v.delete = false
		case ref != nil && ref.Kind == "DaemonSet":
			v.delete = false
			if _, err := h.Get(ctx, resources.DaemonSets, p.Namespace, ref.Name); err != nil {
				if !apierrors.IsNotFound(err) {
					return nil, err
				}
				if c.force {
					v.delete, v.warning = true, err.Error()
				} else {
					v.fatal = err.Error()
				}
			} else if c.ignoreDaemonSets {
				v.warning = daemonSetWarning
			} else {
				v.fatal = daemonSetFatal
			}
		case p.Annotations[corev1.MirrorPodAnnotationKey] != "":
			v.delete, v.warning = false, mirrorWarning
		case hasEmptyDir(p) && !finished && !c.deleteEmptyDirData:
			v.delete, v.fatal = false, localStorageFatal
		case ref == nil && !finished && !c.force:
			v.delete, v.fatal = false, unmanagedFatal
		default:
			if hasEmptyDir(p) && !finished {
				v.warning = localStorageWarning
			} else if ref == nil && !finished {
				v.warning = unmanagedWarning
			}
		}
		plan = append(plan, v)
	}
	return plan, nil
}

func hasEmptyDir(p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir != nil {
			return true
		}
	}
	return false
}

func (pl drainPlan) grouped(pick func(drainVerdict) string) []string {
	m := map[string][]string{}
	for _, v := range pl {
		if msg := pick(v); msg != "" {
			m[msg] = append(m[msg], v.pod.Namespace+"/"+v.pod.Name)
		}
	}
	var out []string
	for msg, ps := range m {
		out = append(out, msg+": "+strings.Join(ps, ", "))
	}
	sort.Strings(out)
	return out
}

func (pl drainPlan) warnings() []string {
	return pl.grouped(func(v drainVerdict) string { return v.warning })
}

func (pl drainPlan) errors() []string {
	errs := pl.grouped(func(v drainVerdict) string { return v.fatal })
	for i := range errs {
		errs[i] = "cannot delete " + errs[i]
	}
	return errs
}

func (pl drainPlan) toDelete() []*corev1.Pod {
	var out []*corev1.Pod
	for _, v := range pl {
		if v.delete {
			out = append(out, v.pod)
		}
	}
	return out
}
