#!/usr/bin/env bash
# tests/api_fuzz/run.sh [--full] — API fuzzing of the gateway with
# schemathesis against openapi/openapi.yaml (tests/api_fuzz/fuzz.py says
# what it runs). Without arguments the short run of `make test` (≥ 1,000
# requests, a fixed seed); --full is `make fuzz-api` (minutes, a random
# seed; KOWLOON_FUZZ_SEED=N repeats one). It starts its own throwaway stack
# (PostgreSQL, Redis, gateway, a node) on free loopback ports; whatever is
# left running when it ends is stopped. Needs `make all` and
# scripts/install-deps.sh (schemathesis comes from tests/requirements.txt).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
. scripts/lib.sh

mode=() limit=900
case ${1:-} in
    "") ;;
    --full) mode=(--full) limit=2700 ;;
    *) echo "usage: $0 [--full]" >&2; exit 2 ;;
esac
command -v schemathesis >/dev/null 2>&1 ||
    kl_die "schemathesis is not installed: run scripts/install-deps.sh"
gw=${KOWLOON_TEST_ROOT:-$ROOT}/bin/kowloon-gateway
[ -x "$gw" ] || kl_die "$gw is missing: run make all"

# SIGTERM at the limit lets fuzz.py stop its stack; the containment stops
# anything still left after it.
kl_run_contained timeout -k 30 "$limit" python3 tests/api_fuzz/fuzz.py "${mode[@]}"
rc=$?
[ "$rc" = 124 ] && echo "api-fuzz: FAILED: ran past its ${limit}s limit" >&2
exit "$rc"
