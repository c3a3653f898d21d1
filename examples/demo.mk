# The demo: a server with its local agent on this machine's Docker engine,
# the example daemon on it, and what to try next. No registry is used.
# Included by the top-level Makefile:  include examples/demo.mk
# (it includes examples/images.mk itself when that is not included yet).
#
#   make demo        build bin/everynode and the example images, start the
#                    server in the background (data in ./.demo, API on
#                    127.0.0.1:6443 or a free port, log in .demo/server.log),
#                    apply examples/daemonset.yaml and show it running
#   make demo-down   stop the server, remove the demo node's containers and .demo
#   make image       the everynode:dev image (FROM scratch + bin/everynode), for
#                    examples/compose and the multi-host test

DEMO_EXAMPLES_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
ifeq ($(origin EXAMPLES_DIR),undefined)
include $(DEMO_EXAMPLES_DIR)/images.mk
endif
DOCKER        ?= docker
GO            ?= go
EVERYNODE_BIN ?= bin/everynode
EVERYNODE_IMAGE ?= everynode:dev

.PHONY: demo demo-down demo-bin image compose-up compose-down compose-ha compose-ha-down

demo-bin:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(EVERYNODE_BIN) ./cmd/everynode

demo: demo-bin images
	BIN=$(EVERYNODE_BIN) DOCKER=$(DOCKER) $(DEMO_EXAMPLES_DIR)/demo.sh up

demo-down:
	BIN=$(EVERYNODE_BIN) DOCKER=$(DOCKER) $(DEMO_EXAMPLES_DIR)/demo.sh down

image: demo-bin
	$(DOCKER) build -q -t $(EVERYNODE_IMAGE) -f $(DEMO_EXAMPLES_DIR)/compose/Dockerfile $(dir $(EVERYNODE_BIN))
	@echo "built $(EVERYNODE_IMAGE)"

compose-up: image images
	cd $(DEMO_EXAMPLES_DIR)/compose && ./compose.sh up

compose-down:
	cd $(DEMO_EXAMPLES_DIR)/compose && ./compose.sh down

# Three servers on an embedded etcd cluster and five agents (docs/ha.md).
compose-ha: image images
	cd $(DEMO_EXAMPLES_DIR)/compose-ha && ./compose.sh up && ./compose.sh check

compose-ha-down:
	cd $(DEMO_EXAMPLES_DIR)/compose-ha && ./compose.sh down
