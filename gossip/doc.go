// Package gossip is everynode's cluster membership: who is alive, at which address, in
// which role. Servers and agents each run one Member; it is the only user of
// hashicorp/memberlist (SWIM failure detection with the Lifeguard extensions), and none of
// memberlist's types appear in its API.
//
// Use:
//
//	cfg := gossip.DefaultLANConfig() // or DefaultWANConfig, DefaultLocalConfig
//	cfg.Name, cfg.Key = nodeName, key32 // Key: 32 bytes from the cluster secret
//	cfg.Meta = gossip.Meta{Role: gossip.RoleAgent, AgentAddr: "10.0.0.7:10250"}
//	m, err := gossip.New(cfg)        // binds, starts probing; alone
//	n, err := m.Join(seeds)          // seeds: LocalAddr() of servers
//	for name := range m.Hints() { …look at m.Members() again… }
//	m.Leave(5 * time.Second)         // the others will list us Left…
//	m.Close()                        // …without Leave, they detect us Dead
//
// All gossip is encrypted and authenticated with AES-256-GCM under Config.Key; a member
// with another key cannot join (Join fails and no one lists it).
//
// # Hints and Members
//
// Hints delivers member names whose state or metadata changed. memberlist calls its
// delegates from its network and timer goroutines, so a hint is offered with a
// non-blocking send into a buffered channel and dropped when the buffer is full: a
// consumer (the node lifecycle controller) must treat hints as "look again soon" and also
// reconcile Members on a ticker. Members lists every known member with its State: Alive,
// Dead (it stopped answering: crash, power loss, network cut, Close without Leave) or Left
// (it called Leave). memberlist itself does not tell its delegates a crash from a leave,
// so Leave first gossips a leave intent naming the member's instance (a random id per New
// carried in the metadata, so a restarted member is never mistaken for its departing
// former self) and sends it over TCP to every live server member, which decide the
// Node's Ready condition, so a lost datagram cannot make a graceful stop look like a
// crash; receivers pass it on and keep it in memberlist's push/pull state. A
// member whose leave overtook its intent is listed Dead until the intent arrives, then
// Left. memberlist v0.5.4 does not surface suspicion either, so a suspect member is listed
// Alive until it is declared Dead. Dead and Left members stay listed for an hour.
//
// # Failure detection: the arithmetic
//
// For a member that crashes at t = 0 in a cluster of N members:
//
//	detection ≈ wait for a probe + one failed probe + suspicion timeout (+ gossip spread)
//
// where:
//   - Wait for a probe: every member probes one other member per ProbeInterval (PI), in
//     a shuffled round robin, so the crashed one is probed about once per PI cluster-wide:
//     0 to PI, about PI/2 on average.
//   - A failed probe takes exactly one PI: a direct UDP ping waits ProbeTimeout for its
//     ack, then IndirectChecks peers ping the member on our behalf and a TCP ping is tried;
//     only if the whole PI passes without any ack does the prober mark it Suspect.
//   - Suspicion lasts SuspicionMult × max(1, log10 N) × PI once k = SuspicionMult − 2 other
//     members have independently confirmed it (each confirmation is another member's own
//     failed probe, about one per PI); without confirmations it lasts
//     SuspicionMaxTimeoutMult times longer, so an isolated or overloaded prober cannot
//     quickly declare others dead. Every member that hears the suspicion runs its own timer.
//   - Suspect and dead messages spread by gossip every GossipInterval to GossipNodes random
//     members (and ride on probes): about log_(GossipNodes+1)(N) rounds.
//
// ProfileLAN: PI 300 ms, ProbeTimeout 150 ms, IndirectChecks 3, SuspicionMult 3 (k = 1),
// SuspicionMaxTimeoutMult 6, GossipInterval 100 ms, GossipNodes 3:
//
//	N = 3:    0.15 + 0.3 + 3 × 1    × 0.3 (0.9 s)           ≈ 1.4 s   measured 1.40 s
//	N = 10:   0.15 + 0.3 + 3 × 1    × 0.3 (0.9 s)  + 0.1    ≈ 1.5 s   measured 1.61 s
//	N = 30:   0.15 + 0.3 + 3 × 1.48 × 0.3 (1.33 s) + 0.2    ≈ 2.0 s   measured 2.03 s
//	N = 100:  0.15 + 0.3 + 3 × 2    × 0.3 (1.8 s)  + 0.3    ≈ 2.6 s   measured 2.2–2.5 s
//
// (measured on loopback; 100 members ran in one process on a shared 2-core machine.) An
// unconfirmed suspicion lasts 5.4 s (N ≤ 10) to 10.8 s (N = 100).
//
// No false positives: a live member is declared Dead only if it answers nothing — direct,
// indirect or TCP — for a whole PI, and then fails to refute during the suspicion timeout
// (suspect messages reach it piggybacked on the very probes sent to it, and its refutation
// spreads like any gossip). A member therefore survives a stall of about
// PI + suspicion − spread: 1.1 s (N ≤ 10) to 1.8 s (N = 100), far above a loaded machine's
// scheduling delays. Lifeguard's awareness also stretches the PI of a member that sees its
// own probes fail (up to 8×), so an overloaded member accuses others less. Shorter PIs
// would detect faster but shrink exactly this margin.
//
// ProfileWAN is memberlist's DefaultWANConfig for lossy edge links: PI 5 s, ProbeTimeout
// 3 s, SuspicionMult 6 (k = 4), GossipInterval 500 ms, GossipNodes 4, so detection takes
// ≈ 2.5 + 5 + 30 = 38 s at N ≤ 10 and ≈ 2.5 + 5 + 60 + 1.5 ≈ 69 s at N = 100, and a
// member may be silent for over 30 s (a flapping cellular link) without being declared
// Dead. Its full state exchange (push/pull) runs every 5 min rather than memberlist's
// 60 s: it carries every member and was over half of an idle member's traffic on a
// metered link; detection does not use it.
//
// After a silence — no ack to its own probes for 4 probe intervals (its link was cut or
// the process stalled) — a member exchanges state at once with the first member that
// acks it again. A member declared dead meanwhile learns it then and refutes, instead of
// waiting for the next periodic push/pull (in every profile).
//
// ProfileLocal (tests, demos on one machine): PI 500 ms, ProbeTimeout 250 ms,
// SuspicionMult 3, GossipInterval 50 ms: quick joins and leaves, patient probes,
// ≈ 2.3 s detection at 3 members.
package gossip
