// Package version is everynode's version, shared by the everynode and
// everynode-agent binaries.
package version

import "runtime/debug"

// stamped is set at link time by `make release`
// (-X github.com/everynode/everynode/internal/version.stamped=v1.2.3); it is
// empty in other builds.
var stamped string

// Get is everynode's version: the one `make release` stamped, else the one
// the Go toolchain recorded, else v0.0.0-dev.
func Get() string {
	if stamped != "" {
		return stamped
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "v0.0.0-dev"
}
