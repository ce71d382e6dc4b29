#!/usr/bin/env bash
# bench/kernels.sh — CPU figures for the kernel library (make bench-kernels):
# gemm 2048^3 through kl_run_cpu vs cblas_sgemm direct, saxpy and reduce
# bandwidth. Arguments go to bench_kernels: [gemm_size] [vector_elems] [reps].
# B selects the build folder, as for make.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
make --no-print-directory -s B="$B" "$B/bench/bench_kernels"
exec "$B/bench/bench_kernels" "$@"
