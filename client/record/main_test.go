package record

import (
	"testing"

	"github.com/everynode/everynode/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }
