// Package integration holds everynode's integration tests.
//
// The DaemonSet tests of issue 3 (cluster_test.go and the files that use it)
// run everything in process: a real embedded etcd in a temporary directory,
// the real API server served over HTTPS by httptest, the real controllers
// (controller.RunAll over an in-process local client, as `everynode server`
// runs them, with a fake gossip membership), and simulated nodes that are
// real nodeagent.Agent instances on the in-memory fake container runtime.
// The agents register their Nodes and report their pods Running and Ready
// through the API over HTTP with bearer tokens, so the tests exercise the
// paths a real cluster does: placement, node changes, taints, failed pods,
// rolling updates (checked at every intermediate state), OnDelete, history
// and rollback, adoption, cascading deletion, node loss and controller
// restarts.
//
// join_test.go runs the built binary instead: a server and agents as
// separate processes. The multihost sub-package runs hosts as containers.
//
// There are tests only; `go test -race ./integration/` runs them.
package integration
