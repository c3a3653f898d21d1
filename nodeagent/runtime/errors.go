package runtime

import (
	"errors"
	"fmt"
)

// Kind classifies runtime errors the agent decides on.
type Kind int

// Error kinds.
const (
	// Other is any error not classified below.
	Other Kind = iota
	// NotFound: the container does not exist.
	NotFound
	// NotRunning: the operation needs a running container (Exec).
	NotRunning
	// ImageNotFound: the image is not present locally (ImageStatus,
	// CreateContainer) or the registry does not know it (PullImage).
	ImageNotFound
	// PullFailed: the pull did not succeed (registry unreachable, denied).
	PullFailed
	// Invalid: the spec asks for something the runtime cannot do.
	Invalid
	// MountFailed: a volume could not be set up (a hostPath type check
	// failed); the Error's Subject is the volume's name and its cause
	// kubelet's message. The agent retries, as kubelet retries mounts.
	MountFailed
)

func (k Kind) String() string {
	switch k {
	case NotFound:
		return "container not found"
	case NotRunning:
		return "container not running"
	case ImageNotFound:
		return "image not found"
	case PullFailed:
		return "image pull failed"
	case Invalid:
		return "invalid container spec"
	case MountFailed:
		return "volume setup failed"
	default:
		return "runtime error"
	}
}

// Error is a runtime error with its operation, kind and subject.
type Error struct {
	// Op is the operation ("pull", "create", "start", "exec", …).
	Op string
	// Kind classifies the failure.
	Kind Kind
	// Subject is the image reference or container ID concerned.
	Subject string
	// Err is the underlying error, may be nil.
	Err error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("runtime: %s %s: %s", e.Op, e.Subject, e.Kind)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error of kind for op on subject, with a formatted cause.
func Errorf(op string, kind Kind, subject, format string, args ...any) error {
	return &Error{Op: op, Kind: kind, Subject: subject, Err: fmt.Errorf(format, args...)}
}

// KindOf returns the kind of the first *Error in err's chain, Other if none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Other
}

// IsNotFound reports whether err says the container does not exist.
func IsNotFound(err error) bool { return err != nil && KindOf(err) == NotFound }

// IsImageNotFound reports whether err says the image is absent or unknown.
func IsImageNotFound(err error) bool { return err != nil && KindOf(err) == ImageNotFound }

// IsPullFailed reports whether err says an image pull failed.
func IsPullFailed(err error) bool { return err != nil && KindOf(err) == PullFailed }

// IsMountFailed reports whether err says a volume could not be set up.
func IsMountFailed(err error) bool { return err != nil && KindOf(err) == MountFailed }
