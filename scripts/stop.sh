#!/usr/bin/env bash
# scripts/stop.sh — `make stop`: stops the stack that scripts/run.sh started
# (nodes first, so they deregister while the gateway is up; then the gateway,
# Redis and PostgreSQL). Idempotent; keeps .run/ (data, keys, logs).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. scripts/lib.sh

STATE=$ROOT/.run
if [ ! -d "$STATE" ]; then
    kl_info "Kowloon is not running (no .run/)."
    exit 0
fi

# Nodes stop side by side: each takes a moment to drain and deregister.
for pidfile in "$STATE"/pids/node-*.pid; do
    [ -e "$pidfile" ] || continue
    kl_stop_pidfile "$pidfile" "$(basename "$pidfile" .pid)" kowloon-compute 10 &
done
wait
kl_stop_pidfile "$STATE/pids/gateway.pid" gateway kowloon-gateway 15
kl_redis_stop "$STATE"
kl_pg_stop "$STATE"
kl_info "Kowloon stopped."
