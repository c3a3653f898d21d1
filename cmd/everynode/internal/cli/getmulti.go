package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// multiKinds expands kubectl's "all" category and comma-separated kinds
// ("ds,pods") in the first argument; ok is false for a single kind.
func multiKinds(pos []string) (kinds []*resources.Resource, ok bool, err error) {
	if len(pos) == 0 || strings.Contains(pos[0], "/") || (pos[0] != "all" && !strings.Contains(pos[0], ",")) {
		return nil, false, nil
	}
	if len(pos) > 1 {
		return nil, true, usageError("names cannot be given with several kinds or \"all\"", "give one kind with names, or kinds without names")
	}
	seen := map[*resources.Resource]bool{}
	for _, name := range strings.Split(pos[0], ",") {
		var rs []*resources.Resource
		if name == "all" {
			for _, r := range resources.All() {
				for _, cat := range r.Categories {
					if cat == "all" {
						rs = append(rs, r)
					}
				}
			}
		} else {
			r, err := resolveKind(name)
			if err != nil {
				return nil, true, err
			}
			rs = []*resources.Resource{r}
		}
		for _, r := range rs {
			if !seen[r] {
				seen[r] = true
				kinds = append(kinds, r)
			}
		}
	}
	return kinds, true, nil
}

// runMulti lists several kinds as kubectl does: one table per kind with
// kind-prefixed names, a blank line between them.
func (c *GetCommand) runMulti(ctx context.Context, h client.Interface, server string, std IO) error {
	ns := c.ns()
	if c.allNamespaces {
		ns = ""
	}
	var all []client.Object
	printedTables := 0
	for _, r := range c.kinds {
		rns := ns
		if !r.Namespaced {
			rns = ""
		}
		objs, _, err := h.List(ctx, r, rns, client.ListOptions{LabelSelector: c.selector})
		if err != nil {
			return explainTransport(err, server)
		}
		all = append(all, objs...)
		if len(objs) == 0 {
			continue
		}
		switch c.output {
		case "name":
			for _, o := range objs {
				fmt.Fprintln(std.Out, objectRef(r, o.GetName()))
			}
		case "json", "yaml":
		default:
			if printedTables > 0 {
				fmt.Fprintln(std.Out)
			}
			printedTables++
			p := newTablePrinter(std.Out, r, c.output == "wide", c.allNamespaces && r.Namespaced)
			inner, prefix := p.format.cells, qualifiedKind(r)+"/"
			p.format.cells = func(o client.Object, now time.Time) []string {
				cells := inner(o, now)
				if len(cells) > 0 {
					cells[0] = prefix + cells[0]
				}
				return cells
			}
			if err := p.print(objs, c.main.now()); err != nil {
				return err
			}
		}
	}
	if len(all) == 0 {
		fmt.Fprintln(std.Err, noResources(resources.Pods, ns))
		return nil
	}
	if c.output == "json" || c.output == "yaml" {
		for _, o := range all {
			o.SetManagedFields(nil)
		}
		return writeStructured(std.Out, c.output, listOf(all))
	}
	return nil
}
