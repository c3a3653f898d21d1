package server

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/everynode/everynode/internal/testkit"
)

// TestMain fails the package's run if any test leaves a goroutine behind.
// Started with attackEnv set, the binary is instead the unprivileged helper
// of TestLocalUserCannotReachEtcdOrSecrets and runs no test.
func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(attackEnv); ok {
		os.Exit(runAttack(spec))
	}
	goleak.VerifyTestMain(m, testkit.LeakOptions()...)
}
