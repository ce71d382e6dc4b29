#!/usr/bin/env bash
# bench/run.sh — `make bench`: service benchmarks on a private stack.
#
# Starts its own PostgreSQL (default durability: fsync on, synchronous_commit
# on), Redis, gateway and two compute nodes (--slots 4, --backend auto) on free
# loopback ports under a temp directory, creates an API key, and prints the
# rows of issue 9's table, each with its ratio and target, met or not:
#   1. accepted (2xx) submits/s, wrk POST /v1/jobs saxpy n=1024 b64 at 16
#      connections, ÷ pgbench single-row INSERT tps at 16 clients on the same
#      PostgreSQL (run first, on the idle stack); the gateway's thread count
#   2. the same at 256 connections ÷ the figure at 16
#   3. end-to-end backlog: N saxpy n=1024 jobs submitted by 32 clients on the
#      two nodes, wall time until all ended; jobs/s ÷ pgbench INSERT tps
#   4. end-to-end latency at a fixed 100 jobs/s (open loop): the client waits
#      on its job with `Prefer: wait` on POST /v1/jobs where the gateway answers
#      Preference-Applied there; else on GET /v1/jobs/{id} (a long poll) where
#      that answers it; else it polls GET every ~1 ms, and says which
#   5. GET /v1/jobs/{id} per second (wrk over phase 3's finished jobs) at 16
#      connections ÷ pgbench select-only (-S, scale 1, its own database) tps
#   6. the gateway's threads and RSS (/proc/PID/status) at rest, with 10,000
#      idle keep-alive connections (bench/klidle.py, each with one completed
#      request) and with 1,000 running `sleep` jobs on extra nodes started for
#      this phase; then it cancels them. Target: threads constant, RSS <= 256 MB
#   7. a perf profile of the gateway (perf record -g -p) during an extra wrk
#      run at phase 1's peak; the top 25 symbols by self time are printed, then
#      the inclusive time of system calls (which calls that time sits under);
#      the reports are kept (skipped with a reason where perf is missing or
#      refused)
#   8. the summary table: every row, its ratio, target, MET / NOT MET
#   9. the data path (bench/datapath.py): raw tensor throughput against the
#      disk's rate, GEMM through the service against local BLAS, a 45 MB
#      base64 submit, input re-use across 20 jobs, peak RSS of a 1 GiB case.
#  10. jobs across nodes (bench/dist.py).
#  11. tasks (where podman is found): the node alone against the bare engine
#      (bench/tasks_engine.py), then through the gateway (bench/tasks.py):
#      submit -> first log line and -> result against `podman run`, a 1 GiB
#      input read in the container against the host, 200 short tasks in a
#      backlog on the two nodes against the engine's own rate. Where
#      slurmctld is found, Slurm's sbatch -> start / -> end and srun of a
#      trivial job on a private cluster (bench/slurm_start.py), for comparison.
# The figures (JSON per phase, summary.txt, perf.data and its reports) are kept
# in KL_BENCH_OUT. Rate limits, quotas and connection caps are turned off for
# the run (only the options the gateway's --help lists) and the output says
# which. It never fails on time: it exits non-zero only when the stack could
# not start or a result was wrong. Everything it started is stopped at the end.
#
# Environment knobs (defaults in brackets): KL_BENCH_WRK_S [10] (phases 1, 2
# and 5), KL_BENCH_PGBENCH_S [10] (each pgbench run), KL_BENCH_TPUT_N [10000]
# and KL_BENCH_TPUT_CONC [32] (phase 3), KL_BENCH_SLOTS [4] (slots of the two
# nodes), KL_BENCH_LAT_RATE [100] and KL_BENCH_LAT_S [10] (phase 4),
# KL_BENCH_IDLE_CONNS [10000], KL_BENCH_IDLE_JOBS [1000], KL_BENCH_IDLE_SLOTS
# [250] (slots per extra node of phase 6; as many nodes as the jobs need) and
# KL_BENCH_IDLE_JOB_S [300] (how long each would sleep), KL_BENCH_PERF_S [5]
# (phase 7), KL_BENCH_PHASES [1234567] (the control phases to run; 5 needs 3),
# KL_BENCH_ONLY=data (only phase 9), =dist (only phase 10), =tasks (only
# phase 11), =control (phases 1-8) or =scale (only phase 12, bench/scale.sh:
# the simulated cluster of issue 20 on stacks of its own; its knobs are
# listed there), KL_BENCH_TASK_RUNS [10], KL_BENCH_TASK_BACKLOG [200] and
# KL_BENCH_SLURM_RUNS [20] (phase 11), KL_BENCH_OUT
# [var/bench/<UTC time>], KL_BENCH_KEEP=1 keeps the temp directory (logs)
# after the run; it is also kept when the run fails. KL_BENCH_GW_ARGS adds
# options to the gateway's command line (to try a setting). KOWLOON_TEST_ROOT=
# <tree> benchmarks that tree's bin/ instead of this one's.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. scripts/lib.sh

# Phase 12, the cluster-scale bench, starts stacks of its own.
[ "${KL_BENCH_ONLY:-all}" = scale ] && exec "$ROOT/bench/scale.sh"

WRK_S=${KL_BENCH_WRK_S:-10}
PGBENCH_S=${KL_BENCH_PGBENCH_S:-10}
TPUT_N=${KL_BENCH_TPUT_N:-10000}
TPUT_CONC=${KL_BENCH_TPUT_CONC:-32}
SLOTS=${KL_BENCH_SLOTS:-4}
LAT_RATE=${KL_BENCH_LAT_RATE:-100}
LAT_S=${KL_BENCH_LAT_S:-10}
IDLE_CONNS=${KL_BENCH_IDLE_CONNS:-10000}
IDLE_JOBS=${KL_BENCH_IDLE_JOBS:-1000}
IDLE_SLOTS=${KL_BENCH_IDLE_SLOTS:-250}
IDLE_JOB_S=${KL_BENCH_IDLE_JOB_S:-300}
PERF_S=${KL_BENCH_PERF_S:-5}
PHASES=${KL_BENCH_PHASES:-1234567}
OUT=${KL_BENCH_OUT:-$ROOT/var/bench/$(date -u +%Y%m%dT%H%M%SZ)}

TREE=${KOWLOON_TEST_ROOT:-$ROOT}
GATEWAY=$TREE/bin/kowloon-gateway
COMPUTE=$TREE/bin/kowloon-compute
KB=(python3 "$ROOT/bench/klbench.py")

say() { printf '%s\n' "$*"; }
die() { printf 'bench: error: %s\n' "$*" >&2; exit 2; }
phase() { case $PHASES in *"$1"*) return 0 ;; esac; return 1; }

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

# Phase 6 holds IDLE_CONNS connections at both ends (the client and the
# gateway, which inherit this limit), and the gateway talks to nodes besides.
NOFILE_WANT=$((IDLE_CONNS + 4096))
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$NOFILE_WANT" ]; then
    ulimit -Hn "$NOFILE_WANT" 2>/dev/null || true   # needs CAP_SYS_RESOURCE
    hard=$(ulimit -Hn)
fi
if [ "$hard" = unlimited ] || [ "$hard" -ge "$NOFILE_WANT" ]; then
    ulimit -n "$NOFILE_WANT"
else
    ulimit -n "$hard"
fi

# ---------------------------------------------------------------- stack
STATE=$(mktemp -d /tmp/kowloon-bench.XXXXXX)
RES=$OUT
mkdir -p "$STATE/log" "$STATE/pids" "$RES"
GW_PID= NODE_PIDS=() IDLE_PIDS=() DIST_PIDS=() BG_PIDS=() RESULT_RC=0

cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    say ""
    say "bench: stopping the stack"
    # a load generator still running (interrupted run): stop it first
    for p in "${BG_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && kl_kill_wait "$p" 5; done
    for p in "${IDLE_PIDS[@]}" "${DIST_PIDS[@]}" "${NODE_PIDS[@]}"; do kl_kill_wait "$p" 10; done
    [ -n "$GW_PID" ] && kl_kill_wait "$GW_PID" 15
    wait 2>/dev/null
    kl_redis_stop "$STATE" >/dev/null
    kl_pg_stop "$STATE" >/dev/null
    if [ "${KL_BENCH_KEEP:-0}" = 1 ] || [ "$rc" = 1 ] || [ "$rc" = 2 ]; then
        say "bench: kept $STATE (logs in $STATE/log; remove it when done)"
    else
        kl_state_remove "$STATE"
    fi
    say "bench: figures in $RES"
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
GW_URL=http://127.0.0.1:$GW_PORT
# the gateway's cluster listener, which the nodes call
GW_CLUSTER_PORT=$(kl_free_port)
GW_CLUSTER_URL=http://127.0.0.1:$GW_CLUSTER_PORT
DB_URL=postgresql://kowloon@127.0.0.1:$PG_PORT/kowloon
REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
KOWLOON_CLUSTER_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export KOWLOON_CLUSTER_TOKEN

say "== Kowloon bench: private stack under $STATE (gateway and nodes from $TREE/bin), figures to $RES"
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
# rate limit, no queued or running quota, no per-address connection cap (all
# of wrk's connections come from 127.0.0.1), room for phase 6's connections,
# which stay idle longer than the default idle timeout. Only options this
# gateway lists in --help are passed (a redesigned one may have renamed some);
# the output says which were set and which it lacks.
GW_HELP=$("$GATEWAY" --help 2>&1 </dev/null || true)
GW_LIMITS=() LIMITS_SET=() LIMITS_MISSING=()
gw_limit() {   # FLAG VALUE WHY
    if grep -q -- "--$1 " <<<"$GW_HELP"; then
        GW_LIMITS+=("--$1" "$2")
        LIMITS_SET+=("--$1 $2 ($3)")
    else
        LIMITS_MISSING+=("--$1")
    fi
}
MAX_CONNS=$((IDLE_CONNS + 2048))
[ "$MAX_CONNS" -gt 100000 ] && MAX_CONNS=100000
gw_limit rate-limit-rps 0 "no per-key rate limit"
gw_limit read-rate-limit-rps 0 "no per-key rate limit on reads"
gw_limit max-queued-per-tenant 0 "no queued quota"
gw_limit max-running-per-tenant 0 "no running quota"
gw_limit max-conns-per-ip 0 "no per-address cap"
gw_limit max-connections "$MAX_CONNS" "room for phase 6"
gw_limit conn-timeout-s 600 "idle connections kept 10 min"
gw_limit blob-quota-mb 0 "no blob quota"
LIMITS_LINE=$(IFS=,; echo "${LIMITS_SET[*]}" | sed 's/,/, /g')
read -r -a GW_EXTRA <<<"${KL_BENCH_GW_ARGS:-}"
# Tasks (phase 11): podman set up and the python image built (cached), the
# local images allowed to every tenant, the nodes given the engine's config.
TASK_CONF= TASK_NODE_ARGS=(--task-engine none) TASK_IMAGES=
if command -v podman >/dev/null 2>&1 &&
   TASK_CONF=$(scripts/task-image.sh 2>>"$STATE/log/task-image.log" | tail -n 1) && [ -n "$TASK_CONF" ]; then
    TASK_NODE_ARGS=(--task-containers-conf "$TASK_CONF" --task-scratch "$STATE/tasks")
    TASK_IMAGES='localhost/kowloon-*'
fi
KOWLOON_TASK_IMAGES=$TASK_IMAGES "$GATEWAY" serve --listen "127.0.0.1:$GW_PORT" --cluster-listen "127.0.0.1:$GW_CLUSTER_PORT" \
    --database-url "$DB_URL" --redis-url "$REDIS_URL" \
    "${GW_LIMITS[@]}" --blob-dir "$STATE/blobs" --max-output-mb 4096 "${GW_EXTRA[@]}" \
    >>"$STATE/log/gateway.log" 2>&1 </dev/null &
GW_PID=$!
kl_wait_http "$GW_URL/readyz" 20 "$GW_PID" ||
    stack_fail "the gateway did not become ready at $GW_URL/readyz" "$STATE/log/gateway.log"
KL_BENCH_KEY=$("$GATEWAY" keys create --tenant bench --admin --database-url "$DB_URL" \
               2>>"$STATE/log/gateway.log" </dev/null) ||
    stack_fail "kowloon-gateway keys create failed" "$STATE/log/gateway.log"
export KL_BENCH_KEY

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
# Starts COUNT nodes named PREFIX-k with SLOTS slots each, their pids appended
# to the array named by VAR, and waits until WANT nodes in all are up.
start_nodes() {
    local count=$1 slots=$2 prefix=$3 var=$4 want=$5 k port
    local -n pids=$var
    for ((k = 1; k <= count; k++)); do
        port=$(kl_free_port)
        "$COMPUTE" --gateway "$GW_CLUSTER_URL" --listen "127.0.0.1:$port" --slots "$slots" \
            --backend auto --name "$prefix-$k" --state-dir "$STATE/node-state" "${TASK_NODE_ARGS[@]}" \
            >>"$STATE/log/$prefix-$k.log" 2>&1 </dev/null &
        pids+=($!)
        NODE_URLS+=("http://127.0.0.1:$port")
    done
    local deadline=$((SECONDS + 30))
    while :; do
        read -r nup desc <<<"$(nodes_up)"
        [ "${nup:-0}" -ge "$want" ] && return 0
        for k in "${!pids[@]}"; do
            kill -0 "${pids[$k]}" 2>/dev/null ||
                stack_fail "compute node $prefix-$((k + 1)) exited during start" "$STATE/log/$prefix-$((k + 1)).log"
        done
        [ "$SECONDS" -ge "$deadline" ] && stack_fail "$want nodes did not come up within 30 s" "$STATE/log/gateway.log"
        sleep 0.2
    done
}
NODE_URLS=()
start_nodes 2 "$SLOTS" bench-node NODE_PIDS 2
MAIN_NODE_URLS=("${NODE_URLS[@]}")
say "   PostgreSQL $(psql_q 'SHOW server_version') on :$PG_PORT (fsync=$PG_FSYNC, synchronous_commit=$PG_SYNC), Redis :$REDIS_PORT, gateway $GW_URL"
say "   nodes up: $desc (--slots $SLOTS each)"
say "   out of the benchmark's way on purpose: $LIMITS_LINE"
[ ${#GW_EXTRA[@]} = 0 ] || say "   gateway options added by KL_BENCH_GW_ARGS: ${GW_EXTRA[*]}"
[ ${#LIMITS_MISSING[@]} = 0 ] ||
    say "   (this gateway has no ${LIMITS_MISSING[*]}: its own defaults apply there)"
say "   open files: $(ulimit -n) (phase 6 wants $NOFILE_WANT)"
say "   machine: $(nproc) cores; timing on a small machine is noisy. Background load before the run:"
"${KB[@]}" cpu --seconds 1 --json "$RES/background.json"

CPU_ARGS=(--proc "gateway=$GW_PID" --proc "node-1=${NODE_PIDS[0]}" --proc "node-2=${NODE_PIDS[1]}"
          --proc "redis=$(cat "$STATE/pids/redis.pid")" --pg "$PG_POSTMASTER")
gw_threads() { awk '/^Threads:/ { print $2 }' "/proc/$GW_PID/status" 2>/dev/null || echo 0; }

# Runs CMD... in the background while sampling CPU of the stack (and of CMD
# itself, as NAME) and the gateway's threads and RSS from DELAY s for SECS s;
# prints the sample after CMD's output (CMD's stdout goes to OUT, the sample's
# figures to OUT.cpu.json). Returns CMD's status.
run_sampled() {
    local name=$1 delay=$2 secs=$3 out=$4
    shift 4
    local watch=()
    # the gateway's threads matter where it is what the load goes to
    [ "$name" = pgbench ] || watch=(--watch "gateway=$GW_PID" --watch-before "$(gw_threads)")
    "$@" >"$out" 2>&1 &
    local pid=$!
    "${KB[@]}" cpu --delay "$delay" --seconds "$secs" "${CPU_ARGS[@]}" --proc "$name=$pid" \
        "${watch[@]}" --json "$out.cpu.json" >"$out.cpu" 2>&1 &
    local spid=$! rc=0
    BG_PIDS=("$pid" "$spid")
    wait "$pid" || rc=$?
    wait "$spid" || true
    BG_PIDS=()
    return "$rc"
}

# Cancels (in PostgreSQL, directly) the jobs a submit flood left queued, empties
# the ready queue, waits for running ones to end, and vacuums the jobs table,
# so the next phase starts on an idle system. The cancel API would take longer than the flood itself.
# (A schema this does not know makes it say so and go on: a slower next
# phase, not a failed bench.)
drain() {
    local n
    n=$(psql_q "WITH u AS (UPDATE jobs SET state = 'cancelled', cancel_requested = true,
                finished_at = clock_timestamp() WHERE state = 'queued' RETURNING 1)
                SELECT count(*) FROM u" 2>&1) || {
        say "   (could not drain the queue in PostgreSQL: $n)"
        return 0
    }
    # every tenant's ready set (queue.c), and the list of them
    redis-cli -h 127.0.0.1 -p "$REDIS_PORT" EVAL "for _, t in ipairs(redis.call('SMEMBERS', KEYS[1])) do
        redis.call('DEL', 'kowloon:ready:' .. t) end return redis.call('DEL', KEYS[1])" 1 kowloon:ready-tenants \
        >/dev/null || true
    local deadline=$((SECONDS + 30))
    while [ "$(psql_q "SELECT count(*) FROM jobs WHERE state = 'running'" 2>/dev/null || echo 0)" != 0 ] &&
          [ "$SECONDS" -lt "$deadline" ]; do
        sleep 0.2
    done
    [ "$n" = 0 ] || say "   (drained: $n queued job(s) left by the flood were cancelled in PostgreSQL)"
    # Thousands of rows just changed: vacuum them now, so that the next
    # phase measures the service and not autovacuum catching up with the
    # previous one (after a flood it took one of the two cores for seconds).
    psql_q "VACUUM (ANALYZE) jobs, job_events, job_results, job_inputs" >/dev/null 2>&1 || true
}
jobs_rows() { psql_q "SELECT count(*) FROM jobs" 2>/dev/null || echo 0; }

# wrk against the gateway: MODE (submit or get), CONNECTIONS, SECONDS, OUT.
wrk_run() {
    KL_BENCH_WRK_MODE=$1 wrk -t 2 -c "$2" -d "$3s" --timeout 10s -s "$ROOT/bench/wrk.lua" "$GW_URL"
}

# One phase of submits at CONNECTIONS (phase number PHASE): wrk, figures, drain.
submits() {
    local phase=$1 conns=$2 before after
    say ""
    before=$(jobs_rows)
    run_sampled wrk 2 6 "$STATE/wrk$conns.out" wrk_run submit "$conns" "$WRK_S" || true
    after=$(jobs_rows)
    "${KB[@]}" wrk --file "$STATE/wrk$conns.out" --kind submit --phase "$phase" --connections "$conns" \
        --jobs-rows $((after - before)) --cpu-json "$STATE/wrk$conns.out.cpu.json" --json "$RES/wrk$conns.json"
    cat "$STATE/wrk$conns.out.cpu"
    drain
}

# Phase 7: a perf profile of the gateway during a submit flood at CONNECTIONS.
# Writes $RES/perf.json either way (with "skipped" when it could not run).
profile() {
    local conns=$1 why=
    say ""
    say "== 7. profile of the gateway: perf record -g -p $GW_PID for ${PERF_S} s during an extra wrk run of submits at $conns connections (phase 1's peak)"
    if ! command -v perf >/dev/null 2>&1; then
        why="perf not found (apt-get install linux-perf)"
    elif [ "$(id -u)" != 0 ] && [ "$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo 3)" -gt 1 ]; then
        why="not root and kernel.perf_event_paranoid=$(cat /proc/sys/kernel/perf_event_paranoid) (> 1)"
    fi
    if [ -z "$why" ]; then
        wrk_run submit "$conns" $((PERF_S + 2)) >"$STATE/wrkperf.out" 2>&1 &
        BG_PIDS=($!)
        sleep 1
        if ! perf record -F 999 -g -p "$GW_PID" -o "$RES/perf.data" -- sleep "$PERF_S" \
                >"$STATE/log/perf.log" 2>&1; then
            why="perf record failed: $(tail -n 1 "$STATE/log/perf.log")"
        fi
        wait "${BG_PIDS[0]}" || true
        BG_PIDS=()
    fi
    if [ -z "$why" ]; then
        perf report -i "$RES/perf.data" --stdio --no-children -g none --percent-limit 0.1 \
            >"$RES/perf-top.txt" 2>>"$STATE/log/perf.log" &&
        perf report -i "$RES/perf.data" --stdio --no-children --percent-limit 0.5 \
            >"$RES/perf-report.txt" 2>>"$STATE/log/perf.log" &&
        perf report -i "$RES/perf.data" --stdio --children --sort sym -g none --percent-limit 1 \
            >"$RES/perf-children.txt" 2>>"$STATE/log/perf.log" ||
            why="perf report failed: $(tail -n 1 "$STATE/log/perf.log")"
    fi
    if [ -n "$why" ]; then
        say "   skipped: $why"
        python3 -c 'import json, sys; json.dump({"skipped": sys.argv[1]}, open(sys.argv[2], "w"))' \
            "$why" "$RES/perf.json"
    else
        "${KB[@]}" perf --report "$RES/perf-top.txt" --full "$RES/perf-report.txt" --top 25 \
            --children "$RES/perf-children.txt" \
            --connections "$conns" --json "$RES/perf.json"
    fi
    drain
}

ONLY=${KL_BENCH_ONLY:-all}
if [ "$ONLY" = all ] || [ "$ONLY" = control ]; then
say "   phases run in this order: the pgbench references (on the idle stack), 3, 5, 4, 1, 2, 7, 6; 8 sums up"
# ---------------------------------------------------------------- pgbench
# First, on an idle system, so that they measure PostgreSQL alone.
if phase 1 || phase 3; then
    say ""
    psql_q "CREATE TABLE IF NOT EXISTS bench_t (id bigserial PRIMARY KEY, v integer NOT NULL)" >/dev/null
    printf '\\set v random(1, 1000000)\nINSERT INTO bench_t (v) VALUES (:v);\n' >"$STATE/insert.sql"
    run_sampled pgbench 2 6 "$STATE/pgbench.out" \
        "$PGBENCH" -h 127.0.0.1 -p "$PG_PORT" -U kowloon -n -c 16 -j 2 -T "$PGBENCH_S" \
        -f "$STATE/insert.sql" kowloon || true
    "${KB[@]}" pgbench --file "$STATE/pgbench.out" --mode insert --seconds "$PGBENCH_S" --sync "$PG_SYNC" \
        --json "$RES/pgbench_insert.json"
    cat "$STATE/pgbench.out.cpu"
    psql_q "DROP TABLE bench_t" >/dev/null
fi
if phase 5; then
    say ""
    # pgbench's own tables, scale 1, in a database of their own
    psql_q "CREATE DATABASE pgbench_s" >/dev/null
    "$PGBENCH" -h 127.0.0.1 -p "$PG_PORT" -U kowloon -i -s 1 -q pgbench_s >"$STATE/log/pgbench-init.log" 2>&1 ||
        stack_fail "pgbench -i failed" "$STATE/log/pgbench-init.log"
    run_sampled pgbench 2 6 "$STATE/pgbench_s.out" \
        "$PGBENCH" -h 127.0.0.1 -p "$PG_PORT" -U kowloon -n -S -c 16 -j 2 -T "$PGBENCH_S" pgbench_s || true
    "${KB[@]}" pgbench --file "$STATE/pgbench_s.out" --mode select --seconds "$PGBENCH_S" \
        --json "$RES/pgbench_select.json"
    cat "$STATE/pgbench_s.out.cpu"
fi

# ---------------------------------------------------------------- 3. backlog
if phase 3; then
    say ""
    rc=0
    run_sampled client 1 4 "$STATE/tput.out" \
        "${KB[@]}" throughput --url "$GW_URL" --n "$TPUT_N" --concurrency "$TPUT_CONC" \
        --nodes 2 --slots "$SLOTS" --max-wait $((60 + TPUT_N / 50)) --ids "$STATE/ids.txt" \
        --json "$RES/throughput.json" || rc=$?
    cat "$STATE/tput.out" "$STATE/tput.out.cpu"
    [ "$rc" = 0 ] || RESULT_RC=1
    drain
fi

# ---------------------------------------------------------------- 5. GETs
if phase 5; then
    say ""
    if [ -s "$STATE/ids.txt" ]; then
        export KL_BENCH_IDS=$STATE/ids.txt
        run_sampled wrk 2 6 "$STATE/get16.out" wrk_run get 16 "$WRK_S" || true
        "${KB[@]}" wrk --file "$STATE/get16.out" --kind get --phase 5 --connections 16 \
            --ids "$(wc -l <"$STATE/ids.txt")" --cpu-json "$STATE/get16.out.cpu.json" --json "$RES/get16.json"
        cat "$STATE/get16.out.cpu"
    else
        say "== 5. GET /v1/jobs/{id}: skipped, no finished jobs from phase 3 to read"
    fi
fi

# ---------------------------------------------------------------- 4. latency
if phase 4; then
    say ""
    rc=0
    run_sampled client 2 6 "$STATE/lat.out" \
        "${KB[@]}" latency --url "$GW_URL" --rate "$LAT_RATE" --duration "$LAT_S" \
        --json "$RES/latency.json" || rc=$?
    cat "$STATE/lat.out" "$STATE/lat.out.cpu"
    [ "$rc" = 0 ] || RESULT_RC=1
fi

# ---------------------------------------------------------------- 1, 2. submits
"${KB[@]}" body --out "$STATE/body.json"
export KL_BENCH_BODY=$STATE/body.json
phase 1 && submits 1 16
phase 2 && submits 2 256

# ---------------------------------------------------------------- 7. profile
if phase 7; then
    # at the connection count that gave the most 2xx/s
    peak=$(python3 -c '
import json, sys
best = (0, 16)
for c in (16, 256):
    try:
        best = max(best, (json.load(open("%s/wrk%d.json" % (sys.argv[1], c))).get("ok_rps") or 0, c))
    except (OSError, ValueError):
        pass
print(best[1])' "$RES")
    profile "$peak"
fi

# ---------------------------------------------------------------- 6. idle
if phase 6; then
    say ""
    n_idle=$(( (IDLE_JOBS + IDLE_SLOTS - 1) / IDLE_SLOTS ))
    say "   (phase 6: starting $n_idle more nodes with --slots $IDLE_SLOTS for its $IDLE_JOBS running jobs)"
    start_nodes "$n_idle" "$IDLE_SLOTS" bench-idle IDLE_PIDS $((2 + n_idle))
    python3 "$ROOT/bench/klidle.py" --url "$GW_URL" --gw-pid "$GW_PID" --conns "$IDLE_CONNS" \
        --jobs "$IDLE_JOBS" --job-s "$IDLE_JOB_S" --json "$RES/idle.json" || RESULT_RC=1
    for p in "${IDLE_PIDS[@]}"; do kl_kill_wait "$p" 15; done
    IDLE_PIDS=()
fi

# ---------------------------------------------------------------- 8. summary
for p in "$GW_PID" "${NODE_PIDS[@]}"; do
    kill -0 "$p" 2>/dev/null || { say "bench: a stack process (pid $p) died during the run"; RESULT_RC=1; }
done
"${KB[@]}" summary --dir "$RES" --fsync "$PG_FSYNC" --sync "$PG_SYNC" --limits "$LIMITS_LINE" \
    --tput-n "$TPUT_N" --slots "$SLOTS" --lat-rate "$LAT_RATE" --idle-conns "$IDLE_CONNS" \
    --idle-jobs "$IDLE_JOBS" |
    tee "$RES/summary.txt"
fi

# ---------------------------------------------------------------- 9. data path
if [ "$ONLY" = all ] || [ "$ONLY" = data ]; then
    say ""
    mkdir -p "$STATE/data"
    python3 "$ROOT/bench/datapath.py" --url "$GW_URL" --key "$KL_BENCH_KEY" \
        --nodes "$(IFS=,; echo "${MAIN_NODE_URLS[*]}")" --token "$KOWLOON_CLUSTER_TOKEN" \
        --gw-pid "$GW_PID" --node-pids "$(IFS=,; echo "${NODE_PIDS[*]}")" --tmp "$STATE/data" \
        --json "$RES/datapath.json" || RESULT_RC=1
    for p in "$GW_PID" "${NODE_PIDS[@]}"; do
        kill -0 "$p" 2>/dev/null || { say "bench: a stack process (pid $p) died during the data path"; RESULT_RC=1; }
    done
fi

# ---------------------------------------------------------------- 10. distributed
if [ "$ONLY" = all ] || [ "$ONLY" = dist ]; then
    say ""
    # a third node, for the 3-node rendezvous
    start_nodes 1 "$SLOTS" bench-dist DIST_PIDS 3
    python3 "$ROOT/bench/dist.py" --url "$GW_URL" --key "$KL_BENCH_KEY" \
        --gloo "$TREE/build/bench/gloo_allreduce" --json "$RES/dist.json" || RESULT_RC=1
    for p in "$GW_PID" "${NODE_PIDS[@]}" "${DIST_PIDS[@]}"; do
        kill -0 "$p" 2>/dev/null || { say "bench: a stack process (pid $p) died during the distributed phase"; RESULT_RC=1; }
    done
fi
# ---------------------------------------------------------------- 11. tasks
if [ "$ONLY" = all ] || [ "$ONLY" = tasks ]; then
    say ""
    if [ -z "$TASK_CONF" ]; then
        say "== 11. tasks: skipped, no podman or no task image (see $STATE/log/task-image.log)"
    else
        say "== 11. tasks: the node alone against the bare engine (bench/tasks_engine.py, a stand-in gateway)"
        python3 "$ROOT/bench/tasks_engine.py" --runs "${KL_BENCH_TASK_RUNS:-10}" || RESULT_RC=1
        say ""
        say "== 11. tasks through the gateway (bench/tasks.py)"
        python3 "$ROOT/bench/tasks.py" --url "$GW_URL" --key "$KL_BENCH_KEY" --blob-dir "$STATE/blobs" \
            --conf "$TASK_CONF" --slots $((2 * SLOTS)) --runs "${KL_BENCH_TASK_RUNS:-10}" \
            --backlog "${KL_BENCH_TASK_BACKLOG:-200}" --json "$RES/tasks.json" || RESULT_RC=1
        for p in "$GW_PID" "${NODE_PIDS[@]}"; do
            kill -0 "$p" 2>/dev/null || { say "bench: a stack process (pid $p) died during the tasks phase"; RESULT_RC=1; }
        done
    fi
    # Slurm's own start overhead on this machine, for comparison (a private
    # slurm-wlm cluster like test_slurm.py's; Slurm's defaults, then
    # SchedulerParameters=sched_min_interval=0,batch_sched_delay=0)
    if PATH=$PATH:/usr/sbin:/sbin command -v slurmctld >/dev/null 2>&1; then
        say ""
        say "== 11. tasks: Slurm sbatch/srun of a trivial job, for comparison (bench/slurm_start.py)"
        python3 "$ROOT/bench/slurm_start.py" --runs "${KL_BENCH_SLURM_RUNS:-20}" --fast \
            --json "$RES/slurm.json" || say "slurm: the comparison failed (above); not counted against the bench"
    fi
fi
# ---------------------------------------------------------------- 12. scale
if [ "$ONLY" = all ]; then
    say ""
    KL_BENCH_OUT=$RES/scale "$ROOT/bench/scale.sh" || RESULT_RC=1
fi
exit "$RESULT_RC"
