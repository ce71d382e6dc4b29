#!/usr/bin/env bash
# tests/gpu/run.sh — CUDA kernels against the CPU reference on a GPU host,
# then performance figures. Needs only a C compiler and the CUDA toolkit
# (nvcc, cuBLAS, CUB): no make, no OpenBLAS (the CPU gemm is built with
# -DKL_NO_BLAS), no cmocka. Takes about a minute on an H100/H200.
#   tests/gpu/run.sh               build for this machine's GPU, then run
#   tests/gpu/run.sh --build-only  build for sm_80 (no GPU needed), do not run
# Environment: NVCC, CC, KL_GPU_BUILD (build folder, default build/gpu, which make clean removes).
set -euo pipefail
cd "$(dirname "$0")/../.."

build_only=0
[[ ${1:-} == --build-only ]] && build_only=1

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
CC=${CC:-gcc}
bdir=${KL_GPU_BUILD:-build/gpu}
# One architecture keeps the build short; native asks the driver which.
if ((build_only)); then arch=(-gencode arch=compute_80,code=sm_80); else arch=(-arch=native); fi

rm -rf "$bdir" && mkdir -p "$bdir"
cflags=(-std=c11 -D_GNU_SOURCE -DKL_NO_BLAS -O3 -march=native -Wall -Wextra -Werror -pthread -Ikernels
        -Ikernels/dist)
nvflags=(-O3 -std=c++17 "${arch[@]}" -Ikernels -Ikernels/dist -Ikernels/cuda --compiler-options -Wall,-Wextra
         -Werror all-warnings)

echo "== build ($NVCC, ${arch[*]})"
t0=$SECONDS
pids=()
# No Gloo here (the GPU host has no Debian packages): the CPU reference's
# multi-node runs get kernels/dist/comm_none.c, which refuses them.
for f in kernels/*.c kernels/cpu/*.c kernels/dist/comm_none.c; do
    "$CC" "${cflags[@]}" -c "$f" -o "$bdir/$(basename "${f%.c}").o" & pids+=($!)
done
for f in kernels/cuda/*.cu; do
    "$NVCC" "${nvflags[@]}" -c "$f" -o "$bdir/cu_$(basename "${f%.cu}").o" & pids+=($!)
done
# One checker per file (tests/gpu/check_*.cu), each with its own main.
mkdir -p "$bdir/checks"
for f in tests/gpu/check_*.cu; do
    "$NVCC" "${nvflags[@]}" -c "$f" -o "$bdir/checks/$(basename "${f%.cu}").o" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
checks=()
for o in "$bdir"/checks/*.o; do
    exe="$bdir/$(basename "${o%.o}")"
    "$NVCC" "${arch[@]}" -o "$exe" "$bdir"/*.o "$o" -lcublas -lcurand -lnccl -lpthread -lm
    checks+=("$exe")
done
echo "built ${checks[*]} in $((SECONDS - t0)) s"
((build_only)) && exit 0

export LD_LIBRARY_PATH="$CUDA_HOME/lib64:$CUDA_HOME/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
status=0
for exe in "${checks[@]}"; do
    echo "== $(basename "$exe")"
    timeout 240 "$exe" || status=1
done
exit $status
