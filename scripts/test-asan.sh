#!/usr/bin/env bash
# scripts/test-asan.sh — `make test-asan`: builds everything with
# AddressSanitizer and UndefinedBehaviorSanitizer (objects in build-san/,
# daemons in bin-san/, no CUDA plugin), then runs
#   1. the C unit tests of build-san/tests/unit/, LeakSanitizer on: a leak, an
#      ASan report or a UBSan report fails the test that caused it;
#   2. the integration suite against bin-san/ (KOWLOON_TEST_ROOT), and fails
#      when any daemon log holds an ASan or UBSan report. Leak checks are off
#      for the daemons: what a killed or stopped daemon still holds at exit is
#      not what this looks for.
# Prints a summary and exits non-zero when any part failed. Whatever a part
# started and left running is stopped when it ends.
#
# OpenBLAS keeps its own thread pool here: with 2 and with 16 threads it
# gave ASan no trouble (unit tests, stack-use-after-return on). Should it
# ever, OPENBLAS_NUM_THREADS=1 make test-asan is the workaround.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
. scripts/lib.sh

SAN="-fsanitize=address,undefined -fno-omit-frame-pointer"
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
REPORT_RE='ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:'

WORK=$(mktemp -d /tmp/kowloon-asan.XXXXXX)
chmod 755 "$WORK"   # PostgreSQL (as its own user) keeps its data below
keep=0
cleanup() { [ "$keep" = 1 ] || rm -rf "$WORK"; }
trap cleanup EXIT
trap 'echo "test-asan.sh: interrupted" >&2; exit 130' INT TERM

echo "=== build (make SAN=\"$SAN\" NVCC= all)"
t0=$SECONDS
if ! make --no-print-directory -j"$JOBS" SAN="$SAN" NVCC= all; then
    kl_record build FAIL
    kl_summary "summary (sanitizers)"
    exit 1
fi
# The suite below must really run instrumented daemons.
for b in bin-san/kowloon-gateway bin-san/kowloon-compute; do
    syms=$(nm -D "$b" 2>/dev/null)   # not piped into grep -q: pipefail + SIGPIPE
    if ! grep -q __asan_init <<<"$syms"; then
        echo "test-asan: $b is not built with AddressSanitizer" >&2
        kl_record build "FAIL ($b not instrumented)"
        kl_summary "summary (sanitizers)"
        exit 1
    fi
done
kl_record build "PASS ($((SECONDS - t0)) s)"

echo "=== unit tests under ASan/UBSan/LSan (build-san/tests/unit)"
t0=$SECONDS
unit_failed=()
for src in tests/unit/*/test_*.c; do
    t=build-san/${src%.c}
    log=$WORK/$(basename "$t").log
    echo "== $t"
    if [ ! -x "$t" ]; then
        unit_failed+=("$(basename "$t") (not built)")
        continue
    fi
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1:detect_stack_use_after_return=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    LSAN_OPTIONS=report_objects=1 \
        timeout -k 10 600 "$t" >"$log" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ] || grep -qE "$REPORT_RE" "$log"; then
        unit_failed+=("$(basename "$t")")
        echo "   FAILED (exit $rc)"
        grep -nE -A 30 "$REPORT_RE|\[  FAILED  \]|\[  ERROR   \]" "$log" | head -n 80
    fi
done
if [ "${#unit_failed[@]}" -eq 0 ]; then
    kl_record unit "PASS ($((SECONDS - t0)) s)"
else
    kl_record unit "FAIL (${unit_failed[*]})"
fi

# Two workers a core (make test runs three), each with its own stack: the
# sanitized daemons spend far more CPU than the plain ones.
workers=${KOWLOON_TEST_WORKERS:-$(kl_test_workers 2)}
mapfile -t xdist < <(kl_pytest_workers "$workers")
echo "=== integration tests against bin-san (pytest tests/integration, $workers workers)"
t0=$SECONDS
# A tree of the shape stack.py expects, with the sanitizer binaries as bin/.
TROOT=$WORK/root
mkdir -p "$TROOT" "$WORK/tmp"
chmod 755 "$WORK/tmp"
ln -s "$ROOT/bin-san" "$TROOT/bin"
for d in lib sql openapi ui; do
    if [ -e "$ROOT/$d" ]; then ln -s "$ROOT/$d" "$TROOT/$d"; else mkdir -p "$TROOT/$d"; fi
done
# Every stack the suite starts lives under $WORK/tmp (TMPDIR) and is kept
# (KOWLOON_TEST_KEEP), so that its daemon logs can be read afterwards.
# detect_odr_violation=1: a CUDA plugin carries its own copy of the kernel
# library by design (the fake plugins of tests/plugins too), so the same
# global stands in the node and in the plugin; only a copy of another size
# (two different definitions) is reported.
TMPDIR=$WORK/tmp KOWLOON_TEST_KEEP=1 KOWLOON_TEST_ROOT=$TROOT \
ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:detect_odr_violation=1 \
UBSAN_OPTIONS=print_stacktrace=1 \
KOWLOON_TEST_SESSION_S=${KOWLOON_TEST_SESSION_S:-2400} \
    kl_run_contained python3 -m pytest -q "${xdist[@]}" --durations=15 tests/integration
rc=$?
case $rc in
    0) kl_record integration "PASS ($((SECONDS - t0)) s, $workers workers)" ;;
    5) kl_record integration "SKIP (no tests collected)" ;;
    *) kl_record integration "FAIL (pytest exit $rc)"; keep=1 ;;
esac

echo "=== sanitizer reports in daemon logs"
mapfile -t logs < <(find "$WORK/tmp" -path '*/logs/*' -type f 2>/dev/null | sort)
mapfile -t bad < <([ "${#logs[@]}" -gt 0 ] && grep -lE "$REPORT_RE" "${logs[@]}" 2>/dev/null)
if [ "${#logs[@]}" -eq 0 ]; then
    echo "  no daemon logs found under $WORK/tmp"
    kl_record reports "FAIL (no daemon logs to check)"
    keep=1
elif ! grep -qF "$TROOT/bin/kowloon-gateway" "${logs[@]}"; then
    echo "  the daemon logs do not show $TROOT/bin/kowloon-gateway: the suite ran other binaries"
    kl_record reports "FAIL (sanitizer binaries not used)"
    keep=1
elif [ "${#bad[@]}" -eq 0 ]; then
    echo "  ${#logs[@]} daemon logs, no ASan/UBSan report"
    kl_record reports "PASS (${#logs[@]} logs clean)"
else
    keep=1
    for f in "${bad[@]}"; do
        echo "--- $f"
        grep -nE -A 30 "$REPORT_RE" "$f" | head -n 60
    done
    kl_record reports "FAIL (${#bad[@]} logs with reports)"
fi
[ "$keep" = 1 ] && echo "test-asan: files kept in $WORK"
kl_summary "summary (sanitizers)"
