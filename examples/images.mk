# Example images, built locally: no registry is needed or used.
# Included by the top-level Makefile:  include examples/images.mk
#
#   make images   builds everynode-example/daemon:v1 and :v2 (v2 reports "v2":
#                 roll a DaemonSet from one to the other to watch an update)

EXAMPLES_DIR   := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
EXAMPLE_IMAGE  ?= everynode-example/daemon
DOCKER         ?= docker
GO             ?= go

.PHONY: images example-daemon-bin

example-daemon-bin:
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags='-s -w' -o $(EXAMPLES_DIR)/daemon/bin/daemon ./$(EXAMPLES_DIR)/daemon

images: example-daemon-bin
	$(DOCKER) build -q --build-arg VERSION=v1 -t $(EXAMPLE_IMAGE):v1 $(EXAMPLES_DIR)/daemon
	$(DOCKER) build -q --build-arg VERSION=v2 -t $(EXAMPLE_IMAGE):v2 $(EXAMPLES_DIR)/daemon
	@echo "built $(EXAMPLE_IMAGE):v1 and $(EXAMPLE_IMAGE):v2"
