// Package client is the one way everynode's parts speak to the API: the CLI and
// the agents over HTTPS, the server's own controllers in process. Both
// implementations satisfy Interface and behave identically (same validation,
// defaults and errors, which are apimachinery *errors.StatusError values, so
// callers test them with apierrors.IsNotFound, IsConflict and friends).
package client

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	resources "github.com/everynode/everynode/resources/core"
)

// Object is any API object everynode serves.
type Object = resources.Object

// ListOptions selects objects in List and Watch.
type ListOptions struct {
	// LabelSelector is a label selector string ("app=x,tier!=db"); empty selects all.
	LabelSelector string
	// FieldSelector is a field selector string ("spec.nodeName=n1"); empty selects all.
	FieldSelector string
	// ResourceVersion: for Watch, deliver events after this version ("" or "0":
	// synthetic ADDED events for the current state first). For List it is ignored.
	ResourceVersion string
	// TimeoutSeconds ends a Watch after this many seconds; 0 means no limit.
	TimeoutSeconds int64
}

// WriteOptions are the options every write takes.
type WriteOptions struct {
	// DryRun validates and returns the result without storing it.
	DryRun bool
	// FieldManager names the writer, as kubectl's fieldManager query parameter.
	FieldManager string
}

// Interface is the API as a Go caller sees it. Namespace is ignored for
// cluster-scoped resources; an empty namespace on List and Watch of a namespaced
// resource means all namespaces. Objects passed in are not modified; returned
// objects are fresh copies the caller owns, with apiVersion and kind set.
//
// Implementations are safe for concurrent use.
type Interface interface {
	Get(ctx context.Context, r *resources.Resource, namespace, name string) (Object, error)
	// List returns the items and the list's resourceVersion.
	List(ctx context.Context, r *resources.Resource, namespace string, opts ListOptions) ([]Object, string, error)
	// Watch streams changes until ctx ends, the watcher is stopped, or the
	// server ends the stream (the result channel is then closed). A resourceVersion
	// too old to serve arrives as a watch.Error event carrying a 410 Status.
	Watch(ctx context.Context, r *resources.Resource, namespace string, opts ListOptions) (watch.Interface, error)
	Create(ctx context.Context, obj Object, opts WriteOptions) (Object, error)
	// Update replaces the object; a non-empty resourceVersion must match (409 otherwise).
	Update(ctx context.Context, obj Object, opts WriteOptions) (Object, error)
	// UpdateStatus replaces only the status, through the /status subresource.
	UpdateStatus(ctx context.Context, obj Object, opts WriteOptions) (Object, error)
	// Patch applies a strategic-merge, JSON-merge or JSON patch; subresource is "" or "status".
	Patch(ctx context.Context, r *resources.Resource, namespace, name string, pt types.PatchType, data []byte, opts WriteOptions, subresource string) (Object, error)
	// Delete deletes one object. The returned object is the deleted object, or
	// the object still present when deletion waits on finalizers.
	Delete(ctx context.Context, r *resources.Resource, namespace, name string, opts metav1.DeleteOptions) (Object, error)
}
