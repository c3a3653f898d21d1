// Package integration holds everynode's DaemonSet integration tests (issue 3):
// a real embedded etcd in a temporary directory, the real API server served
// over HTTPS by httptest, the real controllers (controller.RunAll over an
// in-process local client, as in `everynode server`, with a fake gossip
// membership), and simulated nodes that are real nodeagent.Agent instances
// running the in-memory fake container runtime. The agents register their
// Nodes and report their pods Running and Ready through the API over HTTP
// with bearer tokens, so every test exercises the same paths a real cluster
// does.
//
// The package has tests only; `go test -race ./integration/` runs them all.
package integration
