#!/usr/bin/env bash
# scripts/stop.sh — `make stop`: stops the stack that scripts/run.sh started
# (nodes first, so they deregister while the gateway is up; then the gateway,
# Redis and PostgreSQL). Idempotent; keeps .run/ (data, keys, logs).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. scripts/lib.sh

STATE=${KOWLOON_RUN_STATE:-$ROOT/.run}
if [ ! -d "$STATE" ]; then
    kl_info "Kowloon is not running (no .run/)."
    exit 0
fi

# Nodes stop side by side; each may drain its runs for up to 30 s (its own
# grace period) before it deregisters, so they get 35 s before SIGKILL.
for pidfile in "$STATE"/pids/node-*.pid; do
    [ -e "$pidfile" ] || continue
    kl_stop_pidfile "$pidfile" "$(basename "$pidfile" .pid)" kowloon-compute 35 &
done
wait
kl_stop_pidfile "$STATE/pids/gateway.pid" gateway kowloon-gateway 15
kl_redis_stop "$STATE"
kl_pg_stop "$STATE"
kl_info "Kowloon stopped."
