package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	testingclock "k8s.io/utils/clock/testing"

	clientfake "github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

func TestUnreachable(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"refused", errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"), true},
		{"deadline", fmt.Errorf("update: %w", context.DeadlineExceeded), true},
		{"503", apierrors.NewServiceUnavailable("down"), true},
		{"504", apierrors.NewTimeoutError("slow", 1), true},
		{"not found", apierrors.NewNotFound(gr, "x"), false},
		{"conflict", apierrors.NewConflict(gr, "x", errors.New("rv")), false},
		{"forbidden", apierrors.NewForbidden(gr, "x", errors.New("node")), false},
		{"wrapped 503", fmt.Errorf("nodeagent: %w", apierrors.NewServiceUnavailable("down")), true},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("%s: unreachable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAPIHealthPausesWrites(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	h := &apiHealth{clock: clk}
	h.observe(apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "x"))
	if h.paused() {
		t.Fatal("an answer from the server paused the writes")
	}
	h.observe(errors.New("connection refused"))
	if !h.paused() {
		t.Fatal("an unreachable server did not pause the writes")
	}
	clk.Step(apiPause)
	if h.paused() {
		t.Error("still paused after apiPause")
	}
}

func TestStatusWriteSkippedWhilePaused(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.seed(newPod("web"))
	e.api.Fail("update", "pods/status", errors.New("connection refused"))
	p := e.refresh("web")
	if _, err := e.agent.syncPod(context.Background(), p.UID); err == nil {
		t.Fatal("a failed status write was not reported")
	}
	e.api.Fail("update", "pods/status", nil)
	e.api.ClearActions()
	if _, err := e.agent.syncPod(context.Background(), p.UID); !errors.Is(err, errAPIPaused) {
		t.Fatalf("second sync: %v, want the write deferred", err)
	}
	// The first sync's Events (Pulled, Started) are written by the
	// recorder's goroutine and may still be in flight: only they may come.
	var calls []clientfake.Action
	for _, a := range e.api.Actions() {
		if a.Resource != "events" {
			calls = append(calls, a)
		}
	}
	if n := len(calls); n != 0 {
		t.Errorf("%d API calls while paused: %v", n, calls)
	}
	e.clock.Step(apiPause + time.Second)
	got, _ := e.sync("web")
	if got.Status.Phase != "Running" {
		t.Errorf("status after the pause: %+v", got.Status)
	}
}

// TestListEndsThePause: once the pod source lists again, the server
// answers, and the deferred writes go out without waiting out apiPause; a
// failed list keeps them deferred.
func TestListEndsThePause(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.seed(newPod("web"))
	refused := errors.New("connection refused")
	e.api.Fail("update", "pods/status", refused)
	p := e.refresh("web")
	if _, err := e.agent.syncPod(context.Background(), p.UID); err == nil {
		t.Fatal("a failed status write was not reported")
	}
	e.api.Fail("update", "pods/status", nil)
	src := e.agent.source.(*diskSource).inner.(*apiSource)

	e.api.Fail("list", "pods", refused)
	if _, err := src.listAndWatch(context.Background(), &sinkRecorder{}); err == nil {
		t.Fatal("the list did not fail")
	}
	if !e.agent.health.paused() {
		t.Fatal("a failed list ended the pause")
	}

	e.api.Fail("list", "pods", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.listAndWatch(ctx, &sinkRecorder{})
	}()
	defer func() { cancel(); <-done }()
	testkit.Eventually(t, 10*time.Second, func() error {
		if e.agent.health.paused() {
			return errors.New("writes still paused after a successful list")
		}
		return nil
	})
	if got, _ := e.sync("web"); got.Status.Phase != "Running" {
		t.Errorf("status after the list, with no time passed: %+v", got.Status)
	}
}
