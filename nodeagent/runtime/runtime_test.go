package runtime

import (
	"errors"
	"fmt"
	"testing"
)

func TestLabelsMatches(t *testing.T) {
	have := map[string]string{LabelNode: "n1", LabelPodUID: "u"}
	tests := []struct {
		filter Labels
		want   bool
	}{
		{nil, true},
		{Labels{LabelNode: "n1"}, true},
		{Labels{LabelNode: "n1", LabelPodUID: "u"}, true},
		{Labels{LabelNode: "n2"}, false},
		{Labels{LabelContainer: ""}, false},
	}
	for _, tt := range tests {
		if got := tt.filter.Matches(have); got != tt.want {
			t.Errorf("%v.Matches = %v, want %v", tt.filter, got, tt.want)
		}
	}
}

func TestErrorKinds(t *testing.T) {
	base := errors.New("registry said no")
	err := fmt.Errorf("agent: %w", &Error{Op: "pull", Kind: PullFailed, Subject: "app:v1", Err: base})
	if !IsPullFailed(err) || IsImageNotFound(err) || IsNotFound(err) || KindOf(err) != PullFailed {
		t.Errorf("kind checks on %v", err)
	}
	if !errors.Is(err, base) {
		t.Error("cause not unwrapped")
	}
	if got, want := err.Error(), "agent: runtime: pull app:v1: image pull failed: registry said no"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if KindOf(base) != Other || IsNotFound(nil) {
		t.Error("unclassified errors")
	}
	if !IsNotFound(Errorf("stop", NotFound, "c1", "gone")) {
		t.Error("Errorf kind")
	}
}
