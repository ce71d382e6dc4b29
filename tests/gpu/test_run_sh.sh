#!/usr/bin/env bash
# tests/gpu/test_run_sh.sh — run.sh's own behaviour, on any machine with
# nvcc (no GPU needed; tests/integration/kernels/test_gpu_run_sh.py runs it):
#   1. NCCL found as a Python package only (a site-packages folder shaped
#      like the nvidia-nccl-cu13 wheel: nvidia/nccl/{include,lib}, the
#      library as libnccl.so.2 alone), said so, linked and found at run time;
#   2. a checker that hangs (KL_CHECK_STALL_S) is killed at its timeout,
#      its lines kept in the log with a "TIMED OUT" summary, run.sh exits 1
#      and nothing of it is left running;
#   3. a checker whose turn comes with no budget left is SKIPPED saying so;
#   4. where no GPU answers, each checker says SKIPPED: no CUDA device, and
#      run.sh exits 3 (nothing ran);
#   5. memcheck's verdict (memcheck_count.awk): NCCL's own probing of kernels
#      it did not build for the GPU is not counted, every other report is.
# Prints PASS or the first FAIL; exits 0 or 1.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
tmp=$(mktemp -d /tmp/kl-test-run-sh.XXXXXX)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.txt; do echo "--- $f"; tail -n 30 "$f"; done; exit 1; }

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
hdr="" lib=""
for p in "$CUDA_HOME" /usr /usr/local; do
    [[ -z $hdr && -f $p/include/nccl.h ]] && hdr=$p/include/nccl.h
    for d in lib64 lib lib/x86_64-linux-gnu; do
        [[ -z $lib ]] && lib=$(ls "$p/$d"/libnccl.so.2* 2>/dev/null | head -n 1)
    done
done
[[ -n $hdr && -n $lib ]] || fail "no NCCL on this machine to shape a wheel from"
ver=$(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{v=v (v?".":"") $3} END{print v}' "$hdr")

# 1. the wheel's layout, and no NCCL anywhere else run.sh looks
site=$tmp/site/nvidia/nccl
mkdir -p "$site/include" "$site/lib"
cp "$hdr" "$site/include/"
ln -s "$(readlink -f "$lib")" "$site/lib/libnccl.so.2"
: >"$site/__init__.py"
PYTHONPATH=$tmp/site KL_GPU_NCCL_DIRS=/nonexistent KL_GPU_BUILD=$tmp/build OUT=$tmp/out \
    tests/gpu/run.sh --build-only --only kernels >"$tmp/build.txt" 2>&1 || fail "the build failed"
grep -qF "NCCL $ver: $site (Python package)" "$tmp/build.txt" || fail "NCCL not reported as the Python package"
grep -q "^built check_kernels" "$tmp/build.txt" || fail "check_kernels not built"
# ldd's output is read whole first: under pipefail, `ldd | grep -q` fails
# whenever grep's early exit cuts ldd off (SIGPIPE), match or not
libs=$(ldd "$tmp/build/check_kernels")
grep -qF "$site/lib/libnccl.so.2" <<<"$libs" || fail "check_kernels does not load the wheel's libnccl.so.2"
echo "ok: NCCL found as a Python package, linked and loaded from it"

# 2. a hang: killed at its timeout, its lines kept, the run failed
KL_CHECK_STALL_S=120 KL_GPU_TIMEOUT_S=2 KL_GPU_BUILD=$tmp/build OUT=$tmp/out \
    tests/gpu/run.sh --no-build --only kernels >"$tmp/hang.txt" 2>&1
rc=$?
((rc == 1)) || fail "run.sh exited $rc after a timeout, not 1"
grep -qE '^check_kernels +TIMED OUT after 2 s' "$tmp/hang.txt" || fail "no TIMED OUT line on stdout"
log=$tmp/out/gpu-run.log
grep -q '^== check_kernels: start (pid ' "$log" || fail "the checker's first line is not in the log"
grep -q '^check_kernels: stalling 120 s' "$log" || fail "the checker's last line is not in the log"
grep -q '^SUMMARY check_kernels: TIMED OUT after 2 s' "$log" || fail "no TIMED OUT summary in the log"
pid=$(sed -n 's/^== check_kernels: start (pid \([0-9]*\).*/\1/p' "$log" | head -n 1)
[[ -n $pid && ! -e /proc/$pid ]] || fail "the stalled checker (pid $pid) is still running"
echo "ok: a hung checker is cut at its timeout, its lines and a TIMED OUT summary kept"

# 3. no budget left
KL_GPU_BUDGET_S=5 KL_GPU_BUILD=$tmp/build OUT=$tmp/out tests/gpu/run.sh --no-build --only kernels \
    >"$tmp/budget.txt" 2>&1
grep -qE '^check_kernels +SKIPPED: no time left in the budget' "$tmp/budget.txt" || fail "no budget SKIPPED line"
echo "ok: a checker past the budget is skipped, saying so"

# 4. no GPU here: said, and nothing ran
if ! nvidia-smi -L >/dev/null 2>&1; then
    KL_GPU_BUILD=$tmp/build OUT=$tmp/out tests/gpu/run.sh --no-build --only kernels >"$tmp/nogpu.txt" 2>&1
    rc=$?
    ((rc == 3)) || fail "run.sh exited $rc with no GPU, not 3"
    grep -qE '^check_kernels +SKIPPED: no CUDA device' "$tmp/nogpu.txt" || fail "no 'no CUDA device' line"
    echo "ok: without a GPU each checker says so and run.sh exits 3"
fi
# 5. memcheck's count: NCCL's own probing is not ours, a report past the
# print limit is, and "N errors were not printed" is not the count
probe() { printf '%s\n' "========= Program hit cudaErrorNoKernelImageForDevice (error 209) due to \"no kernel image is available for execution on the device\" on CUDA API call to cudaFuncGetAttributes." \
    "=========     Saved host backtrace up to driver entry point at error" \
    "=========         Host Frame:  [0x4cb045] in libcuda.so.1" "=========         Host Frame:  [$1] in $2" "========= "; }
ours() { printf '%s\n' "========= Invalid __shared__ read of size 12 bytes" \
    "=========     at void km_assign<1, true>(...)+0x2430" "=========     Access to 0x400 is out of bounds" \
    "=========         Host Frame: cudaLaunchKernel [0xb4457] in check_kmeans" "========= "; }
count() { awk -f tests/gpu/memcheck_count.awk; }
[[ $( { probe 0x1babc0 libnccl.so.2; probe 0x1babc0 libnccl.so.2; echo "========= ERROR SUMMARY: 2 errors"; } | count) == "2 2 0" ]] ||
    fail "two NCCL probes were not told from ours"
[[ $( { probe 0x1 libnccl.so.2; ours; echo "========= ERROR SUMMARY: 3 errors";
        echo "========= ERROR SUMMARY: 1 errors were not printed. Use --print-limit option"; } | count) == "3 1 2" ]] ||
    fail "an invalid read, or the unprinted one, was not counted as ours"
[[ $( { probe 0x2 check_allreduce; echo "========= ERROR SUMMARY: 1 errors"; } | count) == "1 0 1" ]] ||
    fail "the same API error from our own code was taken for NCCL's"
leak() { printf '%s\n' "========= Leaked 4 bytes at 0x7f5e66a00000" "=========         Host Frame: cuMemHostAlloc [0x32bd9f] in libcuda.so.1" \
    "=========         Host Frame: $1 [0x8a108] in $2" "========= "; }
[[ $( { leak ncclCommInitRankConfig libnccl.so.2; leak kl__cuda_kmeans check_kmeans; echo "========= LEAK SUMMARY: 8 bytes leaked in 2 allocations";
        echo "========= ERROR SUMMARY: 2 errors"; } | count) == "2 1 1" ]] || fail "leaks were not told NCCL's from ours"
# and run.sh fails a memcheck run on a report of ours whatever the checker said
mkdir -p "$tmp/bin"
{ echo '#!/usr/bin/env bash'; declare -f ours; echo 'ours; echo "========= ERROR SUMMARY: 1 errors"; exit 3'; } >"$tmp/bin/compute-sanitizer"
chmod +x "$tmp/bin/compute-sanitizer"
PATH=$tmp/bin:$PATH KL_GPU_BUILD=$tmp/build OUT=$tmp/out tests/gpu/run.sh --no-build --only kernels >"$tmp/memcheck.txt" 2>&1
grep -qE '^memcheck check_kernels +FAIL \(1 memcheck error\(s\) of ours; 0 inside NCCL' "$tmp/memcheck.txt" ||
    fail "run.sh did not fail the memcheck run on a report of ours"
{ echo '#!/usr/bin/env bash'; declare -f probe; echo 'probe 0x1 libnccl.so.2; echo "========= ERROR SUMMARY: 1 errors"; echo "SUMMARY check_kernels: PASS"; exit 3'; } >"$tmp/bin/compute-sanitizer"
PATH=$tmp/bin:$PATH KL_GPU_BUILD=$tmp/build OUT=$tmp/out tests/gpu/run.sh --no-build --only kernels >"$tmp/memcheck.txt" 2>&1
grep -qE "^memcheck check_kernels +PASS \(1 memcheck report\(s\) inside NCCL not counted" "$tmp/memcheck.txt" ||
    fail "run.sh failed a memcheck run whose only report was NCCL's probing"
echo "ok: memcheck's verdict counts our reports, not NCCL's probing"
echo "PASS tests/gpu/test_run_sh.sh"
