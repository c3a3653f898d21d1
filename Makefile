# everynode — build, test and measure.
#
#   make build   one static binary in bin/everynode
#   make test    the whole test suite with the race detector (what CI runs)
#   make lint    go vet and a gofmt check
#   make fuzz    each fuzz target for FUZZTIME (default 60s)
#   make bench   all benchmarks: bench-api (go test -bench of the store and the
#                API, output in bench.out; figures in docs/benchmarks-api.md) and
#                bench-fleet (simulated fleets of 100 and 1,000 nodes, BIG=1 adds
#                5,000; writes docs/benchmarks.md)

GO       ?= go
BIN      ?= bin/everynode
FUZZTIME ?= 60s
PKGS     ?= ./...

.PHONY: all build test lint fuzz bench bench-api clean

all: lint build test

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN) ./cmd/everynode

test:
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Fuzz targets run one at a time (go test allows one -fuzz pattern per package).
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeValidate$$' -fuzztime=$(FUZZTIME) ./apiserver/strategy/
	$(GO) test -run='^$$' -fuzz='^FuzzApplyPatch$$' -fuzztime=$(FUZZTIME) ./apiserver/strategy/

bench: bench-api bench-fleet

bench-api:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=1s ./store/ ./apiserver/ | tee bench.out

clean:
	rm -rf bin bench.out

# Example images (make images) and the demo live with the examples.
include examples/demo.mk
include bench/bench.mk
