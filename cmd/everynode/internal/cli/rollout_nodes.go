package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/daemonset"
	"github.com/everynode/everynode/resources"
)

// "everynode rollout status ds/NAME --nodes": a table of every targeted
// node's revision, state and reason, problems first (daemonset.Progress,
// the controller's own rules), under kubectl's status line and a progress
// bar; watching, it is drawn again on every change (docs/rollouts.md §8).

// progressBarWidth is the number of cells of the progress bar.
const progressBarWidth = 30

// redrawInterval is the least time between two blocks while watching: the
// changes that arrive meanwhile are drawn together (a large fleet's pods
// and nodes change many times a second).
const redrawInterval = 250 * time.Millisecond

// writeNodeTable prints the per-node table of rows (from daemonset.Progress).
func writeNodeTable(out io.Writer, rows []daemonset.NodeProgress, hash string, now time.Time) {
	if len(rows) == 0 {
		fmt.Fprintln(out, "no nodes targeted")
		return
	}
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tPOD\tREVISION\tSTATE\tREASON")
	for _, r := range rows {
		rev := "-"
		if r.Revision != "" {
			rev = r.Revision + " (old)"
			if r.Updated || r.Revision == hash {
				rev = r.Revision + " (new)"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.Node, orDash(r.Pod), rev, r.State, progressReason(r, now))
	}
	w.Flush()
}

// progressReason is the REASON cell: the reason and, when known, since
// when — a UTC time of day, with the date when more than a day ago. No
// relative age: a block changes only when the fleet does.
func progressReason(r daemonset.NodeProgress, now time.Time) string {
	if r.Since.IsZero() {
		return r.Reason
	}
	layout := "15:04:05Z"
	if now.Sub(r.Since.Time) > 24*time.Hour {
		layout = "2006-01-02 15:04:05Z"
	}
	return r.Reason + " since " + r.Since.UTC().Format(layout)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// progressBar is "[#####-----] 5/10 updated, 4/10 available" from the
// DaemonSet's status counters.
func progressBar(ds *appsv1.DaemonSet) string {
	st := ds.Status
	desired := int(st.DesiredNumberScheduled)
	filled := 0
	if desired > 0 {
		filled = min(progressBarWidth, int(st.UpdatedNumberScheduled)*progressBarWidth/desired)
	}
	return fmt.Sprintf("[%s%s] %d/%d updated, %d/%d available", strings.Repeat("#", filled), strings.Repeat("-", progressBarWidth-filled),
		st.UpdatedNumberScheduled, desired, st.NumberAvailable, desired)
}

// nodeBlock is one drawing: kubectl's status line, the progress bar and
// the table. A failed rollout has no status line: err says why, and is
// printed once, as the command's error.
func nodeBlock(ds *appsv1.DaemonSet, in planSnapshot, now time.Time) (text string, done bool, err error) {
	line, done, err := rolloutStatus(ds)
	var b strings.Builder
	if err == nil {
		b.WriteString(line)
	}
	rows, hash := daemonset.Progress(ds, in.nodes, in.pods, in.revs, metav1.NewTime(now))
	fmt.Fprintf(&b, "%s   update revision %s\n", progressBar(ds), hash)
	writeNodeTable(&b, rows, hash, now)
	return b.String(), done, err
}

// isTerminal reports whether w is a terminal, where a block can be drawn
// over the previous one.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// blockPrinter draws blocks: on a terminal over the previous one (ANSI
// cursor up and erase), elsewhere one after another, each only when it
// changed.
type blockPrinter struct {
	out   io.Writer
	tty   bool
	last  string
	lines int
}

func (p *blockPrinter) draw(block string) {
	if block == p.last {
		return
	}
	switch {
	case p.tty && p.lines > 0:
		fmt.Fprintf(p.out, "\x1b[%dA\x1b[J", p.lines)
	case p.last != "":
		fmt.Fprintln(p.out)
	}
	io.WriteString(p.out, block)
	p.last, p.lines = block, strings.Count(block, "\n")
}

// mirror keeps the objects of one kind up to date from a watch: a list,
// then a watch from the list's resourceVersion, started again (with a
// fresh list) when it ends.
type mirror struct {
	r     *resources.Resource
	ns    string
	opts  client.ListOptions
	items map[string]client.Object
	w     watch.Interface
}

func (m *mirror) start(ctx context.Context, h client.Interface) error {
	if m.w != nil {
		m.w.Stop()
	}
	objs, rv, err := h.List(ctx, m.r, m.ns, m.opts)
	if err != nil {
		return err
	}
	m.items = map[string]client.Object{}
	for _, o := range objs {
		m.put(o)
	}
	opts := m.opts
	opts.ResourceVersion = rv
	m.w, err = h.Watch(ctx, m.r, m.ns, opts)
	return err
}

func (m *mirror) put(o client.Object) { m.items[o.GetNamespace()+"/"+o.GetName()] = o }

// apply records ev; false means the watch ended and must be started again.
func (m *mirror) apply(ev watch.Event, ok bool) bool {
	if !ok || ev.Type == watch.Error {
		return false
	}
	o, isObj := ev.Object.(client.Object)
	switch {
	case !isObj:
	case ev.Type == watch.Deleted:
		delete(m.items, o.GetNamespace()+"/"+o.GetName())
	default:
		m.put(o)
	}
	return true
}

func (m *mirror) stop() {
	if m.w != nil {
		m.w.Stop()
	}
}

// runTable is run with --nodes: it draws the per-node block until the
// rollout is done (or once with -w=false), with the same ends and exit
// codes as without the table.
func (c *RolloutStatusCommand) runTable(ctx context.Context, h client.Interface, out io.Writer) error {
	ns := c.ns()
	obj, err := h.Get(ctx, resources.DaemonSets, ns, c.name)
	if err != nil {
		return timeoutOr(ctx, err)
	}
	ds := obj.(*appsv1.DaemonSet)
	p := &blockPrinter{out: out, tty: isTerminal(out)}
	if !c.watch {
		in, err := planInput(ctx, h, ds)
		if err != nil {
			return err
		}
		block, _, err := nodeBlock(ds, in, c.main.now())
		p.draw(block)
		return err
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return fmt.Errorf("daemon set %q has an invalid selector: %w", ds.Name, err)
	}
	dsM := &mirror{r: resources.DaemonSets, ns: ns, opts: client.ListOptions{FieldSelector: "metadata.name=" + c.name}}
	nodeM := &mirror{r: resources.Nodes}
	podM := &mirror{r: resources.Pods, ns: ns, opts: client.ListOptions{LabelSelector: sel.String()}}
	mirrors := []*mirror{dsM, nodeM, podM}
	defer func() {
		for _, m := range mirrors {
			m.stop()
		}
	}()
	for _, m := range mirrors {
		if err := m.start(ctx, h); err != nil {
			return timeoutOr(ctx, err)
		}
	}
	var revs []*appsv1.ControllerRevision
	revsFor := int64(-1) // the observed generation revs were read at
	for {
		obj := dsM.items[ns+"/"+c.name]
		if obj == nil {
			return fmt.Errorf("daemon set %q was deleted while waiting for its rollout", c.name)
		}
		ds := obj.(*appsv1.DaemonSet)
		if ds.Status.ObservedGeneration != revsFor {
			if revs, err = daemonSetHistory(ctx, h, ds); err != nil {
				return timeoutOr(ctx, err)
			}
			revsFor = ds.Status.ObservedGeneration
		}
		in := planSnapshot{revs: revs}
		for _, o := range nodeM.items {
			in.nodes = append(in.nodes, o.(*corev1.Node))
		}
		for _, o := range podM.items {
			if pod := o.(*corev1.Pod); ownedBy(pod, ds) {
				in.pods = append(in.pods, pod)
			}
		}
		block, done, err := nodeBlock(ds, in, c.main.now())
		p.draw(block)
		c.lastDraw = time.Now()
		if err != nil || done {
			return err
		}
		// Wait for a change, then take every change already queued
		// before drawing again.
		if err := c.waitChange(ctx, h, mirrors); err != nil {
			return timeoutOr(ctx, err)
		}
	}
}

// waitChange waits redrawInterval after the last block, then until one of
// the mirrors' watches delivers; it applies that event and every one
// already waiting, and restarts ended watches.
func (c *RolloutStatusCommand) waitChange(ctx context.Context, h client.Interface, mirrors []*mirror) error {
	handle := func(m *mirror, ev watch.Event, ok bool) error {
		if !m.apply(ev, ok) {
			return m.start(ctx, h)
		}
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(c.lastDraw.Add(redrawInterval))):
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case ev, ok := <-mirrors[0].w.ResultChan():
		if err := handle(mirrors[0], ev, ok); err != nil {
			return err
		}
	case ev, ok := <-mirrors[1].w.ResultChan():
		if err := handle(mirrors[1], ev, ok); err != nil {
			return err
		}
	case ev, ok := <-mirrors[2].w.ResultChan():
		if err := handle(mirrors[2], ev, ok); err != nil {
			return err
		}
	}
	for _, m := range mirrors {
		for drained := false; !drained; {
			select {
			case ev, ok := <-m.w.ResultChan():
				if err := handle(m, ev, ok); err != nil {
					return err
				}
				drained = !ok
			default:
				drained = true
			}
		}
	}
	return nil
}
