// Package release holds the test of `make release`: the binaries it builds
// for the boards everynode supports are static, stripped, stamped with the
// version, listed in SHA256SUMS, and run on their architecture under
// qemu-user — `everynode version` and an agent joining an amd64 server.
// docs/edge.md §Release binaries describes the binaries.
package release
