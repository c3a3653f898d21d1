#!/usr/bin/env bash
# Runs docker-compose.yml: a server and three agents as containers.
#
#   ./compose.sh up     start the server, wait for its join token, start the agents
#   ./compose.sh down   stop everything, remove the daemons the agents started and ./data
#
# Then:  export KUBECONFIG=$PWD/data/host.kubeconfig; kubectl get nodes
set -euo pipefail
cd "$(dirname "$0")"
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-everynode}
export EVERYNODE_DATA=${EVERYNODE_DATA:-$PWD/data}
export EVERYNODE_API_PORT=${EVERYNODE_API_PORT:-7443}
if docker compose version >/dev/null 2>&1; then DC=(docker compose); else DC=(docker-compose); fi

up() {
	docker image inspect everynode:dev >/dev/null 2>&1 || { echo "everynode:dev is missing: run \"make image\" in the repository root" >&2; exit 1; }
	mkdir -p "$EVERYNODE_DATA"
	"${DC[@]}" up -d server
	printf 'waiting for the join token '
	for _ in $(seq 1 60); do
		[ -s "$EVERYNODE_DATA/server/admin.kubeconfig" ] && break
		printf '.'
		sleep 1
	done
	[ -s "$EVERYNODE_DATA/server/admin.kubeconfig" ] || { echo; "${DC[@]}" logs server >&2; exit 1; }
	echo ' ok'
	EVERYNODE_TOKEN=$(tr -d '\n' <"$EVERYNODE_DATA/server/join-token")
	export EVERYNODE_TOKEN
	"${DC[@]}" up -d agent1 agent2 agent3
	sed "s|server: https://[^ ]*|server: https://127.0.0.1:$EVERYNODE_API_PORT|" \
		"$EVERYNODE_DATA/server/admin.kubeconfig" >"$EVERYNODE_DATA/host.kubeconfig"
	cat <<MSG

everynode runs: a server and agent1..3 (agent1 zone=edge, agent2 zone=core,
agent3 tainted dedicated=storage:NoSchedule).
  export KUBECONFIG=$EVERYNODE_DATA/host.kubeconfig
  kubectl get nodes -o wide
  kubectl apply -f ../daemonset.yaml -f ../nodeselector.yaml -f ../tolerations.yaml
  kubectl get pods -o wide
  docker kill ${COMPOSE_PROJECT_NAME}_agent2_1       # its Node turns NotReady within seconds
  ./compose.sh down
MSG
}

down() {
	EVERYNODE_TOKEN=x "${DC[@]}" down --remove-orphans || true
	for n in agent1 agent2 agent3; do
		ids=$(docker ps -aq --filter "label=everynode.io/node=$n")
		# shellcheck disable=SC2086
		[ -z "$ids" ] || docker rm -f $ids >/dev/null
	done
	# The containers run as root: their files may need sudo to remove.
	rm -rf "$EVERYNODE_DATA" 2>/dev/null || echo "some files in $EVERYNODE_DATA belong to root; remove them with: sudo rm -rf $EVERYNODE_DATA"
}

case "${1:-up}" in
up) up ;;
down) down ;;
*) echo "usage: $0 up|down" >&2; exit 1 ;;
esac
