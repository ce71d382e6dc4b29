#!/usr/bin/env bash
# bench/run.sh — `make bench`: service benchmarks on a private stack.
#
# Starts its own PostgreSQL (default durability: fsync on, synchronous_commit
# on), Redis, gateway and two compute nodes (--slots 2, --backend auto) on free
# loopback ports under a temp directory, creates an API key, and prints:
#   1. accepted submits/s (wrk POST /v1/jobs, saxpy n=1024 b64) at 16 and 64
#      connections, with latency p50/p99 and the non-2xx count
#   2. end-to-end tiny-job throughput (submit N jobs, wait for all)
#   3. end-to-end latency p50/p99 at a fixed 100 jobs/s (client and server view)
#   4. pgbench single-row INSERT tps at 16 clients against the same PostgreSQL,
#      and the ratio of 1. to it
#   5. a summary with the targets, met or not
#   6. the data path (bench/datapath.py): raw tensor throughput against the
#      disk's rate, GEMM through the service against local BLAS, a 45 MB
#      base64 submit, input re-use across 20 jobs, peak RSS of a 1 GiB case.
# It never fails on time: it exits non-zero only when the stack could not
# start or a result was wrong. Everything it started is stopped at the end.
#
# Environment knobs (defaults in brackets): KL_BENCH_WRK_S [10],
# KL_BENCH_PGBENCH_S [10], KL_BENCH_TPUT_N [2000], KL_BENCH_TPUT_CONC [32],
# KL_BENCH_LAT_RATE [100], KL_BENCH_LAT_S [10], KL_BENCH_ONLY=data (only
# phase 6) or =control (phases 1-5 only), KL_BENCH_KEEP=1 keeps the
# temp directory (logs) after the run; it is also kept when the run fails.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. scripts/lib.sh

WRK_S=${KL_BENCH_WRK_S:-10}
PGBENCH_S=${KL_BENCH_PGBENCH_S:-10}
TPUT_N=${KL_BENCH_TPUT_N:-2000}
TPUT_CONC=${KL_BENCH_TPUT_CONC:-32}
LAT_RATE=${KL_BENCH_LAT_RATE:-100}
LAT_S=${KL_BENCH_LAT_S:-10}

GATEWAY=$ROOT/bin/kowloon-gateway
COMPUTE=$ROOT/bin/kowloon-compute
KB=(python3 "$ROOT/bench/klbench.py")

say() { printf '%s\n' "$*"; }
die() { printf 'bench: error: %s\n' "$*" >&2; exit 2; }

# ---------------------------------------------------------------- tools
for b in "$GATEWAY" "$COMPUTE"; do
    [ -x "$b" ] || die "$b is missing: run \`make all\` first"
done
command -v wrk >/dev/null 2>&1 || die "wrk not found (apt-get install wrk)"
command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found (apt-get install redis-tools)"
command -v curl >/dev/null 2>&1 || die "curl not found"
PGBIN=$(kl_pg_bindir) || die "PostgreSQL binaries not found (set KOWLOON_PG_BIN)"
PGBENCH=$PGBIN/pgbench
[ -x "$PGBENCH" ] || PGBENCH=$(command -v pgbench || true)
[ -n "$PGBENCH" ] && [ -x "$PGBENCH" ] || die "pgbench not found (it ships with postgresql)"
PSQL=$PGBIN/psql
if ! python3 -c 'import numpy' 2>/dev/null; then
    say "bench: installing bench/requirements.txt"
    python3 -m pip install -q -r "$ROOT/bench/requirements.txt" >/dev/null 2>&1 ||
        die "could not pip install bench/requirements.txt"
fi

# ---------------------------------------------------------------- stack
STATE=$(mktemp -d /tmp/kowloon-bench.XXXXXX)
RES=$STATE/results
mkdir -p "$STATE/log" "$STATE/pids" "$RES"
GW_PID= NODE_PIDS=() BG_PIDS=() RESULT_RC=0

cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    say ""
    say "bench: stopping the stack"
    # a load generator still running (interrupted run): stop it first
    for p in "${BG_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && kl_kill_wait "$p" 5; done
    for p in "${NODE_PIDS[@]}"; do kl_kill_wait "$p" 10; done
    [ -n "$GW_PID" ] && kl_kill_wait "$GW_PID" 15
    wait 2>/dev/null
    kl_redis_stop "$STATE" >/dev/null
    kl_pg_stop "$STATE" >/dev/null
    if [ "${KL_BENCH_KEEP:-0}" = 1 ] || [ "$rc" = 1 ] || [ "$rc" = 2 ]; then
        say "bench: kept $STATE (logs in $STATE/log; remove it when done)"
    else
        local home
        home=$(kl__pg_home "$STATE")
        [ "$home" != "$STATE/pg" ] && case $home in /tmp/kowloon-pg.*) rm -rf "$home" ;; esac
        rm -rf "$STATE"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Fails the run because the stack could not start.
stack_fail() {
    [ -n "${2:-}" ] && kl_log_tail "$2"
    die "$1"
}

PG_PORT=$(kl_free_port)
REDIS_PORT=$(kl_free_port)
GW_PORT=$(kl_free_port)
N1_PORT=$(kl_free_port)
N2_PORT=$(kl_free_port)
GW_URL=http://127.0.0.1:$GW_PORT
DB_URL=postgresql://kowloon@127.0.0.1:$PG_PORT/kowloon
REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
KOWLOON_CLUSTER_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export KOWLOON_CLUSTER_TOKEN

say "== Kowloon bench: private stack under $STATE"
kl_pg_start "$STATE" "$PG_PORT" >"$STATE/log/setup.log" 2>&1 ||
    stack_fail "PostgreSQL did not start on port $PG_PORT" "$STATE/log/postgres.log"
kl_redis_start "$STATE" "$REDIS_PORT" >>"$STATE/log/setup.log" 2>&1 ||
    stack_fail "Redis did not start on port $REDIS_PORT" "$STATE/log/redis.log"
psql_q() { "$PSQL" -X -q -h 127.0.0.1 -p "$PG_PORT" -U kowloon -d kowloon -Atc "$1"; }
PG_FSYNC=$(psql_q "SHOW fsync")
PG_SYNC=$(psql_q "SHOW synchronous_commit")
PG_POSTMASTER=$(head -n 1 "$(kl__pg_home "$STATE")/data/postmaster.pid")

"$GATEWAY" migrate --database-url "$DB_URL" >>"$STATE/log/gateway.log" 2>&1 </dev/null ||
    stack_fail "kowloon-gateway migrate failed" "$STATE/log/gateway.log"
# The benchmark measures the pipeline, not the limits that protect it: no
# rate limit, no queued quota, no per-address connection cap (wrk's 64
# connections all come from 127.0.0.1).
"$GATEWAY" serve --listen "127.0.0.1:$GW_PORT" --database-url "$DB_URL" --redis-url "$REDIS_URL" \
    --rate-limit-rps 0 --max-queued-per-tenant 0 --max-conns-per-ip 0 \
    --blob-dir "$STATE/blobs" --max-output-mb 4096 --blob-quota-mb 0 \
    >>"$STATE/log/gateway.log" 2>&1 </dev/null &
GW_PID=$!
kl_wait_http "$GW_URL/readyz" 20 "$GW_PID" ||
    stack_fail "the gateway did not become ready at $GW_URL/readyz" "$STATE/log/gateway.log"
KL_BENCH_KEY=$("$GATEWAY" keys create --tenant bench --admin --database-url "$DB_URL" \
               2>>"$STATE/log/gateway.log" </dev/null) ||
    stack_fail "kowloon-gateway keys create failed" "$STATE/log/gateway.log"
export KL_BENCH_KEY

i=0
for port in "$N1_PORT" "$N2_PORT"; do
    i=$((i + 1))
    "$COMPUTE" --gateway "$GW_URL" --listen "127.0.0.1:$port" --slots 2 --backend auto \
        --name "bench-node-$i" >>"$STATE/log/node-$i.log" 2>&1 </dev/null &
    NODE_PIDS+=($!)
done
nodes_up() {
    curl -s --max-time 3 -H "Authorization: Bearer $KL_BENCH_KEY" "$GW_URL/v1/nodes" 2>/dev/null |
        python3 -c '
import json, sys
try:
    nodes = json.load(sys.stdin).get("nodes", [])
except ValueError:
    nodes = []
up = [n for n in nodes if n.get("state") == "up"]
print(len(up), " ".join("%s:%s(%s)" % (n["name"], n["backend"], n.get("backend_reason") or "-") for n in up))'
}
deadline=$((SECONDS + 20))
while :; do
    read -r nup desc <<<"$(nodes_up)"
    [ "${nup:-0}" -ge 2 ] && break
    for k in "${!NODE_PIDS[@]}"; do
        kill -0 "${NODE_PIDS[$k]}" 2>/dev/null ||
            stack_fail "compute node bench-node-$((k + 1)) exited during start" "$STATE/log/node-$((k + 1)).log"
    done
    [ "$SECONDS" -ge "$deadline" ] && stack_fail "the two nodes did not come up within 20 s" "$STATE/log/gateway.log"
    sleep 0.2
done
say "   PostgreSQL $("$PSQL" -X -h 127.0.0.1 -p "$PG_PORT" -U kowloon -d kowloon -Atc 'SHOW server_version') on :$PG_PORT (fsync=$PG_FSYNC, synchronous_commit=$PG_SYNC), Redis :$REDIS_PORT, gateway $GW_URL"
say "   nodes up: $desc (--slots 2 each)"
say "   machine: $(nproc) cores; timing on a small machine is noisy. Background load before the run:"
"${KB[@]}" cpu --seconds 1 --json "$RES/background.json"
say "   phases run in this order: 4 (pgbench, on the idle stack), 2, 3, 1 @16, 1 @64; 5 sums up"

CPU_ARGS=(--proc "gateway=$GW_PID" --proc "node-1=${NODE_PIDS[0]}" --proc "node-2=${NODE_PIDS[1]}"
          --proc "redis=$(cat "$STATE/pids/redis.pid")" --pg "$PG_POSTMASTER")

# Runs CMD... in the background while sampling CPU of the stack (and of CMD
# itself, as NAME) from DELAY s for SECS s; prints the sample after CMD's
# output (CMD's stdout goes to OUT). Returns CMD's status.
run_sampled() {
    local name=$1 delay=$2 secs=$3 out=$4
    shift 4
    "$@" >"$out" 2>&1 &
    local pid=$!
    "${KB[@]}" cpu --delay "$delay" --seconds "$secs" "${CPU_ARGS[@]}" --proc "$name=$pid" \
        >"$out.cpu" 2>&1 &
    local spid=$! rc=0
    BG_PIDS=("$pid" "$spid")
    wait "$pid" || rc=$?
    wait "$spid" || true
    BG_PIDS=()
    return "$rc"
}

# Cancels (in PostgreSQL, directly) the jobs a submit flood left queued, empties
# the ready queue, and waits for running ones to end, so the next phase starts
# on an idle system. The cancel API would take longer than the flood itself.
drain() {
    local n
    n=$(psql_q "WITH u AS (UPDATE jobs SET state = 'cancelled', cancel_requested = true,
                finished_at = clock_timestamp() WHERE state = 'queued' RETURNING 1)
                SELECT count(*) FROM u")
    redis-cli -h 127.0.0.1 -p "$REDIS_PORT" DEL kowloon:ready >/dev/null
    local deadline=$((SECONDS + 30))
    while [ "$(psql_q "SELECT count(*) FROM jobs WHERE state = 'running'")" != 0 ] &&
          [ "$SECONDS" -lt "$deadline" ]; do
        sleep 0.2
    done
    [ "$n" = 0 ] || say "   (drained: $n queued job(s) left by the flood were cancelled in PostgreSQL)"
}

ONLY=${KL_BENCH_ONLY:-all}
if [ "$ONLY" != data ]; then
# ---------------------------------------------------------------- 4. pgbench
# First, on an idle system, so that it measures PostgreSQL alone.
say ""
psql_q "CREATE TABLE IF NOT EXISTS bench_t (id bigserial PRIMARY KEY, v integer NOT NULL)" >/dev/null
printf '\\set v random(1, 1000000)\nINSERT INTO bench_t (v) VALUES (:v);\n' >"$STATE/insert.sql"
run_sampled pgbench 2 6 "$STATE/pgbench.out" \
    "$PGBENCH" -h 127.0.0.1 -p "$PG_PORT" -U kowloon -n -c 16 -j 2 -T "$PGBENCH_S" \
    -f "$STATE/insert.sql" kowloon || true
"${KB[@]}" pgbench --file "$STATE/pgbench.out" --seconds "$PGBENCH_S" --sync "$PG_SYNC" \
    --json "$RES/pgbench.json"
cat "$STATE/pgbench.out.cpu"
psql_q "DROP TABLE bench_t" >/dev/null

# ---------------------------------------------------------------- 2. throughput
say ""
rc=0
run_sampled client 1 4 "$STATE/tput.out" \
    "${KB[@]}" throughput --url "$GW_URL" --n "$TPUT_N" --concurrency "$TPUT_CONC" \
    --json "$RES/throughput.json" || rc=$?
cat "$STATE/tput.out" "$STATE/tput.out.cpu"
[ "$rc" = 0 ] || RESULT_RC=1
drain

# ---------------------------------------------------------------- 3. latency
say ""
rc=0
run_sampled client 2 6 "$STATE/lat.out" \
    "${KB[@]}" latency --url "$GW_URL" --rate "$LAT_RATE" --duration "$LAT_S" \
    --json "$RES/latency.json" || rc=$?
cat "$STATE/lat.out" "$STATE/lat.out.cpu"
[ "$rc" = 0 ] || RESULT_RC=1

# ---------------------------------------------------------------- 1. submits
"${KB[@]}" body --out "$STATE/body.json"
export KL_BENCH_BODY=$STATE/body.json
for conns in 16 64; do
    say ""
    before=$(psql_q "SELECT count(*) FROM jobs")
    run_sampled wrk 2 6 "$STATE/wrk$conns.out" \
        wrk -t 2 -c "$conns" -d "${WRK_S}s" --timeout 10s -s "$ROOT/bench/submit.lua" "$GW_URL" || true
    after=$(psql_q "SELECT count(*) FROM jobs")
    "${KB[@]}" wrk --file "$STATE/wrk$conns.out" --connections "$conns" \
        --jobs-rows $((after - before)) --json "$RES/wrk$conns.json"
    cat "$STATE/wrk$conns.out.cpu"
    drain
done

# ---------------------------------------------------------------- 5. summary
for p in "$GW_PID" "${NODE_PIDS[@]}"; do
    kill -0 "$p" 2>/dev/null || { say "bench: a stack process (pid $p) died during the run"; RESULT_RC=1; }
done
"${KB[@]}" summary --dir "$RES" --fsync "$PG_FSYNC" --sync "$PG_SYNC"
fi

# ---------------------------------------------------------------- 6. data path
if [ "$ONLY" != control ]; then
    say ""
    mkdir -p "$STATE/data"
    python3 "$ROOT/bench/datapath.py" --url "$GW_URL" --key "$KL_BENCH_KEY" \
        --nodes "http://127.0.0.1:$N1_PORT,http://127.0.0.1:$N2_PORT" --token "$KOWLOON_CLUSTER_TOKEN" \
        --gw-pid "$GW_PID" --node-pids "$(IFS=,; echo "${NODE_PIDS[*]}")" --tmp "$STATE/data" \
        --json "$RES/datapath.json" || RESULT_RC=1
    for p in "$GW_PID" "${NODE_PIDS[@]}"; do
        kill -0 "$p" 2>/dev/null || { say "bench: a stack process (pid $p) died during the data path"; RESULT_RC=1; }
    done
fi
exit "$RESULT_RC"
