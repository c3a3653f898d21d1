package garbagecollector

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/everynode/everynode/internal/testkit"
)

// TestMain fails the package's run if any goroutine outlives its tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testkit.LeakOptions()...)
}
