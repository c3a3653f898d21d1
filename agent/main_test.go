package agent

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/everynode/everynode/internal/testkit"
)

// TestMain fails the package's run if any test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testkit.LeakOptions()...)
}
