#!/usr/bin/env bash
# tests/chaos/run.sh — the chaos test: jobs at a steady rate while nodes and
# the gateway are killed (-9) and restarted, Redis is flushed and PostgreSQL
# restarted; then every accepted job is checked (see chaos.py). Default: the
# short run of `make test` (~200 jobs, one fault of each kind, < 90 s);
# --full: `make chaos` (2,000 jobs, six faults of each kind). Other arguments
# go to chaos.py (--seed N, --keep, --jobs N, --faults N, --seconds S).
# Whatever the run leaves behind is stopped when it ends.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
. scripts/lib.sh

for b in bin/kowloon-gateway bin/kowloon-compute; do
    [ -x "${KOWLOON_TEST_ROOT:-$ROOT}/$b" ] || kl_die "$b is missing; run \`make all\` first"
done
# A hard bound on the whole run, in case the driver itself hangs.
limit=180
for a in "$@"; do [ "$a" = --full ] && limit=900; done
kl_run_contained timeout -k 10 "$limit" python3 -u tests/chaos/chaos.py "$@"
