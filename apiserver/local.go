package apiserver

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/apiserver/strategy"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// NewLocalClient returns a client.Interface that runs the server's request
// logic in process, acting as user (with the given groups): the same
// defaulting, validation, authorization and errors as over HTTP, without
// encoding. The server's own controllers use it.
func NewLocalClient(s *Server, user string, groups ...string) client.Interface {
	return &localClient{s: s, user: UserInfo{Name: user, Groups: append(slices.Clip(groups), authenticatedGroup)}}
}

type localClient struct {
	s    *Server
	user UserInfo
}

var _ client.Interface = (*localClient)(nil)

func (l *localClient) call(r *resources.Resource, namespace, name, sub string) call {
	if !r.Namespaced {
		namespace = ""
	}
	return call{user: l.user, r: r, sub: sub, namespace: namespace, name: name}
}

// err converts any error to the *apierrors.StatusError the HTTP client would return.
func (l *localClient) err(err error) error {
	if err == nil {
		return nil
	}
	return l.s.statusError(err)
}

// own returns a private copy of obj with apiVersion and kind set.
func own(r *resources.Resource, obj resources.Object) client.Object {
	c := obj.DeepCopyObject().(resources.Object)
	r.SetTypeMeta(c)
	return c
}

func dryRunOf(opts client.WriteOptions) bool { return opts.DryRun }

func (l *localClient) Get(ctx context.Context, r *resources.Resource, namespace, name string) (client.Object, error) {
	obj, err := l.s.getObject(ctx, l.call(r, namespace, name, ""))
	if err != nil {
		return nil, l.err(err)
	}
	return own(r, obj), nil
}

func (l *localClient) List(ctx context.Context, r *resources.Resource, namespace string, opts client.ListOptions) ([]client.Object, string, error) {
	return l.list(ctx, r, namespace, opts, own)
}

// ListReadOnly is List without the copies: the items are the store's cached
// objects, shared with the API server and every other reader, and must not
// be modified. The server's controllers' informers list through it (see
// controller/internal/informer), so their caches hold the one decoded copy
// of each object that the store's watch cache already holds.
func (l *localClient) ListReadOnly(ctx context.Context, r *resources.Resource, namespace string, opts client.ListOptions) ([]client.Object, string, error) {
	return l.list(ctx, r, namespace, opts, withTypeMeta)
}

// list lists through the API server's path and hands each item to out: a
// copy the caller owns (own) or the shared object with its type set.
func (l *localClient) list(ctx context.Context, r *resources.Resource, namespace string, opts client.ListOptions,
	out func(*resources.Resource, resources.Object) client.Object) ([]client.Object, string, error) {
	sel, err := parseSelector(r, opts.LabelSelector, opts.FieldSelector)
	if err != nil {
		return nil, "", l.err(err)
	}
	items, rv, err := l.s.listObjects(ctx, l.call(r, namespace, "", ""), sel)
	if err != nil {
		return nil, "", l.err(err)
	}
	objs := make([]client.Object, len(items))
	for i, it := range items {
		objs[i] = out(r, it)
	}
	return objs, strconv.FormatInt(rv, 10), nil
}

func (l *localClient) Watch(ctx context.Context, r *resources.Resource, namespace string, opts client.ListOptions) (watch.Interface, error) {
	return l.watch(ctx, r, namespace, opts, true)
}

// WatchReadOnly is Watch without the copies: event objects are the store's
// cached objects, shared with every other reader, and must not be modified.
// See ListReadOnly.
func (l *localClient) WatchReadOnly(ctx context.Context, r *resources.Resource, namespace string, opts client.ListOptions) (watch.Interface, error) {
	return l.watch(ctx, r, namespace, opts, false)
}

func (l *localClient) watch(ctx context.Context, r *resources.Resource, namespace string, opts client.ListOptions, deepCopy bool) (watch.Interface, error) {
	o := watchOptions{copy: deepCopy}
	var err error
	if o.rv, err = parseResourceVersion(opts.ResourceVersion); err != nil {
		return nil, l.err(err)
	}
	if o.sel, err = parseSelector(r, opts.LabelSelector, opts.FieldSelector); err != nil {
		return nil, l.err(err)
	}
	if opts.TimeoutSeconds < 0 {
		return nil, l.err(apierrors.NewBadRequest(fmt.Sprintf("invalid timeoutSeconds %d", opts.TimeoutSeconds)))
	}
	o.timeout = secondsDuration(opts.TimeoutSeconds)
	w, err := l.s.watchObjects(ctx, l.call(r, namespace, "", ""), o)
	if err != nil {
		return nil, l.err(err)
	}
	return w, nil
}

func (l *localClient) Create(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error) {
	r, c, err := strategy.ClientInput(obj)
	if err != nil {
		return nil, err
	}
	cl := l.call(r, strategy.WriteNamespace(r, c), c.GetName(), "")
	cl.manager = opts.FieldManager
	out, err := l.s.createObject(ctx, cl, c, dryRunOf(opts))
	if err != nil {
		return nil, l.err(err)
	}
	return own(r, out), nil
}

func (l *localClient) Update(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error) {
	return l.update(ctx, obj, opts, "")
}

func (l *localClient) UpdateStatus(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error) {
	return l.update(ctx, obj, opts, "status")
}

func (l *localClient) update(ctx context.Context, obj client.Object, opts client.WriteOptions, sub string) (client.Object, error) {
	r, c, err := strategy.ClientInput(obj)
	if err != nil {
		return nil, err
	}
	if sub != "" && !hasSubresource(r, sub) {
		return nil, l.err(apierrors.NewNotFound(r.GroupResource(), c.GetName()+"/"+sub))
	}
	cl := l.call(r, strategy.WriteNamespace(r, c), c.GetName(), sub)
	cl.manager = opts.FieldManager
	out, err := l.s.updateObject(ctx, cl, c, dryRunOf(opts))
	if err != nil {
		return nil, l.err(err)
	}
	return own(r, out), nil
}

func (l *localClient) Patch(ctx context.Context, r *resources.Resource, namespace, name string, pt types.PatchType, data []byte, opts client.WriteOptions, subresource string) (client.Object, error) {
	if subresource != "" && !hasSubresource(r, subresource) {
		return nil, l.err(apierrors.NewNotFound(r.GroupResource(), name+"/"+subresource))
	}
	c := l.call(r, namespace, name, subresource)
	c.manager = opts.FieldManager
	if pt == types.ApplyYAMLPatchType && subresource == "" {
		out, _, err := l.s.applyBody(ctx, c, data, opts.FieldManager, false, false, dryRunOf(opts))
		if err != nil {
			return nil, l.err(err)
		}
		return own(r, out), nil
	}
	if _, err := patchType(string(pt)); err != nil {
		return nil, l.err(err)
	}
	out, err := l.s.patchObject(ctx, c, pt, data, false, dryRunOf(opts))
	if err != nil {
		return nil, l.err(err)
	}
	return own(r, out), nil
}

func (l *localClient) Delete(ctx context.Context, r *resources.Resource, namespace, name string, opts metav1.DeleteOptions) (client.Object, error) {
	out, err := l.s.deleteObject(ctx, l.call(r, namespace, name, ""), &opts)
	if err != nil {
		return nil, l.err(err)
	}
	return own(r, out), nil
}

func secondsDuration(n int64) time.Duration { return time.Duration(n) * time.Second }

func hasSubresource(r *resources.Resource, sub string) bool {
	for _, s := range r.Subresources {
		if s == sub {
			return true
		}
	}
	return false
}
