// Package bench is everynode's fleet benchmark as a library: Run starts a
// whole server in process (key material and embedded etcd in a temporary
// directory, the real API server over TLS on 127.0.0.1, the real controllers
// through the in-process client) and N simulated nodes, each a real
// nodeagent.Agent with the fake runtime talking to the API over HTTPS with
// its own node token. It then measures what issue 7 asks for:
//
//   - EtcdFloorS: the floor fixed by the work, one create and one status
//     update per pod (the sizes convergence wrote), issued straight to the
//     same etcd at the best of several writer counts; EtcdReplayS replays
//     the writes convergence actually made (every key, in order), one
//     writer per key; Writes counts them by resource and per pod;
//   - ConvergeS: DaemonSet created → every node's pod Running and Ready,
//     observed through a watch; Ratio = ConvergeS / EtcdFloorS;
//   - RolloutS: image update with maxUnavailable 10% → every pod updated and
//     available;
//   - DetectS: one simulated node killed (gossip member closed without a
//     leave, agent stopped) → its Node Ready≠True; only with gossip, where
//     every simulated node is a memberlist member (LAN profile on loopback);
//   - FalseNotReady: Ready → not Ready transitions of the other nodes, over
//     the whole run or a longer Soak, optionally under a CPULoad;
//   - ServerRSSMB, heap figures, AgentRSSMB (one agent process alone, idle)
//     and the latency of the agents' pod status updates during convergence.
//
// Where the agents run: with Config.AgentProcs = K > 0 they run in K child
// processes of the same binary (Config.AgentsCommand builds one; "everynode
// bench agents" serves it with ServeAgents), each child running its share
// through the same code path as in process: its own HTTP/2 connection pool,
// and a gossip member per agent. The parent drives them over a JSON-lines
// control protocol on the children's stdin and stdout (see control.go), so
// ServerRSSMB and the CPU seconds are the server's own and AgentsRSSMB the
// children's. With AgentProcs = 0 the agents run in the server's process
// (one profile covers the whole system) and share one HTTP/2 pool.
//
// The agents' periodic work is tuned for scale through nodeagent.Config
// (a long NodeStatusPeriod), never skipped: every pod is created, watched,
// started in the fake runtime and reported through the API.
package bench
