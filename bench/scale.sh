#!/usr/bin/env bash
# bench/scale.sh — the cluster-scale phase of `make bench` (issue 20;
# KL_BENCH_ONLY=scale bench/run.sh, or this script alone).
#
# For each size in KL_SCALE_SIZES [100 300 1000] it starts a private stack
# (PostgreSQL with default durability, Redis, one gateway), registers that
# many simulated nodes of 8 GPUs (bin/kl-scalesim nodes: one process),
# makes 50 tenants with weights 1-4 and a key each, submits a backlog of
# Philly-shaped jobs (bench/philly.py; KL_SCALE_JOBS_PER_NODE [100] per
# node, at most KL_SCALE_JOBS_MAX [100000]) through the public API
# (kl-scalesim submit), and measures a window of KL_SCALE_WINDOW_S [120]
# seconds that starts when the backlog is in. Time is compressed so that
# the mean job lasts KL_SCALE_MEAN_S [60] s (the factor is printed).
# KL_SCALE_SHAPES=single makes every job one GPU on one node: the control
# path's ceiling, which the GPUs' count and the big jobs do not hide.
# KL_SCALE_QUEUE_FIRST=1 drains the nodes while the backlog is submitted
# and lets them take work when the window starts: the control path then
# has the whole backlog to start (else it starts the jobs as they come,
# at the submissions' pace, and runs out of them). It
# prints figures 1-6 of the issue per size (bench/scale_report.py), and at
# the largest size profiles the gateway (perf record -g, KL_SCALE_PERF_S
# [20] s inside the window) where perf may run; KL_SCALE_PERF_ALL=1 profiles
# the whole machine instead (gateway, PostgreSQL, simulator, kernel: perf
# record -a). Figures and logs are kept in
# KL_BENCH_OUT [var/bench/scale-<UTC time>]; KL_BENCH_KEEP=1 keeps each
# stack's temp directory. KL_BENCH_GW_ARGS adds gateway options;
# KL_SCALE_SQL is run after the migrations (to measure a schema change
# against the committed one, e.g. "ALTER TABLE nodes SET (fillfactor =
# 100)"). PostgreSQL's statement profile and its tables' sizes and HOT
# updates over the window are in n<nodes>/pg-top.txt. It never
# fails on time; it exits non-zero when a stack could not start or a
# correctness check failed (a GPU over-committed, a job run twice).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. scripts/lib.sh

SIZES=${KL_SCALE_SIZES:-100 300 1000}
GPUS=8
PER_NODE=${KL_SCALE_JOBS_PER_NODE:-100}
JOBS_MAX=${KL_SCALE_JOBS_MAX:-100000}
WINDOW_S=${KL_SCALE_WINDOW_S:-120}
MEAN_S=${KL_SCALE_MEAN_S:-60}
PERF_S=${KL_SCALE_PERF_S:-20}
SHAPES=${KL_SCALE_SHAPES:-philly}
QUEUE_FIRST=${KL_SCALE_QUEUE_FIRST:-0}
OUT=${KL_BENCH_OUT:-$ROOT/var/bench/scale-$(date -u +%Y%m%dT%H%M%SZ)}
TREE=${KOWLOON_TEST_ROOT:-$ROOT}
GATEWAY=$TREE/bin/kowloon-gateway
SIM=$TREE/bin/kl-scalesim
REPORT=(python3 "$ROOT/bench/scale_report.py")

say() { printf '%s\n' "$*"; }
die() { printf 'scale: error: %s\n' "$*" >&2; exit 2; }

for b in "$GATEWAY" "$SIM"; do [ -x "$b" ] || die "$b is missing: run \`make all\` first"; done
PGBIN=$(kl_pg_bindir) || die "PostgreSQL binaries not found (set KOWLOON_PG_BIN)"
PSQL=$PGBIN/psql
mkdir -p "$OUT"
# a held poll per node, its other exchanges, and the submitter's
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

STATE= GW_PID= SIM_PID= RC=0
stack_down() {
    set +e
    [ -n "$SIM_PID" ] && kill -0 "$SIM_PID" 2>/dev/null && kl_kill_wait "$SIM_PID" 20
    [ -n "$GW_PID" ] && kl_kill_wait "$GW_PID" 15
    SIM_PID= GW_PID=
    if [ -n "$STATE" ]; then
        kl_redis_stop "$STATE" >/dev/null
        kl_pg_stop "$STATE" >/dev/null
        if [ "${KL_BENCH_KEEP:-0}" = 1 ]; then
            say "   kept $STATE"
        else
            kl_state_remove "$STATE"
        fi
    fi
    STATE=
    set -e
}
trap 'rc=$?; stack_down; exit $rc' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

psql_q() { "$PSQL" -X -q -h 127.0.0.1 -p "$PG_PORT" -U kowloon -d kowloon -Atc "$1"; }
# What PostgreSQL wrote so far: commits, rows inserted/updated/deleted, WAL
# bytes, and the nodes table's updates (heartbeats).
pg_stats() {
    psql_q "SELECT json_build_object(
        'xact_commit', (SELECT xact_commit FROM pg_stat_database WHERE datname = 'kowloon'),
        'tup_written', (SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = 'kowloon'),
        'wal_bytes', pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0'),
        'nodes_upd', (SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables WHERE relname = 'nodes'),
        'jobs_upd', (SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables WHERE relname = 'jobs'))"
}

# PostgreSQL's statements by their share of its time in the window: share,
# calls, ms per call, rows per call, and the statement's first 160 bytes.
pg_top() {
    psql_q "SELECT round((100 * total_exec_time / sum(total_exec_time) OVER ())::numeric, 1) || ' %',
                   calls, round((total_exec_time / greatest(calls, 1))::numeric, 3) || ' ms',
                   round(rows::numeric / greatest(calls, 1), 1) || ' rows',
                   regexp_replace(left(query, 160), '\s+', ' ', 'g')
            FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 20" | tr '|' '\t'
    # the tables the job path rewrites: their size, and the share of their
    # updates that were heap-only (HOT: no new index entries, pruned in place)
    psql_q "SELECT relname || ': ' || pg_relation_size(relid) / 8192 || ' pages, '
                   || n_live_tup || ' live rows, ' || n_tup_upd || ' updates, '
                   || round(100.0 * n_tup_hot_upd / greatest(n_tup_upd, 1), 1) || ' % HOT, '
                   || autovacuum_count || ' autovacuums'
            FROM pg_stat_user_tables WHERE relname IN ('nodes', 'jobs', 'job_ranks') ORDER BY 1"
}

run_size() {
    local nodes=$1
    local res=$OUT/n$nodes
    local njobs=$((nodes * PER_NODE))
    [ "$njobs" -gt "$JOBS_MAX" ] && njobs=$JOBS_MAX
    mkdir -p "$res"
    say ""
    say "== scale: $nodes nodes x $GPUS GPUs, 50 tenants, backlog of $njobs jobs, window ${WINDOW_S} s"
    STATE=$(mktemp -d /tmp/kowloon-scale.XXXXXX)
    mkdir -p "$STATE/log" "$STATE/pids"
    PG_PORT=$(kl_free_port)
    local redis_port gw_port cl_port
    redis_port=$(kl_free_port)
    gw_port=$(kl_free_port)
    cl_port=$(kl_free_port)
    GW_URL=http://127.0.0.1:$gw_port
    local db_url=postgresql://kowloon@127.0.0.1:$PG_PORT/kowloon
    KOWLOON_CLUSTER_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    export KOWLOON_CLUSTER_TOKEN
    # pg_stat_statements: where PostgreSQL's time goes in the window
    # (pg-top.txt); a shared_preload_libraries in KL_PG_EXTRA_OPTS comes
    # after, and wins (name pg_stat_statements in it to keep the profile)
    KL_PG_EXTRA_OPTS="-c shared_preload_libraries=pg_stat_statements ${KL_PG_EXTRA_OPTS:-}" \
        kl_pg_start "$STATE" "$PG_PORT" >"$STATE/log/setup.log" 2>&1 ||
        { kl_log_tail "$STATE/log/postgres.log"; die "PostgreSQL did not start"; }
    kl_redis_start "$STATE" "$redis_port" >>"$STATE/log/setup.log" 2>&1 || die "Redis did not start"
    local pm
    pm=$(head -n 1 "$(kl__pg_home "$STATE")/data/postmaster.pid")
    "$GATEWAY" migrate --database-url "$db_url" >>"$STATE/log/gateway.log" 2>&1 </dev/null ||
        die "kowloon-gateway migrate failed"
    [ -n "${KL_SCALE_SQL:-}" ] && psql_q "$KL_SCALE_SQL"
    read -r -a extra <<<"${KL_BENCH_GW_ARGS:-}"
    # Out of the bench's way: per-key rate limits and quotas (50 tenants
    # submit as fast as the submitter can), and the connection cap (a held
    # poll per node).
    "$GATEWAY" serve --listen "127.0.0.1:$gw_port" --cluster-listen "127.0.0.1:$cl_port" \
        --database-url "$db_url" --redis-url "redis://127.0.0.1:$redis_port/0" \
        --rate-limit-rps 0 --read-rate-limit-rps 0 --max-queued-per-tenant 0 \
        --max-running-per-tenant 0 --max-conns-per-ip 0 --max-connections 20000 \
        --blob-dir "$STATE/blobs" "${extra[@]}" >>"$STATE/log/gateway.log" 2>&1 </dev/null &
    GW_PID=$!
    kl_wait_http "$GW_URL/readyz" 30 "$GW_PID" || { kl_log_tail "$STATE/log/gateway.log"; die "gateway not ready"; }
    local admin
    admin=$("$GATEWAY" keys create --tenant scale-admin --admin --database-url "$db_url" 2>>"$STATE/log/gateway.log" </dev/null)

    # the simulated cluster
    "$SIM" nodes --gateway "http://127.0.0.1:$cl_port" --nodes "$nodes" --gpus "$GPUS" \
        --runs "$res/runs.tsv" --summary "$res/sim.json" >"$res/sim.out" 2>"$STATE/log/sim.log" &
    SIM_PID=$!
    "${REPORT[@]}" wait-nodes --url "$GW_URL" --key "$admin" --nodes "$nodes" --timeout 120 ||
        { tail -n 5 "$STATE/log/sim.log"; kl_log_tail "$STATE/log/gateway.log"; die "$nodes nodes did not come up"; }

    # tenants, keys, and the backlog
    python3 "$ROOT/bench/philly.py" gen --jobs "$njobs" --mean-s "$MEAN_S" --shapes "$SHAPES" \
        --out "$res/jobs.jsonl" >"$res/gen.json"
    "${REPORT[@]}" tenants --url "$GW_URL" --key "$admin" --jobs "$res/jobs.jsonl" --out "$STATE/submit.tsv"
    say "   $(cat "$res/gen.json") (time compression factor; mean job ${MEAN_S} s)"
    local t_sub0 t_sub1
    [ "$QUEUE_FIRST" = 1 ] && say "$("${REPORT[@]}" drain --url "$GW_URL" --key "$admin" --on)"
    t_sub0=$(date +%s%3N)
    "$SIM" submit --url "$GW_URL" --jobs "$STATE/submit.tsv" --concurrency 64 --out "$res/ids.tsv" \
        >"$res/submit.json" 2>>"$STATE/log/submit.log"
    t_sub1=$(date +%s%3N)
    say "   backlog submitted: $(cat "$res/submit.json")"
    # Statistics for the grown jobs table, as autovacuum gives them within
    # a minute: without them the gateway's prepared statements keep the
    # plans made while the table was nearly empty (a sequential scan of
    # jobs in the claim and the result, 13 ms a call at 40,000 jobs), and
    # the window would measure that minute instead of the steady state.
    psql_q "ANALYZE jobs" || true
    if [ "$QUEUE_FIRST" = 1 ]; then
        say "$("${REPORT[@]}" drain --url "$GW_URL" --key "$admin" --off) (the window starts with the whole backlog queued; figure 3 then counts each job runnable since the nodes were drained)"
        t_sub1=$(date +%s%3N)
        # Statistics taken while no job ran make the planner expect none
        # running (the heartbeats' unheld check then hashes every running
        # run: README, Scale): analyze again once the nodes run.
        sleep 3
        psql_q "ANALYZE jobs" || true
    fi

    # the window: CPU, RSS and PostgreSQL's writes at both ends
    local pg0 pg1 perf_pid=
    psql_q "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()" \
        >/dev/null 2>&1 || say "   (no pg_stat_statements: no statement profile)"
    pg0=$(pg_stats)
    "${REPORT[@]}" snap --gw "$GW_PID" --pg "$pm" --sim "$SIM_PID" --out "$res/snap0.json"
    if [ "$nodes" = "$(echo "$SIZES" | tr ' ' '\n' | sort -n | tail -n 1)" ] && [ "$PERF_S" -gt 0 ]; then
        if command -v perf >/dev/null 2>&1; then
            sleep 5
            local who=(-p "$GW_PID")
            [ "${KL_SCALE_PERF_ALL:-0}" = 1 ] && who=(-a)
            perf record -F 499 -g "${who[@]}" -o "$res/perf.data" -- sleep "$PERF_S" \
                >"$STATE/log/perf.log" 2>&1 &
            perf_pid=$!
        else
            say "   (no perf: no profile)"
        fi
    fi
    local rss_max=0 t_end=$(( $(date +%s) + WINDOW_S ))
    while [ "$(date +%s)" -lt "$t_end" ]; do
        local r
        r=$(awk '/^VmRSS:/ { print $2 }' "/proc/$GW_PID/status" 2>/dev/null || echo 0)
        [ "${r:-0}" -gt "$rss_max" ] && rss_max=$r
        sleep 1
    done
    "${REPORT[@]}" snap --gw "$GW_PID" --pg "$pm" --sim "$SIM_PID" --out "$res/snap1.json"
    pg1=$(pg_stats)
    # how the runs reached the nodes' polls (README, Metrics), whole run
    curl -s -H "Authorization: Bearer $KOWLOON_CLUSTER_TOKEN" "http://127.0.0.1:$cl_port/metrics" |
        awk '/^kowloon_lease_runs_total/ { sub(/.*how="/, ""); sub(/"}/, ""); printf "%s%s", sep, $0; sep = ", " }' \
        >"$res/lease.txt" || true
    say "   runs to the nodes' polls since the start: $(cat "$res/lease.txt")"
    # read with the window's end, before the bench's own queries below
    pg_top >"$res/pg-top.txt" 2>/dev/null || true
    [ -n "$perf_pid" ] && wait "$perf_pid" || true
    psql_q "SELECT state, count(*) FROM jobs GROUP BY state ORDER BY 1" >"$res/states.txt" || true
    kill -TERM "$SIM_PID"
    wait "$SIM_PID" || true
    SIM_PID=
    kill -0 "$GW_PID" 2>/dev/null || { say "   the gateway died during the run"; RC=1; }
    printf '{"pg0": %s, "pg1": %s, "gw_rss_max_kb": %s, "t_submit0": %s, "t_submit1": %s}\n' \
        "$pg0" "$pg1" "$rss_max" "$t_sub0" "$t_sub1" >"$res/window.json"
    cp "$STATE/log/gateway.log" "$res/gateway.log" 2>/dev/null || true
    stack_down
    if [ -f "$res/perf.data" ]; then
        perf report -i "$res/perf.data" --stdio --no-children -g none --percent-limit 0.5 \
            >"$res/perf-top.txt" 2>/dev/null || true
        perf report -i "$res/perf.data" --stdio --children --sort sym -g none --percent-limit 2 \
            >"$res/perf-children.txt" 2>/dev/null || true
    fi
    "${REPORT[@]}" report --dir "$res" --nodes "$nodes" --gpus "$GPUS" || RC=1
}

say "== Kowloon scale bench: sizes $SIZES, figures to $OUT"
say "   machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) before the run (shared: figures are noisy)"
for n in $SIZES; do
    run_size "$n"
done
"${REPORT[@]}" summary --out "$OUT" | tee "$OUT/summary.txt"
exit "$RC"
