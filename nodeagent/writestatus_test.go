package nodeagent

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

// TestWriteStatusOnlyWhenItChanges: a running pod's status is written again
// when a field changes (a condition, a time a second later) and not when it
// is the status the API holds, nor when it differs only within a second,
// which the API's encodings cannot carry.
func TestWriteStatusOnlyWhenItChanges(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.seed(newPod("web"))
	e.sync("web")
	p := e.refresh("web")
	st := e.agent.podStateFor(p.UID)
	writes := func() int {
		n := 0
		for _, a := range e.api.Actions() {
			if a.Resource == "pods" && a.Subresource == "status" {
				n++
			}
		}
		return n
	}
	cases := []struct {
		name  string
		edit  func(*metav1.Time) // the pod's start time
		cond  bool               // also flip the Ready condition
		write bool
	}{
		{"the status the API holds", func(*metav1.Time) {}, false, false},
		{"the start time 300 ms later", func(t *metav1.Time) { t.Time = t.Add(300 * time.Millisecond) }, false, false},
		{"the start time a second later", func(t *metav1.Time) { t.Time = t.Add(time.Second) }, false, true},
		{"Ready flipped", func(*metav1.Time) {}, true, true},
	}
	for _, tc := range cases {
		p := e.refresh("web")
		next := *p.Status.DeepCopy()
		if next.StartTime == nil {
			t.Fatal("a running pod without a start time")
		}
		start := next.StartTime.Rfc3339Copy()
		tc.edit(&start)
		next.StartTime = &start
		if tc.cond {
			for i := range next.Conditions {
				if next.Conditions[i].Type == "Ready" {
					next.Conditions[i].Status = "False"
				}
			}
		}
		e.api.ClearActions()
		if err := e.agent.writeStatus(context.Background(), p, st, next); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := writes() == 1; got != tc.write {
			t.Errorf("%s: written %v, want %v", tc.name, got, tc.write)
		}
	}
}
