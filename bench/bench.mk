# The fleet benchmark (issue 7), included by the top-level Makefile.
#
#   make bench-fleet         runs "everynode bench fleet" at 100 nodes (rollout),
#                            100 nodes with gossip (failure detection), 1,000
#                            nodes (rollout), and 1,000 nodes with 5 % of them
#                            stopped mid-rollout, under everynode's rule and
#                            under Kubernetes' (unreachable-blocks), then writes
#                            docs/benchmarks.md
#   make bench-fleet BIG=1   adds a 5,000-node run
#   make bench-fleet HUGE=1  adds a 10,000-node run (rollout, watch fan-out;
#                            4 agent processes of 2,500 agents each; 5 to
#                            10 minutes on 2 shared cores, about 7 GiB of
#                            memory at its peak); with BIG=1 too, both
#   make bench-fleet-10k     that 10,000-node run alone, with a CPU profile of
#                            the server's process over the measured phases:
#                            $(BENCH_OUT)/fleet-10000.json and
#                            $(BENCH_OUT)/fleet-10000.cpu.pprof
#   make bench-soak          the 10-minute soak: 100 nodes with gossip, one agent
#                            process per node, 2 busy goroutines of extra CPU load;
#                            counts false NotReady, then rewrites docs/benchmarks.md
#                            with the soak as one more column
#   make bench-idle-traffic  each agent's idle network traffic (API connections
#                            and gossip, bytes/s in and out at its sockets) at
#                            10 and 30 agent processes for the lan, wan and
#                            local gossip profiles (60 s each; wan also over
#                            5 min, a whole wan Node status period), and
#                            failure detection with wan at 10 and 30; JSON in
#                            $(BENCH_OUT)/idle-*.json, figures in
#                            docs/benchmarks.md ("Idle traffic") and
#                            docs/edge.md ("Metered links")
#   make bench-docker        real Docker (issue 18): medians of 7 of a container
#                            created and its image updated through everynode
#                            (server + agent on this engine), a bare docker run
#                            and a Swarm global service (when docker swarm init
#                            works here; the swarm is left afterwards), same
#                            local images built in the run; output in
#                            $(BENCH_OUT)/docker.txt
#   make bench-idle-cpu      idle CPU and wake-ups per agent process (lan at 10
#                            and 30 agents over 30 s, wan at 10 over 120 s:
#                            /proc counts CPU in 10 ms ticks), with a CPU profile of
#                            one lan agent; JSON in $(BENCH_OUT)/idlecpu-*.json
#   make bench-report        docs/benchmarks.md from what the targets above left
#                            in $(BENCH_OUT): a column per fleet, soak and
#                            idle-CPU run, the real-Docker section from
#                            docker.txt, each figure judged against its target;
#                            "make bench" ends with it
#
# The simulated agents run in child processes of the same binary
# ("--agent-procs K"), so the server's RSS and CPU figures are its own:
#   - with gossip, one agent per process (K = N), like real nodes: each
#     memberlist member probes and refutes on its own scheduler, and a busy
#     server process cannot starve the members' failure detection;
#   - without gossip, K = 1 at 100 nodes, K = 2 at 1,000 and 5,000 and
#     K = 4 at 10,000 (2,500 agents per process, as at 5,000). A
#     process costs about 8 MiB of its own memory and ~28 MiB of resident
#     executable pages whatever it runs, so a process per node would measure
#     1,000 Go runtimes starting on 2 cores rather than the server. One child
#     is enough to take the agents out of the server's process; two halve
#     each child's heap, so a garbage collection or a stall in one child
#     delays only half of the agents' watch streams (with 5,000 agents in one
#     process the server closed some of them as slow consumers), while each
#     child's one HTTP/2 pool keeps the server's connection count near a
#     single pool's. More children add runtimes without changing what the
#     server sees.
#
# agent_rss_mb is one real agent process, idle: bin/everynode-agent, the lean
# binary users install on nodes ("build" makes it; bench fleet picks the
# everynode-agent next to $(BIN), else $(BIN) itself; --agent-binary overrides).
#
# Raw results stay in $(BENCH_OUT) (JSON: fleet-*.json, one per fleet size,
# and soak-00100.json, which bench-fleet keeps; idlecpu-*.json, idle-*.json and
# detect-wan-*.json; docker.txt, go test's output of BenchmarkDockerStart).
# bench-report renders the fleet, soak and idle-CPU results and docker.txt;
# the idle-traffic results are summarised by hand in bench/notes.md.

BENCH_OUT ?= bin/bench
BENCH_DOC ?= docs/benchmarks.md
BIG       ?=
HUGE      ?=

.PHONY: bench-fleet bench-fleet-10k bench-soak bench-report bench-idle-traffic bench-docker bench-idle-cpu

bench-fleet: build
	@mkdir -p $(BENCH_OUT)
	rm -f $(BENCH_OUT)/fleet-*.json
	$(BIN) bench fleet --nodes 100 --rollout --agent-procs 1 --json > $(BENCH_OUT)/fleet-00100.json
	$(BIN) bench fleet --nodes 100 --rollout --detect --agent-procs 100 --agent-binary none --json > $(BENCH_OUT)/fleet-00100-gossip.json
	$(BIN) bench fleet --nodes 1000 --rollout --agent-procs 2 --json > $(BENCH_OUT)/fleet-01000.json
	$(BIN) bench fleet --nodes 1000 --rollout-unreachable 5 --agent-procs 2 --agent-binary none --json > $(BENCH_OUT)/fleet-01000-unreachable.json
	$(BIN) bench fleet --nodes 1000 --rollout-unreachable 5 --unreachable-blocks --agent-procs 2 --agent-binary none --json > $(BENCH_OUT)/fleet-01000-unreachable-blocks.json
	$(if $(BIG),$(BIN) bench fleet --nodes 5000 --rollout --agent-procs 2 --agent-binary none --json > $(BENCH_OUT)/fleet-05000.json)
	$(if $(HUGE),$(BIN) bench fleet --nodes 10000 --rollout --agent-procs 4 --agent-binary none --json > $(BENCH_OUT)/fleet-10000.json)
	@$(MAKE) --no-print-directory bench-report

bench-fleet-10k: build
	@mkdir -p $(BENCH_OUT)
	$(BIN) bench fleet --nodes 10000 --rollout --agent-procs 4 --agent-binary none --json --cpuprofile $(BENCH_OUT)/fleet-10000.cpu.pprof > $(BENCH_OUT)/fleet-10000.json
	@grep -h '"converge_s"\|"rollout_s"\|"fanout_p\|"server_rss_mb"\|_cpu_s"' $(BENCH_OUT)/fleet-10000.json

bench-soak: build
	@mkdir -p $(BENCH_OUT)
	$(BIN) bench fleet --nodes 100 --gossip --detect --soak 10m --agent-procs 100 --cpu-load 2 --agent-binary none --json > $(BENCH_OUT)/soak-00100.json.tmp
	mv $(BENCH_OUT)/soak-00100.json.tmp $(BENCH_OUT)/soak-00100.json
	@if [ -f $(BENCH_OUT)/fleet-00100.json ]; then $(MAKE) --no-print-directory bench-report; \
	else echo "wrote $(BENCH_OUT)/soak-00100.json; run make bench-fleet to write $(BENCH_DOC)"; fi

# bench-report renders $(BENCH_DOC) from the results in $(BENCH_OUT): the
# fleet runs, the soak, the idle-CPU runs and the real-Docker benchmark, those
# of them that are there; the report names the commands that made them.
bench-report:
	@files=""; for f in fleet-00100.json fleet-00100-gossip.json fleet-01000.json fleet-01000-unreachable.json fleet-01000-unreachable-blocks.json fleet-05000.json fleet-10000.json soak-00100.json idlecpu-lan-10.json idlecpu-lan-30.json idlecpu-wan-10.json; do \
		[ -f $(BENCH_OUT)/$$f ] && files="$$files $(BENCH_OUT)/$$f"; done; \
	cmd="make bench-fleet"; [ -f $(BENCH_OUT)/fleet-05000.json ] && cmd="$$cmd BIG=1"; \
	[ -f $(BENCH_OUT)/fleet-10000.json ] && cmd="$$cmd HUGE=1"; \
	[ -f $(BENCH_OUT)/soak-00100.json ] && cmd="$$cmd, make bench-soak"; \
	ls $(BENCH_OUT)/idlecpu-*.json >/dev/null 2>&1 && cmd="$$cmd, make bench-idle-cpu"; \
	docker=""; [ -f $(BENCH_OUT)/docker.txt ] && docker="--docker $(BENCH_OUT)/docker.txt" && cmd="$$cmd, make bench-docker"; \
	echo "$(BIN) bench report -o $(BENCH_DOC) --notes bench/notes.md --command \"$$cmd\" $$docker$$files"; \
	$(BIN) bench report -o $(BENCH_DOC) --notes bench/notes.md --command "$$cmd" $$docker $$files
	@echo "wrote $(BENCH_DOC)"

# The 5-min wan rows idle 10 min first: wan's push/pull runs every 5 min, the
# first one 5-10 min after an agent starts.
bench-idle-traffic: build
	@mkdir -p $(BENCH_OUT)
	for p in lan wan local; do for n in 10 30; do \
		$(BIN) bench fleet --nodes $$n --agent-procs $$n --gossip --gossip-profile $$p --idle-traffic 60s --agent-binary none --json > $(BENCH_OUT)/idle-$$p-$$n.json || exit 1; \
	done; done
	for n in 10 30; do \
		$(BIN) bench fleet --nodes $$n --agent-procs $$n --gossip --gossip-profile wan --idle-settle 10m --idle-traffic 5m --agent-binary none --json > $(BENCH_OUT)/idle-wan-$$n-5m.json || exit 1; \
	done
	for n in 10 30; do \
		$(BIN) bench fleet --nodes $$n --agent-procs $$n --detect --gossip-profile wan --agent-binary none --json > $(BENCH_OUT)/detect-wan-$$n.json || exit 1; \
	done
	@grep -h '"nodes"\|"gossip_profile"\|"idle_bytes\|"detect' $(BENCH_OUT)/idle-*.json $(BENCH_OUT)/detect-wan-*.json

bench-docker:
	@mkdir -p $(BENCH_OUT)
	$(GO) test -run '^$$' -bench '^BenchmarkDockerStart$$' -benchtime 1x -timeout 30m ./nodeagent/runtime/docker/agenttest/ 2>&1 | tee $(BENCH_OUT)/docker.txt.tmp
	@grep -q '^ok ' $(BENCH_OUT)/docker.txt.tmp || { echo "bench-docker: the benchmark failed (its output: $(BENCH_OUT)/docker.txt.tmp)"; exit 1; }
	@if grep -Eq '^BenchmarkDockerStart(-[0-9]+)?[[:space:]]+[0-9]+[[:space:]]' $(BENCH_OUT)/docker.txt.tmp; then \
		mv $(BENCH_OUT)/docker.txt.tmp $(BENCH_OUT)/docker.txt; \
	else \
		rm -f $(BENCH_OUT)/docker.txt.tmp $(BENCH_OUT)/docker.txt; \
		echo "bench-docker: skipped (no Docker engine here); the report will have no real-Docker section"; \
	fi

bench-idle-cpu: build
	@mkdir -p $(BENCH_OUT)
	rm -f $(BENCH_OUT)/idlecpu-*.json
	$(BIN) bench fleet --nodes 10 --agent-procs 10 --gossip --idle-cpu 30s --idle-cpuprofile $(BENCH_OUT)/idlecpu-lan-10.pprof --agent-binary none --json > $(BENCH_OUT)/idlecpu-lan-10.json
	$(BIN) bench fleet --nodes 30 --agent-procs 30 --gossip --detect --idle-cpu 30s --agent-binary none --json > $(BENCH_OUT)/idlecpu-lan-30.json
	$(BIN) bench fleet --nodes 10 --agent-procs 10 --gossip --gossip-profile wan --idle-cpu 120s --agent-binary none --json > $(BENCH_OUT)/idlecpu-wan-10.json
	@grep -h '"nodes"\|"gossip_profile"\|"idle_cpu\|"idle_wakeups\|"idle_loadavg\|"detect_s' $(BENCH_OUT)/idlecpu-*.json
