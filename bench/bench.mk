# The fleet benchmark (issue 7), included by the top-level Makefile.
#
#   make bench-fleet         runs "everynode bench fleet" at 100 nodes (rollout),
#                            100 nodes with gossip (failure detection: every
#                            simulated node a memberlist member, which costs this
#                            one process CPU a real fleet spreads over its nodes)
#                            and 1,000 nodes (rollout), then writes docs/benchmarks.md
#   make bench-fleet BIG=1   adds a 5,000-node run
#
# Raw results stay in $(BENCH_OUT) (JSON, one file per fleet size).

BENCH_OUT ?= bin/bench
BIG       ?=

.PHONY: bench-fleet

bench-fleet: build
	@mkdir -p $(BENCH_OUT)
	rm -f $(BENCH_OUT)/fleet-*.json
	$(BIN) bench fleet --nodes 100 --rollout --json > $(BENCH_OUT)/fleet-00100.json
	$(BIN) bench fleet --nodes 100 --rollout --detect --agent-binary none --json > $(BENCH_OUT)/fleet-00100-gossip.json
	$(BIN) bench fleet --nodes 1000 --rollout --json > $(BENCH_OUT)/fleet-01000.json
	$(if $(BIG),$(BIN) bench fleet --nodes 5000 --rollout --agent-binary none --json > $(BENCH_OUT)/fleet-05000.json)
	$(BIN) bench report -o docs/benchmarks.md --notes bench/notes.md \
		--command "make bench-fleet$(if $(BIG), BIG=1)" \
		$(BENCH_OUT)/fleet-00100.json $(BENCH_OUT)/fleet-00100-gossip.json $(BENCH_OUT)/fleet-01000.json \
		$(if $(BIG),$(BENCH_OUT)/fleet-05000.json)
	@echo "wrote docs/benchmarks.md"
