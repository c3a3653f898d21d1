package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/everynode/everynode/apiserver/printers"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// column is one column of kubectl's human-readable output.
type column struct {
	name string
	wide bool // shown only with -o wide (priority 1 in a Table)
}

// tableFormat is the columns of one resource and how to compute a row.
type tableFormat struct {
	columns []column
	cells   func(obj client.Object, now time.Time) []string
}

// formatFor returns kubectl's server-side printer columns for r; the cells
// come from package printers, which the API server's Table responses use too.
func formatFor(r *resources.Resource) tableFormat {
	defs := printers.Columns(schema.GroupKind{Group: r.Group, Kind: r.Kind})
	cols := make([]column, len(defs))
	for i, d := range defs {
		cols[i] = column{name: strings.ToUpper(d.Name), wide: d.Priority > 0}
	}
	return tableFormat{columns: cols, cells: func(o client.Object, now time.Time) []string {
		cells := printers.Cells(o, now)
		out := make([]string, len(cells))
		for i, c := range cells {
			out[i] = printers.Text(c)
		}
		return out
	}}
}

// tablePrinter writes rows aligned like kubectl (three spaces between columns).
type tablePrinter struct {
	tw            *tabwriter.Writer
	format        tableFormat
	wide          bool
	withNamespace bool
	headerDone    bool
}

func newTablePrinter(w io.Writer, r *resources.Resource, wide, withNamespace bool) *tablePrinter {
	return &tablePrinter{
		tw:            tabwriter.NewWriter(w, 6, 4, 3, ' ', 0),
		format:        formatFor(r),
		wide:          wide,
		withNamespace: withNamespace,
	}
}

func (p *tablePrinter) row(cells []string, namespace string) {
	var out []string
	if p.withNamespace {
		out = append(out, namespace)
	}
	for i, c := range p.format.columns {
		if c.wide && !p.wide {
			continue
		}
		v := ""
		if i < len(cells) {
			v = cells[i]
		}
		out = append(out, v)
	}
	fmt.Fprintln(p.tw, strings.Join(out, "\t"))
}

// print writes objects (with a header first, once) and flushes.
func (p *tablePrinter) print(objs []client.Object, now time.Time) error {
	if !p.headerDone {
		var hdr []string
		for _, c := range p.format.columns {
			hdr = append(hdr, c.name)
		}
		p.row(hdr, "NAMESPACE")
		p.headerDone = true
	}
	for _, o := range objs {
		p.row(p.format.cells(o, now), o.GetNamespace())
	}
	return p.tw.Flush()
}

func age(t metav1.Time, now time.Time) string { return printers.Age(t, now) }

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func eventSource(ev *corev1.Event) string { return printers.EventSource(ev) }

func revisionCells(o client.Object, now time.Time) []string {
	return formatFor(resources.ControllerRevisions).cells(o, now)
}

func eventCells(o client.Object, now time.Time) []string {
	return formatFor(resources.Events).cells(o, now)
}
