#!/usr/bin/env bash
# tests/chaos/run.sh — the chaos test: jobs at a steady rate while nodes and
# the gateway are killed (-9) and restarted, Redis is flushed and PostgreSQL
# restarted; then every accepted job is checked (see chaos.py). Beside it,
# the same faults (but node kills) on a simulated cluster of 8-GPU nodes
# running gangs (sim_chaos.py). Default: the short runs of `make test`
# (~200 jobs, and 600 on 16 simulated nodes, one fault of each kind, < 100
# s); --full: `make chaos` (2,000 jobs, six faults of each kind; 4,000 on 24
# simulated nodes, three of each). Other arguments go to chaos.py (--seed
# N, --keep, --jobs N, --faults N, --seconds S); --full, --seed and --keep
# to sim_chaos.py too. Whatever the runs leave behind is stopped when they
# end.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
. scripts/lib.sh

for b in bin/kowloon-gateway bin/kowloon-compute; do
    [ -x "${KOWLOON_TEST_ROOT:-$ROOT}/$b" ] || kl_die "$b is missing; run \`make all\` first"
done
[ -x "${KOWLOON_TEST_ROOT:-$ROOT}/bin/kl-scalesim" ] || kl_die "bin/kl-scalesim is missing; run \`make all\` first"
# A hard bound on each run, in case a driver itself hangs.
limit=180
sim_args=()
prev=
for a in "$@"; do
    [ "$a" = --full ] && limit=900
    case $a in --full|--keep) sim_args+=("$a") ;; esac
    [ "$prev" = --seed ] && sim_args+=(--seed "$a")
    prev=$a
done
# The simulated cluster's run mostly waits (its drain): it goes beside the
# other, its output printed after it.
simlog=$(mktemp)
trap 'rm -f "$simlog"' EXIT
kl_run_contained timeout -k 10 "$limit" python3 -u tests/chaos/sim_chaos.py "${sim_args[@]}" >"$simlog" 2>&1 &
sim=$!
kl_run_contained timeout -k 10 "$limit" python3 -u tests/chaos/chaos.py "$@"
rc=$?
wait "$sim"
sim_rc=$?
echo "=== the simulated cluster (tests/chaos/sim_chaos.py)"
cat "$simlog"
[ "$sim_rc" = 124 ] && echo "sim chaos: FAILED: ran past its ${limit}s limit"
[ "$rc" = 124 ] && echo "chaos: FAILED: ran past its ${limit}s limit"
[ "$rc" = 0 ] && [ "$sim_rc" = 0 ]
