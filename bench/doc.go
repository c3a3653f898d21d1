// Package bench is everynode's fleet benchmark as a library: Run starts a
// whole server in process (key material and embedded etcd in a temporary
// directory, the real API server over TLS on 127.0.0.1, the real controllers
// through the in-process client) and N simulated nodes, each a real
// nodeagent.Agent with the fake runtime talking to the API over HTTPS with
// its own node token (the agents share one HTTP/2 connection pool). It then
// measures what issue 7 asks for:
//
//   - EtcdFloorS: the writes convergence needed (pod creates, pod status
//     updates, DaemonSet status updates, with the sizes observed), issued
//     straight to the same etcd, one writer per pod as the agents are;
//   - ConvergeS: DaemonSet created → every node's pod Running and Ready,
//     observed through a watch; Ratio = ConvergeS / EtcdFloorS;
//   - RolloutS: image update with maxUnavailable 10% → every pod updated and
//     available;
//   - DetectS: one simulated node killed (gossip member closed without a
//     leave, agent stopped) → its Node Ready≠True; only with gossip, where
//     every simulated node is a memberlist member (LAN profile on loopback);
//   - ServerRSSMB (the whole process: server and simulated agents), heap
//     figures, AgentRSSMB (one agent process alone, idle) and the latency of
//     the agents' pod status updates during convergence.
//
// The agents' periodic work is tuned for scale through nodeagent.Config
// (a long NodeStatusPeriod), never skipped: every pod is created, watched,
// started in the fake runtime and reported through the API.
package bench
