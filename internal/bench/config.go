package bench

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"time"
)

// AgentTarget is what a separate agent process needs to reach the server.
type AgentTarget struct {
	// Server is the API's https URL.
	Server string
	// JoinToken is the cluster's join token (for "everynode agent --token").
	JoinToken string
	// CAPEM is the cluster CA; NodeToken the node credential of NodeName.
	CAPEM     []byte
	NodeToken string
	// NodeName is the name the process must use.
	NodeName string
	// DataDir is an empty directory for the process.
	DataDir string
}

// Config configures Run.
type Config struct {
	// Nodes is the number of simulated nodes (≥ 1).
	Nodes int
	// Gossip makes every simulated node a gossip member (LAN profile on
	// loopback) feeding the node lifecycle controller; only up to
	// MaxGossipNodes.
	Gossip bool
	// Rollout measures an image update with maxUnavailable 10%.
	Rollout bool
	// Detect measures failure detection of one killed node (needs gossip,
	// which it turns on up to MaxGossipNodes).
	Detect bool
	// RolloutUnreachable, when > 0, measures one more image update
	// (maxUnavailable 10%) during which that percentage of the nodes
	// (rounded up), not yet updated, are stopped once a fifth of the fleet
	// runs the new image: how long until every reachable node is updated,
	// and until the status reads complete (docs/rollouts.md §7).
	RolloutUnreachable int
	// UnreachableBlocks runs that update with annotation
	// rollout.everynode.io/unreachable-blocks "true": Kubernetes' rule.
	UnreachableBlocks bool
	// UnreachableStatusWait bounds the wait for the status to read complete
	// once every reachable node is updated; 0: DefaultUnreachableStatusWait.
	UnreachableStatusWait time.Duration
	// UnreachableGrace is the server's grace before a rollout sets an
	// unreachable node aside (server.Config.UnreachableGrace); 0: the
	// default, 30 s.
	UnreachableGrace time.Duration
	// AgentProcess, when set, builds the command of one agent process (fake
	// runtime) whose idle RSS is measured; nil skips agent_rss_mb.
	AgentProcess func(ctx context.Context, t AgentTarget) *exec.Cmd
	// AgentProcs, when > 0, runs the simulated agents in that many child
	// processes (at most Nodes), each running a contiguous share of them
	// through the same code path as in process, so this process is the
	// server and the harness alone: ServerRSSMB and the CPU seconds are the
	// server's own, and AgentsRSSMB the children's. 0 runs the agents in this
	// process (for profiling the whole system in one profile).
	AgentProcs int
	// MemoryLimit is the server's Config.MemoryLimit (0: none). The limit
	// is the process's: with the agents in this process (AgentProcs 0) it
	// limits them too.
	MemoryLimit int64
	// AgentsCommand builds the command of one child process: a process that
	// calls ServeAgents with its stdin and stdout ("everynode bench
	// agents"). Run sets the command's Stdin and Stdout; the builder may set
	// Stderr. Required when AgentProcs or CPULoad is set.
	AgentsCommand func(ctx context.Context) *exec.Cmd
	// CPULoad, when > 0, runs that many busy-looping goroutines in a
	// separate child process (built by AgentsCommand) from all Nodes Ready
	// to the end of the false NotReady watch: a reproducible "CPU loaded".
	CPULoad int
	// Soak keeps the fleet running this long after the timed phases, so
	// FalseNotReady covers a longer window; 0: none.
	Soak time.Duration
	// AgentIdle is how long that process idles first (DefaultAgentIdle).
	AgentIdle time.Duration
	// GossipProfile is the gossip profile of the server and the simulated
	// agents (gossip.ProfileLAN when empty); with ProfileWAN the server
	// also pings the agents' API connections less often.
	GossipProfile string
	// OwnConnections gives every simulated agent its own HTTP/2 connection,
	// as real nodes have, instead of one pool per process: the server then
	// holds a TLS connection, its HTTP/2 state and its goroutines per node.
	OwnConnections bool
	// IdleTraffic, when > 0, measures the fleet's idle network traffic per
	// agent over that long once every pod runs: the API connections (watch,
	// heartbeats, HTTP/2 pings) and gossip, in and out. The agents then post
	// their Node status at the real agent's period
	// (nodeagent.DefaultNodeStatusPeriod) instead of the benchmark's long one.
	IdleTraffic time.Duration
	// IdleSettle is how long the fleet idles before IdleTraffic's count
	// begins; 0: 5 s. A count of periodic work needs the first period over:
	// memberlist's first push/pull comes between one and two intervals
	// after a member starts, then one per interval.
	IdleSettle time.Duration
	// IdleCPU, when > 0, measures the agent processes' idle CPU and
	// wake-ups over that long once every pod runs (needs AgentProcs; one
	// agent per process, as with gossip, gives per-process figures). The
	// agents then post their Node status at the real agent's period, as
	// with IdleTraffic.
	IdleCPU time.Duration
	// IdleCPUProfile, when set with IdleCPU, is where the first agent
	// process writes a CPU profile of that window (sampled at
	// IdleProfileHz: an idle agent runs for a few ms a second).
	IdleCPUProfile string
	// AgentsCPUProfile, when set, is where the first agent process writes a
	// CPU profile of the measured phases, the window Measuring says (needs
	// AgentProcs; not with IdleCPU, whose window it would cover and whose
	// figures its sampling would raise).
	AgentsCPUProfile string
	// Dir is where the temporary directory is made; "" is os.TempDir.
	Dir string
	// Timeout bounds each measured phase; 0 means 10 minutes.
	Timeout time.Duration
	// Measuring, when set, is called with true right before the DaemonSet
	// is created and with false after the last timed phase (rollout or
	// detect): the window a CPU profile should cover.
	Measuring func(on bool)
	// FanoutProfile, when set, is called with true right before the watch
	// fan-out's first write and with false after its last write was seen
	// (or the phase failed): the window of a CPU profile of the fan-out.
	FanoutProfile func(on bool)
	// HeapProfile, when set, receives a heap profile of the server alone
	// (after the agents stopped).
	HeapProfile io.Writer
	// Logger; nil discards. Progress lines go to it at info level.
	Logger *slog.Logger
}

// FloorTrial is one trial of the fixed floor: Writers concurrent writers
// took S seconds.
type FloorTrial struct {
	Writers int     `json:"writers"`
	S       float64 `json:"s"`
}

// Result is what a run measured. Durations are seconds, sizes MiB; zero
// means not measured (see Notes).
type Result struct {
	Nodes         int    `json:"nodes"`
	Gossip        bool   `json:"gossip"`
	GossipProfile string `json:"gossip_profile,omitempty"`
	// OwnConnections: each agent had its own connection (Config).
	OwnConnections bool      `json:"own_connections,omitempty"`
	Started        time.Time `json:"started"`
	LoadAvgStart   string    `json:"loadavg_start"`
	LoadAvgEnd     string    `json:"loadavg_end"`

	// RegisterS: agents started → every Node registered and Ready.
	RegisterS float64 `json:"register_s"`
	// EtcdFloorS is the floor fixed by the work: one create and one status
	// update per pod, of the sizes convergence wrote, straight to the same
	// etcd at the best of several concurrencies (EtcdFloorTrials, the best
	// EtcdFloorConcurrency writers). Ratio = ConvergeS / EtcdFloorS.
	EtcdFloorS           float64      `json:"etcd_floor_s"`
	EtcdFloorConcurrency int          `json:"etcd_floor_writers"`
	EtcdFloorTrials      []FloorTrial `json:"etcd_floor_trials,omitempty"`
	ConvergeS            float64      `json:"converge_s"`
	Ratio                float64      `json:"ratio"`
	// EtcdReplayS replays the writes convergence actually made (Writes:
	// every key, in order, with its sizes; one writer per key, all at
	// once); ReplayRatio = ConvergeS / EtcdReplayS.
	EtcdReplayS float64 `json:"etcd_replay_s"`
	ReplayRatio float64 `json:"replay_ratio"`
	// ConvergeCPUS and RolloutCPUS are the CPU seconds this process (the
	// server, and the simulated agents unless AgentProcs) used during those
	// phases: the work done, which other load on the machine does not
	// inflate as much as the wall-clock figures. AgentsConvergeCPUS and
	// AgentsRolloutCPUS are the agent children's (with AgentProcs).
	ConvergeCPUS       float64 `json:"converge_cpu_s"`
	RolloutCPUS        float64 `json:"rollout_cpu_s,omitempty"`
	AgentsConvergeCPUS float64 `json:"agents_converge_cpu_s,omitempty"`
	AgentsRolloutCPUS  float64 `json:"agents_rollout_cpu_s,omitempty"`
	// Writes are the etcd writes convergence made (replayed for the floor).
	Writes WriteStats `json:"writes"`
	// RolloutWrites are the etcd writes of the rollout (Config.Rollout),
	// per node in its per-pod figures; pod updates include deletes.
	RolloutWrites *WriteStats `json:"rollout_writes,omitempty"`
	// FalseNotReady counts Ready→not-Ready transitions of simulated nodes
	// that were not killed, over WatchedS seconds (from all Nodes Ready to
	// the end of the run, under the benchmark's own CPU load).
	FalseNotReady int     `json:"false_notready"`
	WatchedS      float64 `json:"watched_s"`
	// FalseNotReadyEvents lists those transitions and the recoveries, with
	// the seconds since the watch began and the Ready condition's reason.
	FalseNotReadyEvents []string `json:"false_notready_events,omitempty"`
	// LoadAvgMax1 is the highest 1-minute load average sampled (every 5 s)
	// while false NotReady was watched.
	LoadAvgMax1 float64 `json:"loadavg_max_1m,omitempty"`
	// SoakS is the soak's length (Config.Soak) in seconds.
	SoakS float64 `json:"soak_s,omitempty"`
	// CPULoad is Config.CPULoad; CPULoadCPUS the CPU seconds its child
	// burned.
	CPULoad     int     `json:"cpu_load,omitempty"`
	CPULoadCPUS float64 `json:"cpu_load_cpu_s,omitempty"`
	// GossipLog holds the gossip members' notable lines (the server's and the
	// agents': suspicions, failures, refutations), to explain a false
	// NotReady; memberlist's debug lines are left out.
	GossipLog []string `json:"gossip_log,omitempty"`
	// Connections is how many connections the agents' shared transport
	// opened until all Nodes were Ready; ConvergeDials how many more during
	// convergence.
	Connections   int `json:"connections"`
	ConvergeDials int `json:"converge_dials"`
	// CreatesDoneS: DaemonSet created → the last pod seen created;
	// ReadyLagP50Ms/MaxMs: a pod seen created → seen Running and Ready.
	CreatesDoneS  float64 `json:"creates_done_s"`
	ReadyLagP50Ms float64 `json:"ready_lag_p50_ms"`
	ReadyLagMaxMs float64 `json:"ready_lag_max_ms"`
	// PodsRunning is the number of pods Running and Ready at convergence.
	PodsRunning int `json:"pods_running"`

	RolloutS float64 `json:"rollout_s,omitempty"`
	// The unreachable rollout (Config.RolloutUnreachable): UnreachablePct
	// asked, UnreachableNodes stopped UnreachableStoppedAtS seconds after
	// the update; UnreachableBlocks: under Kubernetes' rule.
	// RolloutReachableS: update → every other node runs one Ready pod of
	// the new image. RolloutStatusS: update → the status reads complete as
	// kubectl rollout status checks it; 0 when it did not within
	// UnreachableStatusWaitS after RolloutReachableS. UnreachableStatus is
	// the last status seen (counters, condition reason).
	UnreachablePct         int     `json:"unreachable_pct,omitempty"`
	UnreachableNodes       int     `json:"unreachable_nodes,omitempty"`
	UnreachableBlocks      bool    `json:"unreachable_blocks,omitempty"`
	UnreachableStoppedAtS  float64 `json:"unreachable_stopped_at_s,omitempty"`
	RolloutReachableS      float64 `json:"rollout_reachable_s,omitempty"`
	RolloutStatusS         float64 `json:"rollout_status_s,omitempty"`
	UnreachableStatusWaitS float64 `json:"unreachable_status_wait_s,omitempty"`
	UnreachableStatus      string  `json:"unreachable_status,omitempty"`
	// UnreachableUpdated is how many reachable nodes ran the new image when
	// the watch ended (all of them unless the rollout stalled: under
	// Kubernetes' rule with as many nodes away as maxUnavailable).
	UnreachableUpdated     int     `json:"unreachable_updated,omitempty"`
	RolloutUnreachableCPUS float64 `json:"rollout_unreachable_cpu_s,omitempty"`
	DetectS                float64 `json:"detect_s,omitempty"`
	// DetectMemberS: the agent killed → the server's gossip member lists it
	// Dead (failure detection alone; DetectS adds the node lifecycle
	// controller's reaction and its write through etcd).
	DetectMemberS float64 `json:"detect_member_s,omitempty"`

	// IdleTrafficS is how long idle traffic was measured (Config.IdleTraffic);
	// the Idle* figures are bytes (or UDP datagrams) per second per agent,
	// counted at the agents' sockets: API are the TLS records of their API
	// connections (watches, Node status heartbeats, HTTP/2 pings both
	// ways), gossip the encrypted UDP payloads and TCP streams of their
	// members. IdleBytesPerSIn/Out are the sums. IP/TCP/UDP headers are not
	// counted (UDP/IPv4 adds 28 bytes per datagram).
	IdleTrafficS             float64 `json:"idle_traffic_s,omitempty"`
	IdleBytesPerSIn          float64 `json:"idle_bytes_per_s_in,omitempty"`
	IdleBytesPerSOut         float64 `json:"idle_bytes_per_s_out,omitempty"`
	IdleAPIBytesPerSIn       float64 `json:"idle_api_bytes_per_s_in,omitempty"`
	IdleAPIBytesPerSOut      float64 `json:"idle_api_bytes_per_s_out,omitempty"`
	IdleGossipBytesPerSIn    float64 `json:"idle_gossip_bytes_per_s_in,omitempty"`
	IdleGossipBytesPerSOut   float64 `json:"idle_gossip_bytes_per_s_out,omitempty"`
	IdleGossipPacketsPerSIn  float64 `json:"idle_gossip_packets_per_s_in,omitempty"`
	IdleGossipPacketsPerSOut float64 `json:"idle_gossip_packets_per_s_out,omitempty"`
	// IdleGossipStreamBytesPerS* are the part of IdleGossipBytesPerS*
	// carried by TCP streams (push/pull state exchanges); the rest is UDP
	// (probes, acks, gossip).
	IdleGossipStreamBytesPerSIn  float64 `json:"idle_gossip_stream_bytes_per_s_in,omitempty"`
	IdleGossipStreamBytesPerSOut float64 `json:"idle_gossip_stream_bytes_per_s_out,omitempty"`

	// IdleCPUS is how long idle CPU was measured (Config.IdleCPU). Over it:
	// IdleCPUMsPerS is the agent processes' CPU time (utime + stime of
	// /proc/<pid>/stat) in ms per second per agent, IdleCPUMsPerSMax the
	// busiest process's (per agent in it); IdleWakeupsPerS the context
	// switches of all their threads per second per agent (voluntary: a
	// thread blocked, to be woken again; involuntary: preempted), from
	// /proc/<pid>/task/*/status; IdleServerCPUMsPerS this process's CPU
	// (the server and the harness) in ms per second; IdleLoadAvg the load
	// average at the end of the window.
	IdleCPUS            float64 `json:"idle_cpu_s,omitempty"`
	IdleCPUMsPerS       float64 `json:"idle_cpu_ms_per_s,omitempty"`
	IdleCPUMsPerSMax    float64 `json:"idle_cpu_ms_per_s_max,omitempty"`
	IdleWakeupsPerS     float64 `json:"idle_wakeups_per_s,omitempty"`
	IdleVoluntaryPerS   float64 `json:"idle_voluntary_switches_per_s,omitempty"`
	IdleInvoluntaryPerS float64 `json:"idle_involuntary_switches_per_s,omitempty"`
	IdleServerCPUMsPerS float64 `json:"idle_server_cpu_ms_per_s,omitempty"`
	IdleLoadAvg         string  `json:"idle_loadavg,omitempty"`

	// The watch fan-out, after convergence: every agent opens one more
	// watch (FanoutWatches in all), on the Services of the benchmark
	// namespace through its own client, as a kubelet's Service informer
	// does; the harness then writes one Service FanoutWrites times.
	// FanoutP50Ms, FanoutP99Ms and FanoutMaxMs are over every (write,
	// watch) pair: from just before the write was sent to the event's
	// arrival at the agent's watch (the commit happens within the write's
	// own FanoutWriteMs, its slowest). FanoutMissing counts the pairs whose
	// event had not arrived after a minute; FanoutCPUS is this process's
	// CPU seconds over the writes.
	FanoutWatches int     `json:"fanout_watches,omitempty"`
	FanoutWrites  int     `json:"fanout_writes,omitempty"`
	FanoutP50Ms   float64 `json:"fanout_p50_ms,omitempty"`
	FanoutP99Ms   float64 `json:"fanout_p99_ms,omitempty"`
	FanoutMaxMs   float64 `json:"fanout_max_ms,omitempty"`
	FanoutWriteMs float64 `json:"fanout_write_ms,omitempty"`
	FanoutMissing int     `json:"fanout_missing"`
	FanoutCPUS    float64 `json:"fanout_cpu_s,omitempty"`

	// StatusP50Ms, StatusP99Ms: pod status updates during convergence, at
	// the agents' HTTPS client; StatusSamples how many.
	StatusP50Ms   float64 `json:"status_p50_ms"`
	StatusP99Ms   float64 `json:"status_p99_ms"`
	StatusSamples int     `json:"status_samples"`

	// ServerRSSMB is this process's VmRSS after convergence: the server and
	// the harness, and the simulated agents too unless AgentProcs, read right
	// at convergence, before the harness reads etcd's history. HeapMB is
	// the live Go heap then (after a collection; the last status writes may
	// still be in flight); HeapServerIdleMB before
	// any agent started; HeapAgentsMB the growth from starting and
	// registering the agents (in process: their state and their watch
	// streams on both ends, so HeapMB − HeapAgentsMB approximates the
	// server's share; with AgentProcs: the server's side only, its Nodes and
	// the agents' connections and watches).
	ServerRSSMB float64 `json:"server_rss_mb"`
	// ServerFileMB is the file-backed part of ServerRSSMB (the executable's
	// pages, etcd's memory-mapped database); ServerGoMB what the Go runtime
	// then held from the OS (heap spans in use or kept for reuse, stacks),
	// which the rest of the RSS mostly is.
	ServerFileMB float64 `json:"server_file_mb,omitempty"`
	ServerGoMB   float64 `json:"server_go_mb,omitempty"`
	// ServerGo splits ServerGoMB, read at the same moment (before HeapMB's
	// collection), and counts the collector's cycles and CPU seconds so far.
	ServerGo         *goMem  `json:"server_go,omitempty"`
	HeapMB           float64 `json:"heap_mb"`
	HeapServerIdleMB float64 `json:"heap_server_idle_mb"`
	HeapAgentsMB     float64 `json:"heap_agents_mb"`
	// ServerAloneRSSMB and ServerAloneHeapMB: the process once the
	// simulated agents were stopped and their memory returned to the OS —
	// the server with every Node and pod still stored and cached, but
	// without the agents' connections (a lower bound for the server).
	ServerAloneRSSMB  float64 `json:"server_alone_rss_mb"`
	ServerAloneHeapMB float64 `json:"server_alone_heap_mb"`
	// ServerAloneFileMB is the file-backed part of ServerAloneRSSMB: the
	// executable's pages and etcd's memory-mapped database.
	ServerAloneFileMB float64 `json:"server_alone_file_mb"`
	// AgentProcs is how many child processes ran the agents (0: in this
	// process). AgentsRSSMB and AgentsAnonMB are their VmRSS and RssAnon
	// summed, after convergence; every child counts the executable's
	// resident pages again, so AgentsAnonMB / Nodes is the better per-agent
	// figure.
	AgentProcs   int     `json:"agent_procs,omitempty"`
	AgentsRSSMB  float64 `json:"agents_rss_mb,omitempty"`
	AgentsAnonMB float64 `json:"agents_anon_mb,omitempty"`
	// AgentRSSMB is one agent process alone, idle (fake runtime).
	AgentRSSMB float64 `json:"agent_rss_mb,omitempty"`
	// AgentAnonMB is its anonymous memory (heap, stacks: its own) and
	// AgentFileMB its resident pages of the executable (shared with other
	// processes running it).
	AgentAnonMB float64 `json:"agent_anon_mb,omitempty"`
	AgentFileMB float64 `json:"agent_file_mb,omitempty"`
	// AgentIdleCPUMsPerS is that process's CPU time (utime + stime) in ms a
	// second, and AgentIdleWakeupsPerS its threads' context switches a
	// second, over AgentIdleS seconds of its idle time (all but the first
	// seconds): the binary users run as the agent, with its own runtime
	// settings, gossiping with the lan profile. The CPU time is read in
	// 10 ms ticks, so it is left out when the window is under 30 s.
	AgentIdleCPUMsPerS   float64 `json:"agent_idle_cpu_ms_per_s,omitempty"`
	AgentIdleWakeupsPerS float64 `json:"agent_idle_wakeups_per_s,omitempty"`
	AgentIdleS           float64 `json:"agent_idle_s,omitempty"`
	// AgentBinary is the file name of the binary that agent process ran:
	// everynode-agent (the lean agent users install on nodes) or everynode.
	AgentBinary string `json:"agent_binary,omitempty"`

	Notes []string `json:"notes,omitempty"`
}
