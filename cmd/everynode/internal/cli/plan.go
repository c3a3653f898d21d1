package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/daemonset"
	"github.com/everynode/everynode/resources"
)

// PlanCommand is "everynode plan -f FILE|DIR|-": what "everynode apply -f"
// of the same files would do, changing nothing (docs/rollouts.md §9).
type PlanCommand struct {
	main *Main

	clientFlags
	filename string
}

func (c *PlanCommand) flags(fs *pflag.FlagSet) {
	fs.StringVarP(&c.filename, "filename", "f", "", "file, directory or - (stdin) with the objects to plan")
}

func (c *PlanCommand) complete(pos []string) error {
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "plan takes only -f")
	}
	if c.filename == "" {
		return usageError("must specify -f", "pass -f FILE, -f DIR or -f - for stdin")
	}
	return nil
}

// Run implements the command: each object is applied as "everynode apply"
// applies it, with dryRun=All, so the server checks it in full and answers
// with the object it would store; for a DaemonSet, that answer, the nodes
// and the pods it replaces give each node's fate, by the controller's own
// rules (daemonset.Plan).
func (c *PlanCommand) Run(ctx context.Context, std IO) error {
	ms, err := readManifests(c.filename, std.In)
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return usageError("no objects passed to plan", "the file holds no documents")
	}
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	var last error
	for i, m := range ms {
		if i > 0 && m.r == resources.DaemonSets {
			fmt.Fprintln(std.Out)
		}
		if err := c.planOne(ctx, h, m, std.Out); err != nil {
			err = explainTransport(err, h.Server())
			if last != nil {
				fmt.Fprintln(std.Err, FormatError(last))
			}
			last = err
		}
	}
	return last
}

func (c *PlanCommand) planOne(ctx context.Context, h client.Interface, m manifest, out io.Writer) error {
	result, obj, err := applyManifest(ctx, h, m, c.clientFlags, true)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s %s (server dry run)\n", objectRef(m.r, obj.GetName()), result)
	ds, ok := obj.(*appsv1.DaemonSet)
	if !ok {
		return nil
	}
	in, err := planInput(ctx, h, ds)
	if err != nil {
		return err
	}
	plan := daemonset.Plan(ds, in.nodes, in.pods, in.revs, c.main.now())
	writePlan(out, plan, daemonset.UpdateRevisionHash(ds, in.revs))
	return nil
}

// planSnapshot is what a plan or a progress table is computed from.
type planSnapshot struct {
	nodes []*corev1.Node
	pods  []*corev1.Pod
	revs  []*appsv1.ControllerRevision
}

// planInput reads the nodes, and the pods and ControllerRevisions of the
// stored DaemonSet ds replaces (none when ds is new: a dry-run create has
// no stored uid to own them).
func planInput(ctx context.Context, h client.Interface, ds *appsv1.DaemonSet) (planSnapshot, error) {
	var s planSnapshot
	nodes, _, err := h.List(ctx, resources.Nodes, "", client.ListOptions{})
	if err != nil {
		return s, err
	}
	for _, o := range nodes {
		if n, ok := o.(*corev1.Node); ok {
			s.nodes = append(s.nodes, n)
		}
	}
	live, err := h.Get(ctx, resources.DaemonSets, ds.Namespace, ds.Name)
	if apierrors.IsNotFound(err) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	stored := live.(*appsv1.DaemonSet)
	if s.revs, err = daemonSetHistory(ctx, h, stored); err != nil {
		return s, err
	}
	s.pods, err = daemonSetPods(ctx, h, stored)
	return s, err
}

// daemonSetPods lists the pods ds controls.
func daemonSetPods(ctx context.Context, h client.Interface, ds *appsv1.DaemonSet) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("daemon set %q has an invalid selector: %w", ds.Name, err)
	}
	objs, _, err := h.List(ctx, resources.Pods, ds.Namespace, client.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && ownedBy(p, ds) {
			out = append(out, p)
		}
	}
	return out, nil
}

// writePlan prints the plan's table and a count of each action.
func writePlan(out io.Writer, plan []daemonset.NodePlan, hash string) {
	fmt.Fprintf(out, "update revision: %s\n", hash)
	if len(plan) == 0 {
		fmt.Fprintln(out, "no nodes")
		return
	}
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tACTION\tREVISION\tREASON")
	count := map[daemonset.PlanAction]int{}
	for _, p := range plan {
		count[p.Action]++
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", p.Node, p.Action, planRevisions(p), p.Reason)
	}
	w.Flush()
	var parts []string
	for _, a := range []daemonset.PlanAction{daemonset.PlanGain, daemonset.PlanUpdate, daemonset.PlanLose, daemonset.PlanKeep, daemonset.PlanNone} {
		if n := count[a]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, planWords[a]))
		}
	}
	fmt.Fprintf(out, "Plan: %s.\n", strings.Join(parts, ", "))
}

var planWords = map[daemonset.PlanAction]string{
	daemonset.PlanGain: "to gain a pod", daemonset.PlanUpdate: "to update", daemonset.PlanLose: "to lose their pod",
	daemonset.PlanKeep: "to keep their pod", daemonset.PlanNone: "without a pod",
}

// planRevisions is the REVISION cell: "old -> new", "-> new", "old ->" or
// the one revision a kept pod runs.
func planRevisions(p daemonset.NodePlan) string {
	switch p.Action {
	case daemonset.PlanKeep:
		return p.From
	case daemonset.PlanNone:
		return "-"
	}
	return strings.TrimSpace(p.From + " -> " + p.To)
}
