#!/usr/bin/env bash
# scripts/run.sh — `make run`: starts a local Kowloon stack in the background
# (private PostgreSQL and Redis, the gateway, two compute nodes), with its
# state under .run/, and prints a dev API key and a curl example.
# Starts only what is not already running; `make stop` stops it all.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. scripts/lib.sh

# KOWLOON_RUN_* move the state and ports (tests run a second stack beside one)
STATE=${KOWLOON_RUN_STATE:-$ROOT/.run}
PG_PORT=${KOWLOON_RUN_PG_PORT:-55432}
REDIS_PORT=${KOWLOON_RUN_REDIS_PORT:-56379}
GW_ADDR=127.0.0.1:${KOWLOON_RUN_GATEWAY_PORT:-8080}
GW_URL=http://$GW_ADDR
# the gateway's cluster listener: what the nodes call
GW_CLUSTER_ADDR=127.0.0.1:${KOWLOON_RUN_CLUSTER_PORT:-8081}
GW_CLUSTER_URL=http://$GW_CLUSTER_ADDR
NODES=("node-1 127.0.0.1:${KOWLOON_RUN_NODE1_PORT:-8091}" "node-2 127.0.0.1:${KOWLOON_RUN_NODE2_PORT:-8092}")
GATEWAY=$ROOT/bin/kowloon-gateway
COMPUTE=$ROOT/bin/kowloon-compute

DB_URL=postgresql://kowloon@127.0.0.1:$PG_PORT/kowloon
REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0

# Fails the run: shows the end of LOG (when given) and how to clean up.
fail() {
    local msg=$1 log=${2:-}
    [ -n "$log" ] && kl_log_tail "$log"
    printf 'error: %s\n' "$msg" >&2
    printf 'What did start is still running; `make stop` stops it.\n' >&2
    exit 1
}

# Returns 0 when every part of the stack is alive.
all_running() {
    kl_pg_running "$STATE" || return 1
    kl_pidfile_alive "$STATE/pids/redis.pid" redis-server >/dev/null || return 1
    kl_pidfile_alive "$STATE/pids/gateway.pid" kowloon-gateway >/dev/null || return 1
    local n
    for n in "${NODES[@]}"; do
        kl_pidfile_alive "$STATE/pids/${n%% *}.pid" kowloon-compute >/dev/null || return 1
    done
}

# Prints how many of our nodes GET /v1/nodes reports up.
nodes_up() {
    curl -s --max-time 3 -H "Authorization: Bearer $(cat "$STATE/dev-key")" "$GW_URL/v1/nodes" 2>/dev/null |
        python3 -c '
import json, sys
names = set(sys.argv[1:])
try:
    nodes = json.load(sys.stdin).get("nodes", [])
except ValueError:
    nodes = []
print(sum(1 for n in nodes if n.get("name") in names and n.get("state") == "up"))
' "${NODES[@]%% *}"
}

print_usage() {
    cat <<EOF

Kowloon is running: gateway $GW_URL (nodes call it on $GW_CLUSTER_URL), nodes $(printf '%s, ' "${NODES[@]}" | sed 's/, $//') (logs in $STATE/log/).
Dev API key (tenant "dev", admin): $(cat "$STATE/dev-key")
Dashboard: $GW_URL/ui/ (sign in with that key)

Try it (from any directory):
  KEY=\$(cat $STATE/dev-key)
  JOB=\$(curl -s -X POST $GW_URL/v1/jobs -H "Authorization: Bearer \$KEY" \\
        -H 'Content-Type: application/json' \\
        -d '{"kernel":"saxpy","params":{"a":2},"inputs":{"x":{"dtype":"float32","shape":[3],"data":[1,2,3]},"y":{"dtype":"float32","shape":[3],"data":[10,20,30]}}}' |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  sleep 1; curl -s $GW_URL/v1/jobs/\$JOB -H "Authorization: Bearer \$KEY"; echo
  curl -s $GW_URL/v1/jobs/\$JOB/result -H "Authorization: Bearer \$KEY"; echo
$(if [ -s "$STATE/task-images" ]; then cat <<EOT

Your own program in a container (images allowed: $(cat "$STATE/task-images")):
  export KOWLOON_URL=$GW_URL KOWLOON_API_KEY=\$KEY PYTHONPATH=$ROOT/sdk/python/src
  python3 -m kowloon task run --image localhost/kowloon-python:1 -- python3 -c 'print(1)'
EOT
fi)

Stop it with: make stop
EOF
}

if all_running; then
    kl_info "Kowloon is already running (pids in .run/pids); nothing changed."
    if [ "$GATEWAY" -nt "$STATE/pids/gateway.pid" ] || [ "$COMPUTE" -nt "$STATE/pids/gateway.pid" ]; then
        kl_info "The binaries were rebuilt since it started: \`make stop && make run\` runs the new ones."
    fi
    [ -s "$STATE/dev-key" ] && print_usage
    exit 0
fi

for b in "$GATEWAY" "$COMPUTE"; do
    [ -x "$b" ] || kl_die "$b is missing: run \`make all\` first"
done
mkdir -p "$STATE/log" "$STATE/pids"

# The cluster token is made once and kept: nodes register with it (each then
# holds a credential of its own, in .run/node-state, mode 0600).
if [ ! -s "$STATE/cluster-token" ]; then
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$STATE/cluster-token")
fi
# Passed through the environment, not argv, so `ps` does not show it.
KOWLOON_CLUSTER_TOKEN=$(cat "$STATE/cluster-token")
export KOWLOON_CLUSTER_TOKEN

kl_pg_start "$STATE" "$PG_PORT" || fail "PostgreSQL did not start on port $PG_PORT" "$STATE/log/postgres.log"
kl_redis_start "$STATE" "$REDIS_PORT" || fail "Redis did not start on port $REDIS_PORT" "$STATE/log/redis.log"

# ---------------------------------------------------------------- tasks
# The engine set-up and the small python+numpy image tasks run here, made
# once and cached (scripts/task-image.sh: ~40 s to 2 min the first time);
# without podman the nodes run kernels only. The gateway allows the local
# images (localhost/kowloon-*) to tenants that have no list of their own —
# here the dev tenant — so `kowloon task run --image
# localhost/kowloon-python:1 -- python3 -c 'print(1)'` works at once.
# KOWLOON_RUN_TASK_IMAGES sets other patterns (comma-separated fnmatch).
TASK_ARGS=(--task-engine none)
TASK_IMAGES=
if command -v podman >/dev/null 2>&1; then
    kl_info "tasks: preparing podman and the image localhost/kowloon-python:1 (cached after the first time)"
    if conf=$(scripts/task-image.sh 2>>"$STATE/log/task-image.log" | tail -n 1) && [ -n "$conf" ]; then
        TASK_ARGS=(--task-containers-conf "$conf" --task-scratch "$STATE/tasks")
        TASK_IMAGES=${KOWLOON_RUN_TASK_IMAGES:-localhost/kowloon-*}
    else
        kl_warn "the task image could not be built (see $STATE/log/task-image.log): nodes run kernels only"
    fi
else
    kl_warn "podman is not installed (scripts/install-deps.sh installs it): nodes run kernels only"
fi

# ---------------------------------------------------------------- gateway
if pid=$(kl_pidfile_alive "$STATE/pids/gateway.pid" kowloon-gateway); then
    kl_info "gateway: already running (pid $pid)"
else
    kl_log_rotate "$STATE/log/gateway.log"
    kl_info "gateway: migrating the database"
    "$GATEWAY" migrate --database-url "$DB_URL" >>"$STATE/log/gateway.log" 2>&1 </dev/null \
        || fail "kowloon-gateway migrate failed" "$STATE/log/gateway.log"
    kl_port_open 127.0.0.1 "${GW_ADDR#*:}" && fail "port ${GW_ADDR#*:} is taken by another process"
    kl_port_open 127.0.0.1 "${GW_CLUSTER_ADDR#*:}" &&
        fail "port ${GW_CLUSTER_ADDR#*:} (the cluster listener) is taken by another process"
    kl_info "gateway: starting on $GW_ADDR, cluster listener on $GW_CLUSTER_ADDR"
    # the allow-list goes by the environment (KOWLOON_TASK_IMAGES is
    # --task-images): a pattern with * in argv would read as a glob to a
    # reader pasting the command line from `ps`
    KOWLOON_TASK_IMAGES=$TASK_IMAGES nohup "$GATEWAY" serve --listen "$GW_ADDR" \
        --cluster-listen "$GW_CLUSTER_ADDR" \
        --database-url "$DB_URL" --redis-url "$REDIS_URL" --blob-dir "$STATE/blobs" \
        >>"$STATE/log/gateway.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$STATE/pids/gateway.pid"
    if [ -n "$TASK_IMAGES" ]; then echo "$TASK_IMAGES" >"$STATE/task-images"; else rm -f "$STATE/task-images"; fi
fi
if ! kl_wait_http "$GW_URL/readyz" 20 "$pid"; then
    kill -0 "$pid" 2>/dev/null || fail "the gateway exited during start" "$STATE/log/gateway.log"
    fail "the gateway did not become ready at $GW_URL/readyz within 20 s" "$STATE/log/gateway.log"
fi

# A key from an earlier run still works unless the database was wiped since.
if [ -s "$STATE/dev-key" ] &&
   [ "$(kl_http_status "$GW_URL/v1/nodes" -H "Authorization: Bearer $(cat "$STATE/dev-key")")" = 401 ]; then
    kl_info "dev key: the database no longer knows .run/dev-key; making a new one"
    rm -f "$STATE/dev-key"
fi
if [ ! -s "$STATE/dev-key" ]; then
    (umask 077 && "$GATEWAY" keys create --tenant dev --admin --database-url "$DB_URL" \
        >"$STATE/dev-key.new" 2>>"$STATE/log/gateway.log" </dev/null) \
        || fail "kowloon-gateway keys create failed" "$STATE/log/gateway.log"
    mv "$STATE/dev-key.new" "$STATE/dev-key"
fi

# ---------------------------------------------------------------- nodes
for n in "${NODES[@]}"; do
    name=${n%% *} addr=${n#* }
    if pid=$(kl_pidfile_alive "$STATE/pids/$name.pid" kowloon-compute); then
        kl_info "$name: already running (pid $pid)"
        continue
    fi
    kl_port_open 127.0.0.1 "${addr#*:}" && fail "port ${addr#*:} (for $name) is taken by another process"
    kl_log_rotate "$STATE/log/$name.log"
    kl_info "$name: starting on $addr"
    # one host: the nodes share the gateway's blob directory (inputs mapped,
    # outputs written there, not sent over HTTP)
    nohup "$COMPUTE" --gateway "$GW_CLUSTER_URL" --listen "$addr" --slots 2 --backend auto \
        --name "$name" --blob-dir "$STATE/blobs" --state-dir "$STATE/node-state" "${TASK_ARGS[@]}" \
        >>"$STATE/log/$name.log" 2>&1 </dev/null &
    echo $! >"$STATE/pids/$name.pid"
done

deadline=$((SECONDS + 20))
while [ "$(nodes_up)" != "${#NODES[@]}" ]; do
    for n in "${NODES[@]}"; do
        name=${n%% *}
        kl_pidfile_alive "$STATE/pids/$name.pid" kowloon-compute >/dev/null \
            || fail "$name exited during start" "$STATE/log/$name.log"
    done
    if [ "$SECONDS" -ge "$deadline" ]; then
        kl_log_tail "$STATE/log/gateway.log" 20
        for n in "${NODES[@]}"; do kl_log_tail "$STATE/log/${n%% *}.log" 20; done
        fail "GET /v1/nodes did not show ${#NODES[@]} nodes up within 20 s (it shows $(nodes_up))"
    fi
    sleep 0.3
done

print_usage
