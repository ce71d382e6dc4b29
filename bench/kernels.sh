#!/usr/bin/env bash
# bench/kernels.sh — CPU figures for the kernel library (make bench-kernels):
# gemm 2048^3 through kl_run_cpu vs cblas_sgemm direct, saxpy and reduce
# bandwidth. Arguments go to bench_kernels: [gemm_size] [vector_elems] [reps].
# B selects the build folder, as for make.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
progs=()
for f in bench/bench_*.c; do
    progs+=("$B/bench/$(basename "${f%.c}")")
done
make --no-print-directory -s B="$B" "${progs[@]}"
# bench_kernels takes [gemm_size] [vector_elems] [reps]; the others take none.
"$B/bench/bench_kernels" "$@"
for p in "${progs[@]}"; do
    [ "$(basename "$p")" = bench_kernels ] || "$p"
done
