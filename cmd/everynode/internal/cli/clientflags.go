package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// clientFlags are the flags every client verb shares. They are the root
// command's (global) flags, --kubeconfig and -n/--namespace (see newRoot);
// each client verb embeds a copy, set before it completes.
type clientFlags struct {
	kubeconfig string
	namespace  string
}

// setClientFlags gives a verb the parsed global flags.
func (c *clientFlags) setClientFlags(g clientFlags) { *c = g }

// ns returns the namespace to use, "default" unless given.
func (c *clientFlags) ns() string {
	if c.namespace == "" {
		return "default"
	}
	return c.namespace
}

// connect loads the kubeconfig and returns an HTTP client for it.
func (c *clientFlags) connect(m *Main) (*client.HTTP, error) {
	paths := client.KubeconfigPaths(c.kubeconfig, m.getenv("KUBECONFIG"), m.getenv("HOME"))
	cfg, err := client.LoadKubeconfigFrom(paths)
	if err != nil {
		return nil, withFix(fmt.Errorf("cannot read kubeconfig: %w", err),
			"set --kubeconfig or KUBECONFIG to the admin.kubeconfig in the server's data dir")
	}
	cfg.UserAgent = "everynode/" + Version()
	cfg.ResourceFor = resources.ForObject // the CLI writes every served kind
	h, err := client.NewHTTP(cfg)
	if err != nil {
		return nil, withFix(fmt.Errorf("bad kubeconfig: %w", err),
			"set --kubeconfig or KUBECONFIG to the admin.kubeconfig in the server's data dir")
	}
	return h, nil
}

// resolveKind finds a resource by any of kubectl's names for it
// (ds, daemonset, daemonsets, daemonsets.apps, DaemonSet).
func resolveKind(kind string) (*resources.Resource, error) {
	name := kind
	if i := strings.IndexByte(name, '.'); i > 0 {
		name = name[:i] // daemonsets.apps → daemonsets
	}
	r := resources.ByName(name)
	if r == nil {
		r = resources.ByName(strings.ToLower(name))
	}
	if r == nil {
		for _, c := range resources.All() {
			if strings.EqualFold(c.Kind, name) {
				r = c
			}
		}
	}
	if r == nil || (name != kind && kind[len(name)+1:] != r.Group) {
		return nil, withFix(fmt.Errorf("the server doesn't have a resource type %q", kind), "use one of: "+kindList())
	}
	return r, nil
}

func kindList() string {
	var out []string
	for _, r := range resources.All() {
		s := r.Name
		if len(r.ShortNames) > 0 {
			s += " (" + strings.Join(r.ShortNames, ",") + ")"
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// qualifiedKind is kubectl's "daemonset.apps" / "pod" for output lines.
func qualifiedKind(r *resources.Resource) string {
	if r.Group == "" {
		return r.Singular
	}
	return r.Singular + "." + r.Group
}

// objectRef is "daemonset.apps/NAME", kubectl's -o name form.
func objectRef(r *resources.Resource, name string) string { return qualifiedKind(r) + "/" + name }

// splitKindNames turns "ds a b" or "ds/a ds/b" into (resource, names).
func splitKindNames(args []string) (*resources.Resource, []string, error) {
	if len(args) == 0 {
		return nil, nil, nil
	}
	var r *resources.Resource
	var names []string
	if !strings.Contains(args[0], "/") {
		var err error
		if r, err = resolveKind(args[0]); err != nil {
			return nil, nil, err
		}
		args = args[1:]
	}
	for _, a := range args {
		kind, name, ok := strings.Cut(a, "/")
		if !ok {
			if r == nil {
				return nil, nil, usageError(fmt.Sprintf("there is no need to specify a resource type as a separate argument when passing arguments in resource/name form (got %q)", a), "use KIND NAME or KIND/NAME")
			}
			names = append(names, a)
			continue
		}
		rr, err := resolveKind(kind)
		if err != nil {
			return nil, nil, err
		}
		if r != nil && rr != r {
			return nil, nil, usageError("mixed kinds in one command", "run one command per kind")
		}
		r = rr
		names = append(names, name)
	}
	return r, names, nil
}

// eachName runs f for every name, continuing after failures; it prints all
// but the last failure to w and returns the last one.
func eachName(ctx context.Context, names []string, errOut func(error), f func(ctx context.Context, name string) error) error {
	var last error
	for _, n := range names {
		if err := f(ctx, n); err != nil {
			if last != nil {
				errOut(last)
			}
			last = err
		}
	}
	return last
}

// targetFlags are the ways besides names to say which objects a verb acts
// on, as kubectl's label and taint take them: --all, or -l SELECTOR.
type targetFlags struct {
	all      bool
	selector string
}

// registerTargets adds --all and -l/--selector to fs; every and matching
// describe what they select ("every node").
func (t *targetFlags) registerTargets(fs *pflag.FlagSet, every, matching string) {
	fs.BoolVar(&t.all, "all", false, every)
	fs.StringVarP(&t.selector, "selector", "l", "", matching)
}

// checkTargets requires names or --all/-l, not both.
func (t *targetFlags) checkTargets(names []string) error {
	switch {
	case len(names) == 0 && !t.all && t.selector == "":
		return usageError("resource(s) were provided, but no name was specified", "give NAME, --all or -l SELECTOR")
	case len(names) > 0 && (t.all || t.selector != ""):
		return usageError("name cannot be provided when a selector or --all is specified", "give names or --all/-l, not both")
	}
	return nil
}

// forEachTarget runs f for each named object or, when names is empty, for
// every object of r in namespace ns that matches selector (kubectl's
// "NAME..." or "-l SEL"/"--all"). Each failure but the last is printed to
// errOut as it happens; the last is returned, as eachName does. Transport
// errors name the server.
func forEachTarget(ctx context.Context, h *client.HTTP, r *resources.Resource, ns string, names []string, selector string,
	errOut io.Writer, f func(ctx context.Context, name string) error) error {
	if len(names) == 0 {
		objs, _, err := h.List(ctx, r, ns, client.ListOptions{LabelSelector: selector})
		if err != nil {
			return explainTransport(err, h.Server())
		}
		for _, o := range objs {
			names = append(names, o.GetName())
		}
	}
	return eachName(ctx, names, func(err error) { fmt.Fprintln(errOut, FormatError(err)) }, func(ctx context.Context, name string) error {
		return explainTransport(f(ctx, name), h.Server())
	})
}

// withClient connects as connect does, passes the client to run, closes it
// when run returns, and explains a transport error from run with the server's
// address.
func (c *clientFlags) withClient(ctx context.Context, m *Main, out io.Writer,
	run func(context.Context, client.Interface, io.Writer) error) error {
	h, err := c.connect(m)
	if err != nil {
		return err
	}
	defer h.Close()
	return explainTransport(run(ctx, h, out), h.Server())
}
