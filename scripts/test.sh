#!/usr/bin/env bash
# scripts/test.sh — `make test` after the build: the C unit tests (one per
# core at a time), the integration suite (which starts its own PostgreSQL,
# Redis, gateway and nodes on free ports), then the short API fuzz with the
# short chaos run and parser fuzz beside it. Runs every part, prints a
# summary, and fails if any part failed. Whatever a part started and left
# running is stopped when it ends. Each part's wall time is in the summary.
#
# The integration suite runs on pytest-xdist workers, one private stack each
# (tests/integration/conftest.py): KOWLOON_TEST_WORKERS of them (default
# kl_test_workers, scripts/lib.sh; 1 runs it in one process, no xdist).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
. scripts/lib.sh
trap 'echo "test.sh: interrupted" >&2; exit 130' INT TERM


# Each part's output also goes to .test-logs/<part>.log; when a part fails,
# the lines that say why are printed again next to the summary, so that the
# reason is in the last screen of a long CI log.
LOGS=$ROOT/.test-logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
stage() { # stage NAME COMMAND...: runs COMMAND, its output to the screen and to the log;
          # its wall time in seconds goes to $took
    local name=$1 t0=$SECONDS rc; shift
    # tee -i: Ctrl-C must not kill the pipe while the part cleans up
    "$@" 2>&1 | tee -i "$LOGS/$name.log"
    rc=${PIPESTATUS[0]}
    took=$((SECONDS - t0))
    return "$rc"
}
took=0
record() { # record NAME RC: NAME's result in the summary, PASS for RC 0, with $took
    if [ "$2" = 0 ]; then kl_record "$1" "PASS ($took s)"; else kl_record "$1" "FAIL ($took s)"; fi
}
why() { # why NAME: the lines of a failed part's log that say why
    grep -E -a 'PROBLEM|NOT counted|broke|^accepted=|FAILED|FAIL:|Error|ERROR|error:|failures=[1-9]|5xx=[1-9]|crash|Assertion|AddressSanitizer|timed out|Timeout' \
        "$LOGS/$1.log" | grep -v -E '^\s*$' | tail -n 25
}

# Parts that run beside others, each into its own log, their output
# printed whole when they end. The parser fuzz runs each harness for a
# fixed time on one core: beside the integration suite, whose workers
# leave a fifth of the CPU idle while they wait on daemons. The API fuzz
# keeps about a core busy and the chaos run less: the two run side by
# side after the suite (on stacks of their own, on free ports).
beside() { # beside NAME COMMAND...: runs COMMAND in the background into NAME's log
    local name=$1; shift
    ( t0=$(date +%s); "$@" >"$LOGS/$name.log" 2>&1; echo "$? $(($(date +%s) - t0))" >"$LOGS/$name.rc" ) &
}
ended() { # ended NAME: prints NAME's output and records its result (after wait)
    local rc
    read -r rc took <"$LOGS/$1.rc" || { rc=1 took=0; }
    echo "=== $1: its output"
    cat "$LOGS/$1.log"
    record "$1" "$rc"
}

t_all=$SECONDS
echo "=== unit tests (make test-unit, $(nproc) at a time)"
stage unit kl_run_contained make --no-print-directory -j"$(nproc)" -O test-unit
record unit $?

echo "=== parser fuzzing, short run (tests/fuzz/run.sh, 10 s a harness, one at a time; make fuzz runs 60 s), in the background beside the integration suite"
export FUZZ_SECONDS=${FUZZ_SECONDS:-10} FUZZ_JOBS=${FUZZ_JOBS:-1}
beside fuzz kl_run_contained tests/fuzz/run.sh
workers=${KOWLOON_TEST_WORKERS:-$(kl_test_workers)}
echo "=== integration tests (pytest tests/integration, $workers workers; the slowest tests listed at the end)"
mapfile -t xdist < <(kl_pytest_workers "$workers")
stage integration kl_run_contained python3 -m pytest -q "${xdist[@]}" --durations=15 tests/integration
rc=$?
case $rc in
    0) kl_record integration "PASS ($took s, $workers workers)" ;;
    5) kl_record integration "SKIP (no tests collected)" ;;
    *) kl_record integration "FAIL (pytest exit $rc, $took s)" ;;
esac

echo "=== chaos, short run (tests/chaos/run.sh; make chaos runs the full one), in the background"
beside chaos tests/chaos/run.sh
echo "=== API fuzzing, short run (tests/api_fuzz/run.sh; make fuzz-api runs the full one)"
stage api-fuzz tests/api_fuzz/run.sh
record api-fuzz $?
wait
ended chaos
ended fuzz

for i in "${!kl_parts[@]}"; do
    case ${kl_results[$i]} in
        FAIL*) echo; echo "=== why ${kl_parts[$i]} failed (from .test-logs/${kl_parts[$i]}.log)"; why "${kl_parts[$i]}" ;;
    esac
done
kl_summary "summary ($((SECONDS - t_all)) s)"
