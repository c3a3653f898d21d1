// Package agenttest runs the node agent on a real Docker Engine: the agent
// (nodeagent.Agent), the Docker runtime, an in-memory API (client/fake) and
// images the tests build themselves. It holds tests only; like the runtime's
// own Docker tests they skip without an engine unless
// EVERYNODE_REQUIRE_DOCKER=1.
package agenttest
