#!/usr/bin/env bash
# everynode demo: a server with its local agent on this machine's Docker,
# the example daemon on every node, and what to try next.
#
#   examples/demo.sh up      (make demo)       build, start, apply, show
#   examples/demo.sh down    (make demo-down)  stop the server, remove its containers and .demo
#
# Everything lives in $DEMO_DIR (default ./.demo): etcd data, certificates,
# admin.kubeconfig, server.log, server.pid. No registry is used: the images
# are built locally (make images). Expects bin/everynode and the images to be
# built already (the make targets do that).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BIN=${BIN:-bin/everynode}
DEMO_DIR=${DEMO_DIR:-.demo}
DEMO_LISTEN=${DEMO_LISTEN:-127.0.0.1:6443}
DEMO_TIMEOUT=${DEMO_TIMEOUT:-120}
DOCKER=${DOCKER:-docker}
PIDFILE=$DEMO_DIR/server.pid
LOG=$DEMO_DIR/server.log
KUBECONFIG_FILE=$DEMO_DIR/admin.kubeconfig

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

# wait_for DESCRIPTION COMMAND...: run COMMAND every second until it
# succeeds, printing progress, for at most DEMO_TIMEOUT seconds.
wait_for() {
	local what=$1 i=0
	shift
	printf '    waiting for %s ' "$what"
	until "$@" >/dev/null 2>&1; do
		if ! running; then
			echo
			tail -n 30 "$LOG" >&2 || true
			die "the server stopped (log above, full log in $LOG)"
		fi
		i=$((i + 1))
		if [ "$i" -ge "$DEMO_TIMEOUT" ]; then
			echo
			tail -n 30 "$LOG" >&2 || true
			die "no $what after ${DEMO_TIMEOUT}s (server log above, full log in $LOG)"
		fi
		printf '.'
		sleep 1
	done
	echo "ok (${i}s)"
}

# everynode with the demo's kubeconfig (flags may follow the verb's arguments).
ev() { KUBECONFIG=$KUBECONFIG_FILE "$BIN" "$@"; }

node_ready() { ev get nodes | awk 'NR > 1 && $2 == "Ready" { ok = 1 } END { exit !ok }'; }
pod_running() { ev get pods -l app=example-daemon | awk 'NR > 1 && $3 == "Running" { ok = 1 } END { exit !ok }'; }
port_free() { ! (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }

up() {
	[ -x "$BIN" ] || die "$BIN is missing; run \"make demo\" (it builds it) or \"make build\""
	command -v "$DOCKER" >/dev/null || die "docker is not installed; the demo runs the daemons on the local Docker engine"
	"$DOCKER" info >/dev/null 2>&1 || die "the Docker engine does not answer (\"docker info\" fails); start Docker, or check that you may use /var/run/docker.sock"
	mkdir -p "$DEMO_DIR"
	echo '*' >"$DEMO_DIR/.gitignore" # git status stays clean

	if running; then
		say "everynode server already running (pid $(cat "$PIDFILE")); \"make demo-down\" stops it"
	else
		local listen=$DEMO_LISTEN
		if ! port_free "$listen"; then
			listen=${listen%:*}:0
			say "$DEMO_LISTEN is taken; the server picks a free port"
		fi
		say "starting everynode server (data dir $DEMO_DIR, API on $listen, log $LOG)"
		# Loopback only, free ports for gossip and the agent's log endpoint:
		# the demo neither exposes nor collides with anything.
		nohup "$BIN" server --data-dir "$DEMO_DIR" --listen "$listen" \
			--gossip 127.0.0.1:0 --log-listen 127.0.0.1:0 >"$LOG" 2>&1 &
		echo $! >"$PIDFILE"
	fi
	wait_for "the API (admin.kubeconfig)" test -s "$KUBECONFIG_FILE"
	wait_for "the node to be Ready" node_ready
	ev get nodes -o name | head -n 1 | sed 's|^node/||' >"$DEMO_DIR/node"

	say "applying examples/daemonset.yaml"
	ev apply -f examples/daemonset.yaml
	wait_for "the example daemon's pod to be Running" pod_running

	say "everynode get nodes,ds,pods -o wide"
	ev get nodes -o wide
	echo
	ev get ds -o wide
	echo
	ev get pods -o wide
	echo

	local pod ip
	pod=$(ev get pods -l app=example-daemon -o name | head -n 1)
	pod=${pod#pod/}
	ip=$(ev get pods -l app=example-daemon -o wide | awk 'NR == 2 { print $6 }')
	if [ -n "$ip" ] && [ "$ip" != "<none>" ] && command -v curl >/dev/null; then
		say "curl http://$ip:8080/"
		curl -fsS --max-time 5 "http://$ip:8080/" || echo "(the daemon does not answer on $ip yet)"
		echo
	fi
	say "everynode logs $pod --tail 5"
	sleep 3 # let it write a line or two
	if ! ev logs "$pod" --tail 5; then
		echo "(logs through the API failed; the container's own output:)"
		"$DOCKER" logs --tail 5 "$("$DOCKER" ps -q --filter "label=everynode.io/pod-name=$pod" | head -n 1)" 2>&1 || true
	fi
	echo

	cat <<EOF
$(say "everynode is running: what to try next")
  export KUBECONFIG=$ROOT/$KUBECONFIG_FILE
  kubectl get nodes,ds,pods -o wide             # real kubectl works, so does bin/everynode get …
  kubectl logs -f ds/example-daemon             # or: bin/everynode logs -f $pod

  # roll the daemon from v1 to v2, node by node
  kubectl set image ds/example-daemon daemon=everynode-example/daemon:v2
  kubectl rollout status ds/example-daemon
  kubectl rollout history ds/example-daemon
  kubectl rollout undo ds/example-daemon

  # target nodes by label: the edge daemon runs only where zone=edge
  kubectl apply -f examples/nodeselector.yaml
  kubectl label node $(ev get nodes -o name | head -n 1 | sed 's|^node/||') zone=edge
  kubectl get pods -o wide

  # more in examples/*.yaml (tolerations, surge, OnDelete) and examples/compose
  # (a server and three agents as containers)

  # the fleet in a browser: nodes × DaemonSets, live (docs/dashboard.md);
  # log in with the admin token: the token: line of $KUBECONFIG_FILE
  https://$DEMO_LISTEN/ui/

  make demo-down                                # stop the server, remove its containers and $DEMO_DIR
EOF
}

down() {
	if running; then
		local pid
		pid=$(cat "$PIDFILE")
		say "stopping everynode server (pid $pid)"
		kill "$pid"
		for _ in $(seq 1 30); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 1
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "    still running after 30s; killing it"
			kill -9 "$pid" 2>/dev/null || true
		fi
	else
		say "no demo server running"
	fi
	if command -v "$DOCKER" >/dev/null && "$DOCKER" info >/dev/null 2>&1; then
		# Only the demo node's containers: other everynode nodes on this
		# engine (examples/compose, tests) are left alone.
		local node ids
		node=$(cat "$DEMO_DIR/node" 2>/dev/null || hostname | tr '[:upper:]' '[:lower:]')
		ids=$("$DOCKER" ps -aq --filter "label=everynode.io/node=$node")
		if [ -n "$ids" ]; then
			say "removing the containers everynode started for node $node (label everynode.io/node=$node)"
			# shellcheck disable=SC2086
			"$DOCKER" rm -f $ids >/dev/null
		fi
	fi
	rm -rf "$DEMO_DIR"
	say "demo stopped and cleaned up"
}

case "${1:-up}" in
up) up ;;
down) down ;;
*) die "usage: $0 [up|down]" ;;
esac
