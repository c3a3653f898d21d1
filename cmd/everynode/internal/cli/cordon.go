package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// CordonCommand is "everynode cordon NAME" and, with uncordon set,
// "everynode uncordon NAME".
type CordonCommand struct {
	main     *Main
	uncordon bool

	clientFlags
	selector string
	names    []string
}

func (c *CordonCommand) verb() string {
	if c.uncordon {
		return "uncordon"
	}
	return "cordon"
}

func (c *CordonCommand) flags(fs *pflag.FlagSet) {
	fs.StringVarP(&c.selector, "selector", "l", "", "every node matching this label selector")
}

func (c *CordonCommand) complete(pos []string) error {
	names, err := nodeNamesArg(pos)
	if err != nil {
		return err
	}
	c.names = names
	if len(c.names) == 0 && c.selector == "" {
		return usageError("USAGE: "+c.verb()+" NODE [flags]", "name a node, or pass -l SELECTOR")
	}
	return nil
}

// nodeNamesArg accepts "N", "node/N" and "node N" forms.
func nodeNamesArg(pos []string) ([]string, error) {
	var names []string
	for i, a := range pos {
		if i == 0 && len(pos) > 1 {
			if r, err := resolveKind(a); err == nil && r == resources.Nodes {
				continue
			}
		}
		if kind, name, ok := strings.Cut(a, "/"); ok {
			if r, err := resolveKind(kind); err != nil || r != resources.Nodes {
				return nil, usageError(fmt.Sprintf("%q is not a node", a), "name nodes as NAME or node/NAME")
			}
			a = name
		}
		names = append(names, a)
	}
	return names, nil
}

// Run implements the command.
func (c *CordonCommand) Run(ctx context.Context, std IO) error {
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	return forEachTarget(ctx, h, resources.Nodes, "", c.names, c.selector, std.Err, func(ctx context.Context, name string) error {
		return setUnschedulable(ctx, h, name, !c.uncordon, std.Out)
	})
}

// cordonPatch is the strategic merge patch kubectl sends.
func cordonPatch(cordon bool) []byte {
	if cordon {
		return []byte(`{"spec":{"unschedulable":true}}`)
	}
	return []byte(`{"spec":{"unschedulable":null}}`)
}

// setUnschedulable cordons or uncordons a node, printing kubectl's line.
func setUnschedulable(ctx context.Context, h client.Interface, name string, cordon bool, out io.Writer) error {
	obj, err := h.Get(ctx, resources.Nodes, "", name)
	if err != nil {
		return err
	}
	node := obj.(*corev1.Node)
	word := "cordoned"
	if !cordon {
		word = "uncordoned"
	}
	if node.Spec.Unschedulable == cordon {
		_, err := fmt.Fprintf(out, "node/%s already %s\n", name, word)
		return err
	}
	if _, err := h.Patch(ctx, resources.Nodes, "", name, types.StrategicMergePatchType, cordonPatch(cordon), client.WriteOptions{}, ""); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "node/%s %s\n", name, word)
	return err
}
