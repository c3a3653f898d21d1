package garbagecollector

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/controller/internal/informer"
	"github.com/everynode/everynode/internal/testkit"
)

// TestMain fails the package's run if any goroutine outlives its tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testkit.LeakOptions()...)
}

// TestNewFailureLeavesNoGoroutine: New fails when the shared informers
// already run (it can no longer add its own), and then stops the work
// queue it had started, since no Run will.
func TestNewFailureLeavesNoGoroutine(t *testing.T) {
	checkLeaks := testkit.LeakCheck(t)
	fc := fake.New()
	shared := informer.NewShared(fc)
	shared.Run(context.Background()) // no informers: marks the set running and returns
	if _, err := New(Config{Client: fc, Informers: shared}); err == nil {
		t.Fatal("New succeeded over shared informers that already run")
	}
	checkLeaks()
}
