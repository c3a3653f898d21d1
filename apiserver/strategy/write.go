package strategy

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/resources"
)

// conflictMessage is Kubernetes' text for a stale resourceVersion.
const conflictMessage = "the object has been modified; please apply your changes to the latest version and try again"

// Op names one write: the resource, the subresource ("" or "status"), the
// field manager recorded in managedFields, and whether it is a server-side
// apply (whose managedFields the field manager's Apply already computed).
type Op struct {
	Resource    *resources.Resource
	Subresource string
	Manager     string
	Applying    bool
}

// Writer runs the write rules the API server and client/fake share, in
// Kubernetes' order (k8s.io/apiserver pkg/registry/generic/registry/store.go
// Create and Update): defaults, server-set metadata, validation, then
// managedFields. Storage, authorization and admission are the caller's.
type Writer struct {
	// Now is the clock for creationTimestamp; nil means time.Now.
	Now func() time.Time
	// NewUID makes a new object's uid; required.
	NewUID func() types.UID
	// Fields tracks managedFields; nil leaves them as the client sent them.
	Fields *FieldManagers
}

func (w *Writer) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}

// CreateKey completes a new object's key from a request on namespace: an
// empty namespace is filled in (a different one is a 400), cluster-scoped
// objects get none, and an empty name with a generateName gets a generated
// one (generated reports it, for the caller's retry on a taken name).
func CreateKey(r *resources.Resource, namespace string, obj resources.Object) (generated bool, err error) {
	if r.Namespaced {
		switch ns := obj.GetNamespace(); {
		case ns == "":
			obj.SetNamespace(namespace)
		case ns != namespace:
			return false, apierrors.NewBadRequest(fmt.Sprintf(
				"the namespace of the provided object (%s) does not match the namespace sent on the request (%s)", ns, namespace))
		}
	} else {
		obj.SetNamespace("")
	}
	generated = obj.GetName() == "" && obj.GetGenerateName() != ""
	if generated {
		obj.SetName(generateName(obj.GetGenerateName()))
	}
	return generated, nil
}

// GenerateName returns a new name from obj's generateName, for a retry after
// the generated one was taken.
func GenerateName(obj resources.Object) string { return generateName(obj.GetGenerateName()) }

// Create defaults, prepares and validates a new object (owned by the call,
// which may modify it) and records op's manager in its managedFields. The
// error is the 422 Invalid of ValidateCreate.
func (w *Writer) Create(op Op, obj resources.Object) (resources.Object, error) {
	r := op.Resource
	r.SetTypeMeta(obj)
	sent := obj.GetManagedFields()
	if pod, ok := obj.(*corev1.Pod); ok {
		DefaultTolerations(pod) // the DefaultTolerationSeconds admission
	}
	Default(r, obj)
	PrepareForCreate(r, obj, w.now(), w.NewUID)
	if errs := ValidateCreate(r, obj); len(errs) > 0 {
		return nil, InvalidError(r, obj.GetName(), errs)
	}
	obj = w.Fields.track(op, nil, obj, sent)
	r.SetTypeMeta(obj)
	return obj, nil
}

// CheckKey checks that an object sent to namespace/name (an update, a patch
// result or an apply body) names that object; an empty namespace is filled
// in and cluster-scoped objects get none.
func CheckKey(r *resources.Resource, namespace, name string, obj resources.Object) error {
	if obj.GetName() != name {
		return apierrors.NewBadRequest(fmt.Sprintf(
			"the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), name))
	}
	if !r.Namespaced {
		obj.SetNamespace("")
		return nil
	}
	switch ns := obj.GetNamespace(); {
	case ns == "":
		obj.SetNamespace(namespace)
	case ns != namespace:
		return apierrors.NewBadRequest(fmt.Sprintf(
			"the namespace of the object (%s) does not match the namespace on the request (%s)", ns, namespace))
	}
	return nil
}

// CheckUIDPrecondition is the precondition a PUT's metadata.uid makes, as
// kube-apiserver's storage checks it before anything else: a uid other than
// cur's is a 409 Conflict ("Precondition failed: UID in precondition: …").
// (A patch that carries another uid is refused by ValidateUpdate instead,
// 422, as in Kubernetes.)
func CheckUIDPrecondition(r *resources.Resource, next, cur resources.Object) error {
	if uid := next.GetUID(); uid != "" {
		return CheckPreconditions(r, cur, &metav1.Preconditions{UID: &uid})
	}
	return nil
}

// CheckResourceVersion is the optimistic-concurrency precondition of an
// update or patch: a non-empty resourceVersion in next must be cur's (409
// Conflict otherwise). It then gives next cur's resourceVersion.
func CheckResourceVersion(r *resources.Resource, next, cur resources.Object) error {
	if rv := next.GetResourceVersion(); rv != "" && rv != cur.GetResourceVersion() {
		return ConflictError(r.GroupResource(), cur.GetName())
	}
	next.SetResourceVersion(cur.GetResourceVersion())
	return nil
}

// ConflictError is the 409 for a resourceVersion that does not match.
func ConflictError(gr schema.GroupResource, name string) error {
	return apierrors.NewConflict(gr, name, errors.New(conflictMessage))
}

// Update defaults, prepares (PrepareForUpdate, or PrepareForStatusUpdate for
// the status subresource) and validates next, the new state of cur, and
// records op's manager in its managedFields. next must have passed
// CheckResourceVersion. The error is the 422 Invalid of ValidateUpdate.
func (w *Writer) Update(op Op, next, cur resources.Object) (resources.Object, error) {
	r := op.Resource
	r.SetTypeMeta(next)
	sent := next.GetManagedFields()
	Default(r, next)
	if op.Subresource == "status" {
		PrepareForStatusUpdate(r, next, cur)
	} else {
		PrepareForUpdate(r, next, cur)
	}
	if errs := ValidateUpdate(r, next, cur); len(errs) > 0 {
		return nil, InvalidError(r, next.GetName(), errs)
	}
	next = w.Fields.track(op, cur, next, sent)
	r.SetTypeMeta(next)
	return next, nil
}

// FinishedDeleting reports whether an object marked for deletion has nothing
// left to wait for: no finalizers and no grace period running. An update that
// leaves an object so is followed by its removal.
func FinishedDeleting(obj resources.Object) bool {
	if obj.GetDeletionTimestamp() == nil || len(obj.GetFinalizers()) > 0 {
		return false
	}
	g := obj.GetDeletionGracePeriodSeconds()
	return g == nil || *g == 0
}

// ClientInput is what the in-process clients (the API server's local client
// and client/fake) do with an object a caller passes to a write, as the HTTP
// client's encoding does: resolve its resource (400 for types the API does
// not serve or an apiVersion/kind that does not match the Go type) and return
// a private copy with apiVersion and kind set.
func ClientInput(obj resources.Object) (*resources.Resource, resources.Object, error) {
	if obj == nil {
		return nil, nil, apierrors.NewBadRequest("no object given")
	}
	r := resources.ForObject(obj)
	if r == nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("unsupported object type %T", obj))
	}
	if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() && gvk != r.GVK() {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf(
			"the object's apiVersion/kind %s does not match its type %s", gvk, r.GVK()))
	}
	c, ok := obj.DeepCopyObject().(resources.Object)
	if !ok {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("unsupported object type %T", obj))
	}
	r.SetTypeMeta(c)
	return r, c, nil
}

// WriteNamespace is the namespace a client sends a write of obj to: its own,
// or "default" for a namespaced object without one; none when cluster-scoped.
func WriteNamespace(r *resources.Resource, obj resources.Object) string {
	if !r.Namespaced {
		return ""
	}
	if ns := obj.GetNamespace(); ns != "" {
		return ns
	}
	return metav1.NamespaceDefault
}
