package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// GetCommand is "everynode get KIND [NAME...]".
type GetCommand struct {
	main *Main

	clientFlags
	allNamespaces bool
	output        string
	selector      string
	watch         bool

	r     *resources.Resource
	names []string
	kinds []*resources.Resource // "all" or "ds,pods": several kinds, no names

	printed int // structured documents written, for YAML's "---" separators
}

func (c *GetCommand) flags(fs *pflag.FlagSet) {
	fs.BoolVarP(&c.allNamespaces, "all-namespaces", "A", false, "list across all namespaces")
	fs.StringVarP(&c.output, "output", "o", "", "output format: wide, yaml, json or name")
	fs.StringVarP(&c.selector, "selector", "l", "", "label selector (app=x,tier!=db)")
	fs.BoolVarP(&c.watch, "watch", "w", false, "after listing, watch for changes")
}

// complete reads the arguments into the command's fields.
func (c *GetCommand) complete(pos []string) error {
	if len(pos) == 0 {
		return usageError("you must specify the type of resource to get", "use one of: "+kindList())
	}
	kinds, multi, err := multiKinds(pos)
	switch {
	case err != nil:
		return err
	case multi && c.watch:
		return usageError("watch is only supported on one kind", "watch one kind at a time")
	case multi:
		c.kinds, c.r = kinds, kinds[0]
	default:
		if c.r, c.names, err = splitKindNames(pos); err != nil {
			return err
		}
	}
	switch c.output {
	case "", "wide", "yaml", "json", "name":
	default:
		return usageError(fmt.Sprintf("unable to match a printer suitable for the output format %q", c.output), "use -o wide, yaml, json or name")
	}
	if len(c.names) > 0 && c.selector != "" {
		return usageError("name cannot be provided when a selector is specified", "give names or -l, not both")
	}
	return nil
}

// Run implements the command.
func (c *GetCommand) Run(ctx context.Context, std IO) error {
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	if len(c.kinds) > 0 {
		return c.runMulti(ctx, h, h.Server(), std)
	}
	ns := c.ns()
	if c.allNamespaces || !c.r.Namespaced {
		ns = ""
	}
	withNS := c.allNamespaces && c.r.Namespaced
	table := newTablePrinter(std.Out, c.r, c.output == "wide", withNS)

	var objs []client.Object
	rv := ""
	if len(c.names) > 0 {
		for _, name := range c.names {
			obj, err := h.Get(ctx, c.r, c.ns(), name)
			if err != nil {
				return explainTransport(err, h.Server())
			}
			objs = append(objs, obj)
		}
	} else {
		objs, rv, err = h.List(ctx, c.r, ns, client.ListOptions{LabelSelector: c.selector})
		if err != nil {
			return explainTransport(err, h.Server())
		}
	}
	if len(objs) == 0 && len(c.names) == 0 {
		fmt.Fprintln(std.Err, noResources(c.r, ns))
	} else if err := c.printObjects(std.Out, table, objs, len(c.names) == 1); err != nil {
		return err
	}
	if !c.watch {
		return nil
	}
	opts := client.ListOptions{LabelSelector: c.selector, ResourceVersion: rv}
	if len(c.names) > 0 {
		if len(c.names) > 1 {
			return usageError("watch is only supported on individual resources and resource collections", "watch one name or a whole kind")
		}
		// Start from "0": the synthetic ADDED of the current object is skipped below.
		opts = client.ListOptions{FieldSelector: "metadata.name=" + c.names[0], ResourceVersion: "0"}
	}
	return c.watchLoop(ctx, h, ns, opts, table, std)
}

func (c *GetCommand) watchLoop(ctx context.Context, h *client.HTTP, ns string, opts client.ListOptions, table *tablePrinter, std IO) error {
	if len(c.names) > 0 {
		ns = c.ns()
	}
	w, err := h.Watch(ctx, c.r, ns, opts)
	if err != nil {
		return explainTransport(err, h.Server())
	}
	defer w.Stop()
	skipFirst := len(c.names) > 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Error:
				if st, ok := ev.Object.(*metav1.Status); ok {
					return fmt.Errorf("watch ended: %s", st.Message)
				}
				return errors.New("watch ended with an error")
			case watch.Bookmark:
				continue
			}
			if skipFirst {
				skipFirst = false
				continue
			}
			obj, ok := ev.Object.(client.Object)
			if !ok {
				continue
			}
			if err := c.printObjects(std.Out, table, []client.Object{obj}, true); err != nil {
				return err
			}
		}
	}
}

func noResources(r *resources.Resource, ns string) string {
	if r.Namespaced && ns != "" {
		return fmt.Sprintf("No resources found in %s namespace.", ns)
	}
	return "No resources found"
}

// printObjects prints objs in the chosen format; single says a lone object is
// printed as itself rather than wrapped in a List.
func (c *GetCommand) printObjects(w io.Writer, table *tablePrinter, objs []client.Object, single bool) error {
	switch c.output {
	case "name":
		for _, o := range objs {
			fmt.Fprintln(w, objectRef(c.r, o.GetName()))
		}
		return nil
	case "json", "yaml":
		// Like kubectl without --show-managed-fields: the server's
		// managedFields bookkeeping is not shown.
		for _, o := range objs {
			o.SetManagedFields(nil)
		}
		var v any = listOf(objs)
		if single && len(objs) == 1 {
			v = objs[0]
		}
		if c.printed++; c.printed > 1 && c.output == "yaml" {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		return writeStructured(w, c.output, v)
	}
	return table.print(objs, c.main.now())
}

// kubectlList is the "kind: List" wrapper kubectl prints for -o json/yaml.
type kubectlList struct {
	APIVersion string          `json:"apiVersion"`
	Items      []client.Object `json:"items"`
	Kind       string          `json:"kind"`
	Metadata   struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
}

func listOf(objs []client.Object) *kubectlList {
	l := &kubectlList{APIVersion: "v1", Kind: "List", Items: objs}
	if l.Items == nil {
		l.Items = []client.Object{}
	}
	return l
}

func writeStructured(w io.Writer, format string, v any) error {
	data, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	if format == "yaml" {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return fmt.Errorf("encode output: %w", err)
		}
		_, err = w.Write(data)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}
