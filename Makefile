# everynode — build, test and measure.
#
#   make build   the static binaries bin/everynode (server, agent, client) and
#                bin/everynode-agent (the agent alone, for nodes)
#   make test    the whole test suite with the race detector (what CI runs)
#   make lint    go vet and a gofmt check
#   make fuzz    each fuzz target for FUZZTIME (default 60s)
#   make release stripped static binaries for every board in dist/ (amd64,
#                arm64, armv7, riscv64): everynode-<os>-<arch> and
#                everynode-agent-<os>-<arch>, VERSION stamped, plus dist/SHA256SUMS
#   make bench   all benchmarks: bench-api (go test -bench of the store and the
#                API, output in bench.out; figures in docs/benchmarks-api.md),
#                bench-fleet (simulated fleets of 100 and 1,000 nodes, BIG=1 adds
#                5,000, HUGE=1 10,000), bench-docker (real Docker against a bare
#                docker run and Swarm) and bench-idle-cpu, then writes
#                docs/benchmarks.md from the last three (bench/bench.mk)
#   make chaos   the HA chaos test (docs/ha.md) with CHAOS_KILLS (default 20)
#                SIGKILLs of the leading server; make test runs it with 3

GO       ?= go
BIN      ?= bin/everynode
AGENT_BIN ?= bin/everynode-agent
FUZZTIME ?= 60s
CHAOS_KILLS ?= 20
PKGS     ?= ./...
DIST     ?= dist
# VERSION is stamped into release binaries: the newest v* tag, else v0.0.0-<commit>.
VERSION  ?= $(shell git describe --tags --match 'v*' --dirty 2>/dev/null || echo v0.0.0-$$(git rev-parse --short HEAD 2>/dev/null || echo dev))
# PLATFORMS are GOOS/GOARCH[/GOARM] triples; the binary is named after GOARCH
# (arm/7 is armv7).
PLATFORMS ?= linux/amd64 linux/arm64 linux/arm/7 linux/riscv64
VERSION_FLAG = -X github.com/everynode/everynode/internal/version.stamped=$(VERSION)

.PHONY: all build test lint fuzz bench bench-api release clean chaos

all: lint build test

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN) ./cmd/everynode
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(AGENT_BIN) ./cmd/everynode-agent

# The tests drive the Helm release users have (integration's TestHelmChart);
# it is built once here, before the tests start, so that building it is not
# timed against a loaded machine's test run.
HELM_VERSION ?= v3.22.0
TOOLS        ?= $(CURDIR)/bin/tools

test: $(TOOLS)/helm-$(HELM_VERSION)
	EVERYNODE_HELM=$(TOOLS)/helm-$(HELM_VERSION) $(GO) test -race -count=1 -timeout 45m $(PKGS)

$(TOOLS)/helm-$(HELM_VERSION):
	@mkdir -p $(TOOLS)/helm-build
	cd $(TOOLS)/helm-build && GOBIN=$(TOOLS)/helm-build CGO_ENABLED=0 GOFLAGS= $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv $(TOOLS)/helm-build/helm $@

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Fuzz targets run one at a time (go test allows one -fuzz pattern per package).
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeValidate$$' -fuzztime=$(FUZZTIME) ./apiserver/strategy/
	$(GO) test -run='^$$' -fuzz='^FuzzApplyPatch$$' -fuzztime=$(FUZZTIME) ./apiserver/strategy/

bench: bench-api bench-fleet bench-docker bench-idle-cpu
	@$(MAKE) --no-print-directory bench-report

# Three servers and five agents in containers (needs Docker); see docs/ha.md.
chaos:
	EVERYNODE_CHAOS_KILLS=$(CHAOS_KILLS) EVERYNODE_REQUIRE_DOCKER=1 $(GO) test -race -count=1 -timeout 60m -v \
		-run '^TestChaosHA$$' ./integration/multihost/

bench-api:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=1s ./store/ ./apiserver/ | tee bench.out

# Each binary is static (CGO_ENABLED=0), stripped and reproducible (-trimpath).
release:
	@mkdir -p $(DIST)
	@set -e; for p in $(PLATFORMS); do \
		os=$${p%%/*}; rest=$${p#*/}; arch=$${rest%%/*}; arm=; name=$$arch; \
		if [ "$$arch" != "$$rest" ]; then arm=$${rest#*/}; name=$${arch}v$$arm; fi; \
		for cmd in everynode everynode-agent; do \
			out=$(DIST)/$$cmd-$$os-$$name; echo "build $$out ($(VERSION))"; \
			CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch GOARM=$$arm $(GO) build -trimpath \
				-ldflags='-s -w $(VERSION_FLAG)' -o $$out ./cmd/$$cmd; \
		done; \
	done
	@cd $(DIST) && sha256sum everynode-* > SHA256SUMS && cat SHA256SUMS

clean:
	rm -rf bin bench.out dist

# Example images (make images) and the demo live with the examples.
include examples/demo.mk
include bench/bench.mk
