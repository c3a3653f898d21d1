# everynode — build, test and measure.
#
#   make build   one static binary in bin/everynode
#   make test    the whole test suite with the race detector (what CI runs)
#   make lint    go vet and a gofmt check
#   make fuzz    each fuzz target for FUZZTIME (default 60s)
#   make bench   the benchmarks, figures written to bench.out

GO       ?= go
BIN      ?= bin/everynode
FUZZTIME ?= 60s
PKGS     ?= ./...

.PHONY: all build test lint fuzz bench clean

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

bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=1s ./store/ ./apiserver/ | tee bench.out

clean:
	rm -rf bin bench.out

# Example images (make images) and the demo live with the examples.
include examples/demo.mk
