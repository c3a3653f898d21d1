package agentcmd

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FixError is a failure with the action that fixes it; it prints as
// "<cause>; <fix>".
type FixError struct {
	Cause error
	Fix   string
}

func (e *FixError) Error() string {
	if e.Fix == "" {
		return e.Cause.Error()
	}
	return e.Cause.Error() + "; " + e.Fix
}

func (e *FixError) Unwrap() error { return e.Cause }

// WithFix adds the action that fixes err.
func WithFix(err error, fix string) error { return &FixError{Cause: err, Fix: fix} }

// UsageError is a bad command line: msg, and the fix.
func UsageError(msg, fix string) error { return WithFix(errors.New(msg), fix) }

// ParseLogLevel reads a --log-level value.
func ParseLogLevel(s string) (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return 0, UsageError(fmt.Sprintf("invalid --log-level %q", s), "use debug, info, warn or error")
	}
	return level, nil
}

// FormatError renders err as the single line a command prints on stderr:
// API errors as kubectl does ("Error from server (NotFound): ..."), anything
// else as "error: <cause>; <fix>".
func FormatError(err error) string {
	var line string
	var se apierrors.APIStatus
	if errors.As(err, &se) && !IsFix(err) {
		st := se.Status()
		if st.Reason != "" && st.Reason != metav1.StatusReasonUnknown {
			line = fmt.Sprintf("Error from server (%s): %s", st.Reason, st.Message)
		} else {
			line = "Error from server: " + st.Message
		}
	} else {
		line = "error: " + err.Error()
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(line, "\n", " ")), " ")
}

// IsFix reports whether err carries its fix (a FixError).
func IsFix(err error) bool {
	var fe *FixError
	return errors.As(err, &fe)
}

// ReadTokenFile reads a join token from a file (--token-file).
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", UsageError(fmt.Sprintf("cannot read --token-file: %v", err), "copy the server's join-token file (in its data dir) here")
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", UsageError(fmt.Sprintf("--token-file %s is empty", path), "copy the server's join-token file (in its data dir) here")
	}
	return t, nil
}

// SplitList splits a comma-separated flag value, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
