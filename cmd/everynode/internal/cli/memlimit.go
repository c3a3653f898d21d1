package cli

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// minMemoryLimit is the smallest --memory-limit accepted: below it an
// idle server's own heap does not fit, and the runtime would collect
// without pause.
const minMemoryLimit = 32 << 20

// memoryLimitUsage is the --memory-limit help of "server" and "bench fleet".
const memoryLimitUsage = "soft memory limit of the server's Go runtime, a size such as 256Mi or 1Gi (overrides GOMEMLIMIT); none: the runtime's default (trades CPU for memory: docs/benchmarks.md, \"Server memory\")"

// parseMemoryLimit reads a --memory-limit value into a
// server.Config.MemoryLimit (0: none).
func parseMemoryLimit(s string) (int64, error) {
	switch s {
	case "none", "":
		return 0, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, usageError(fmt.Sprintf("invalid --memory-limit %q", s), "use none or a size such as 256Mi or 1Gi")
	}
	b, ok := q.AsInt64()
	if !ok || b < minMemoryLimit {
		return 0, usageError(fmt.Sprintf("--memory-limit %s is below 32Mi", s), "use at least 32Mi, or none")
	}
	return b, nil
}
