package store

import (
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/everynode/everynode/resources"
)

// Kind classifies a store error so callers can decide what to do with it
// (the API server maps each kind to one HTTP status).
type Kind int

// The error kinds the store returns.
const (
	// Internal is an unexpected failure (etcd unavailable, undecodable data).
	// It is the zero Kind so that an unclassified error is never mistaken for
	// a benign one.
	Internal Kind = iota
	// NotFound: the object does not exist.
	NotFound
	// AlreadyExists: Create found an object under the same key.
	AlreadyExists
	// Conflict: a resourceVersion or UID precondition did not hold. The caller
	// may re-read and retry.
	Conflict
	// Gone: the requested resourceVersion is no longer (or not yet) served;
	// the caller must re-list.
	Gone
	// Invalid: the request itself is malformed (missing name, bad selector).
	Invalid
)

// String returns the kind's name ("NotFound").
func (k Kind) String() string {
	switch k {
	case NotFound:
		return "NotFound"
	case AlreadyExists:
		return "AlreadyExists"
	case Conflict:
		return "Conflict"
	case Gone:
		return "Gone"
	case Invalid:
		return "Invalid"
	default:
		return "Internal"
	}
}

// Retryable reports whether repeating the operation after re-reading the
// current state can succeed (true for Conflict only).
func (k Kind) Retryable() bool { return k == Conflict }

// Error is the store's typed error. Resource, Namespace and Name say which
// object the operation was about (Name is empty for List and Watch); Err is
// the underlying cause or detail and may be nil.
type Error struct {
	Kind      Kind
	Resource  *resources.Resource
	Namespace string
	Name      string
	Err       error
}

// Error formats the error the way Kubernetes phrases the same condition, so
// the message can be shown to users as is.
func (e *Error) Error() string {
	what := "object"
	if e.Resource != nil {
		what = e.Resource.GroupResource().String()
	}
	obj := e.Name
	if e.Namespace != "" && e.Name != "" {
		obj = e.Namespace + "/" + e.Name
	}
	var msg string
	switch e.Kind {
	case NotFound:
		msg = fmt.Sprintf("%s %q not found", what, obj)
	case AlreadyExists:
		msg = fmt.Sprintf("%s %q already exists", what, obj)
	case Conflict:
		msg = fmt.Sprintf("operation cannot be fulfilled on %s %q", what, obj)
	case Gone:
		msg = fmt.Sprintf("%s: resource version gone", what)
	case Invalid:
		msg = fmt.Sprintf("invalid request for %s %q", what, obj)
	default:
		msg = fmt.Sprintf("internal error on %s %q", what, obj)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of the first *Error in err's chain, or Internal if
// there is none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Internal
}

func isKind(err error, k Kind) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == k
}

// IsNotFound reports whether err (or an error it wraps) is a NotFound *Error.
func IsNotFound(err error) bool { return isKind(err, NotFound) }

// IsAlreadyExists reports whether err (or an error it wraps) is an AlreadyExists *Error.
func IsAlreadyExists(err error) bool { return isKind(err, AlreadyExists) }

// IsConflict reports whether err (or an error it wraps) is a Conflict *Error.
func IsConflict(err error) bool { return isKind(err, Conflict) }

// IsGone reports whether err (or an error it wraps) is a Gone *Error.
func IsGone(err error) bool { return isKind(err, Gone) }

// IsInvalid reports whether err (or an error it wraps) is an Invalid *Error.
func IsInvalid(err error) bool { return isKind(err, Invalid) }

// newError builds a typed error about one object.
func newError(k Kind, r *resources.Resource, namespace, name string, err error) *Error {
	return &Error{Kind: k, Resource: r, Namespace: namespace, Name: name, Err: err}
}

// errClosed is the cause returned by operations on a closed Store.
var errClosed = errors.New("store is closed")

// errModified is the Conflict detail Kubernetes uses for a stale resourceVersion.
var errModified = errors.New("the object has been modified; please apply your changes to the latest version and try again")

// etcdUnavailable are etcd's answers when it cannot commit now: no leader
// (a majority of the members is unreachable) or a leader election under
// way.
var etcdUnavailable = []error{
	rpctypes.ErrTimeout, rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrTimeoutDueToLeaderFail,
	rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrUnhealthy, rpctypes.ErrGRPCNotCapable,
}

// IsUnavailable reports whether err is etcd saying it cannot serve the
// request now because its cluster has no quorum or no leader (docs/ha.md):
// the caller should retry later, and a write may or may not have been
// applied.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, e := range etcdUnavailable {
		if errors.Is(err, e) || strings.Contains(msg, e.Error()) {
			return true
		}
	}
	return false
}
