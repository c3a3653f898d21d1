package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// DeleteCommand is "everynode delete KIND NAME... | -l SELECTOR".
type DeleteCommand struct {
	main *Main

	clientFlags
	cascade        string
	selector       string
	wait           bool
	timeout        time.Duration
	ignoreNotFound bool

	r      *resources.Resource
	names  []string
	policy metav1.DeletionPropagation
}

func (c *DeleteCommand) flags(fs *pflag.FlagSet) {
	fs.StringVar(&c.cascade, "cascade", "background", "what happens to dependents: background, foreground or orphan")
	fs.StringVarP(&c.selector, "selector", "l", "", "delete every object matching this label selector")
	fs.BoolVar(&c.wait, "wait", true, "wait until the objects are gone")
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "how long --wait waits per object")
	fs.BoolVar(&c.ignoreNotFound, "ignore-not-found", false, "treat a missing object as deleted")
}

func (c *DeleteCommand) complete(pos []string) error {
	var err error
	if c.r, c.names, err = splitKindNames(pos); err != nil {
		return err
	}
	if c.r == nil {
		return usageError("you must specify the type of resource to delete", "use one of: "+kindList())
	}
	switch {
	case len(c.names) == 0 && c.selector == "":
		return usageError("resource name may not be empty", "give NAME or -l SELECTOR")
	case len(c.names) > 0 && c.selector != "":
		return usageError("name cannot be provided when a selector is specified", "give names or -l, not both")
	}
	switch c.cascade {
	case "background", "true":
		c.policy = metav1.DeletePropagationBackground
	case "foreground":
		c.policy = metav1.DeletePropagationForeground
	case "orphan", "false":
		c.policy = metav1.DeletePropagationOrphan
	default:
		return usageError(fmt.Sprintf("invalid --cascade %q", c.cascade), "use background, foreground or orphan")
	}
	return nil
}

// Run implements the command.
func (c *DeleteCommand) Run(ctx context.Context, std IO) error {
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	ns := c.ns()
	names := c.names
	if c.selector != "" {
		objs, _, err := h.List(ctx, c.r, ns, client.ListOptions{LabelSelector: c.selector})
		if err != nil {
			return explainTransport(err, h.Server())
		}
		for _, o := range objs {
			names = append(names, o.GetName())
		}
		if len(names) == 0 {
			fmt.Fprintln(std.Err, noResources(c.r, ns))
			return nil
		}
	}
	return eachName(ctx, names, func(err error) { fmt.Fprintln(std.Err, FormatError(err)) }, func(ctx context.Context, name string) error {
		policy := c.policy
		deleted, err := h.Delete(ctx, c.r, ns, name, metav1.DeleteOptions{PropagationPolicy: &policy})
		if apierrors.IsNotFound(err) && c.ignoreNotFound {
			return nil
		}
		if err != nil {
			return explainTransport(err, h.Server())
		}
		fmt.Fprintf(std.Out, "%s %q deleted\n", qualifiedKind(c.r), name)
		if !c.wait {
			return nil
		}
		uid := ""
		if deleted != nil {
			uid = string(deleted.GetUID())
		}
		return waitDeleted(ctx, h, c.r, ns, name, uid, c.timeout)
	})
}

// waitDeleted returns once the object (with this uid, when known) is gone.
func waitDeleted(ctx context.Context, h client.Interface, r *resources.Resource, ns, name, uid string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	timedOut := func() error {
		return withFix(fmt.Errorf("timed out after %s waiting for %s %q to be deleted", timeout, qualifiedKind(r), name),
			"it is waiting on finalizers or dependents; check it with \"everynode describe\", or pass --wait=false")
	}
	for {
		obj, err := h.Get(ctx, r, ns, name)
		if apierrors.IsNotFound(err) || (err == nil && uid != "" && string(obj.GetUID()) != uid) {
			return nil
		}
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return timedOut()
			}
			return err
		}
		w, err := h.Watch(ctx, r, ns, client.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: obj.GetResourceVersion()})
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return timedOut()
			}
			return err
		}
		gone := watchUntilDeleted(ctx, w)
		w.Stop()
		if gone {
			return nil
		}
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return timedOut()
			}
			return ctx.Err()
		}
		// The stream ended or failed (e.g. 410): look again.
	}
}

func watchUntilDeleted(ctx context.Context, w watch.Interface) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return false
			}
			if ev.Type == watch.Deleted {
				return true
			}
		}
	}
}
