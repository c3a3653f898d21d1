#!/usr/bin/env bash
# Runs docker-compose.yml: three servers on an embedded etcd cluster and five
# agents as containers (docs/ha.md).
#
#   ./compose.sh up     start server1, then server2 and server3 (each joins once
#                       the previous one serves), then the agents
#   ./compose.sh check  kubectl get nodes against each server
#   ./compose.sh down   stop everything, remove the agents' daemons and ./data
set -euo pipefail
cd "$(dirname "$0")"
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-everynode-ha}
export EVERYNODE_DATA=${EVERYNODE_DATA:-$PWD/data}
export EVERYNODE_IMAGE=${EVERYNODE_IMAGE:-everynode:dev}
export EVERYNODE_API_PORT=${EVERYNODE_API_PORT:-7443} EVERYNODE_API_PORT2=${EVERYNODE_API_PORT2:-7444} EVERYNODE_API_PORT3=${EVERYNODE_API_PORT3:-7445}
if docker compose version >/dev/null 2>&1; then DC=(docker compose); else DC=(docker-compose); fi
ports=([1]=$EVERYNODE_API_PORT [2]=$EVERYNODE_API_PORT2 [3]=$EVERYNODE_API_PORT3)

wait_ready() { # server number
	printf 'waiting for server%s ' "$1"
	for _ in $(seq 1 90); do
		[ -s "$EVERYNODE_DATA/server$1/admin.kubeconfig" ] && { echo ' ok'; return; }
		printf '.'
		sleep 1
	done
	echo
	"${DC[@]}" logs "server$1" >&2
	exit 1
}

up() {
	docker image inspect "$EVERYNODE_IMAGE" >/dev/null 2>&1 || { echo "$EVERYNODE_IMAGE is missing: run \"make image\" in the repository root" >&2; exit 1; }
	mkdir -p "$EVERYNODE_DATA"
	for i in 1 2 3; do
		EVERYNODE_TOKEN=x "${DC[@]}" up -d "server$i"
		wait_ready "$i"
		sed "s|server: https://[^ ]*|server: https://127.0.0.1:${ports[$i]}|" \
			"$EVERYNODE_DATA/server$i/admin.kubeconfig" >"$EVERYNODE_DATA/host-server$i.kubeconfig"
	done
	EVERYNODE_TOKEN=$(tr -d '\n' <"$EVERYNODE_DATA/server1/join-token")
	export EVERYNODE_TOKEN
	"${DC[@]}" up -d agent1 agent2 agent3 agent4 agent5
	cat <<MSG

everynode runs: server1..3 (one etcd cluster) and agent1..5.
  export KUBECONFIG=$EVERYNODE_DATA/host-server1.kubeconfig   # or host-server2/3
  kubectl get nodes
  docker kill ${COMPOSE_PROJECT_NAME}_server1_1   # agents fail over, the controllers move
  ./compose.sh down
MSG
}

check() {
	for i in 1 2 3; do
		echo "== kubectl get nodes through server$i"
		kubectl --kubeconfig "$EVERYNODE_DATA/host-server$i.kubeconfig" get nodes
	done
}

down() {
	EVERYNODE_TOKEN=x "${DC[@]}" down --remove-orphans || true
	for n in agent1 agent2 agent3 agent4 agent5; do
		ids=$(docker ps -aq --filter "label=everynode.io/node=$n")
		# shellcheck disable=SC2086
		[ -z "$ids" ] || docker rm -f $ids >/dev/null
	done
	rm -rf "$EVERYNODE_DATA" 2>/dev/null || echo "some files in $EVERYNODE_DATA belong to root; remove them with: sudo rm -rf $EVERYNODE_DATA"
}

case "${1:-up}" in
up) up ;;
check) check ;;
down) down ;;
*) echo "usage: $0 up|check|down" >&2; exit 1 ;;
esac
