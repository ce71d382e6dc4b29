#!/usr/bin/env bash
# tests/gpu/run.sh — the first run on a GPU machine: the CUDA kernels
# against the CPU reference, what many runs and a lost device leave behind,
# compute-sanitizer over the small cases, then the figures.
#
# Needs on a bare box: bash and coreutils (timeout), nvcc with its host
# compiler (gcc), the CUDA runtime, cuBLAS and NCCL (headers and libraries:
# in the CUDA toolkit, under /usr or /usr/local, under NCCL_HOME, or as the
# nvidia-nccl-cu12/cu13 (and nvidia-cublas) Python wheels, found under any
# python3's site-packages/nvidia/<lib>/{include,lib}), a driver and a GPU;
# compute-sanitizer where present. No Debian packages, no make, no network:
# the CPU references are built with -DKL_NO_BLAS (no OpenBLAS) and
# kernels/dist/comm_none.c (no Gloo).
#
# In this order, within a budget (KL_GPU_BUDGET_S, 450 s from the start, so
# the whole script ends within about 8 minutes even when a checker hangs;
# a checker whose turn comes with too little left is SKIPPED saying so):
#   1. device and build facts: GPUs, driver, nvcc, gcc, where NCCL, cuBLAS
#      and compute-sanitizer were found, and each checker's plugin line
#      (module loading, context creation time, pool thresholds);
#   2. one checker per tests/gpu/check_*.cu, each under its own timeout,
#      sized from its work on an H100/H200 (about 3x its expected time):
#      kernels 90 s, montecarlo 60, heat2d 45, kmeans 45, train_mlp 60,
#      allreduce 45, dist 45 (NCCL on one GPU too: a node alone times out),
#      soak 60 (~20 runs per kernel, cancels, memory back to baseline);
#   3. check_fault: it loses its own CUDA context on purpose (a process of
#      its own: the device serves the next one);
#   4. compute-sanitizer --tool memcheck over the checkers' small cases
#      (--small), 45 s each, as long as the budget lasts.
# Every checker prints a last line "SUMMARY <name>: PASS | FAIL (...) |
# SKIPPED: <why>"; one killed at its timeout gets "TIMED OUT after N s"
# from this script, its lines kept (checkers are line-buffered).
# Output: the whole log in $OUT/gpu-run.log when OUT is set (the device
# tool brings $OUT back), else in the build folder (its path is printed
# first and last); stdout gets the facts, a line per checker and the
# summary, short enough for the last 12,000 characters of a tool's reply.
#
#   tests/gpu/run.sh                 build for this machine's GPU, then run
#   tests/gpu/run.sh --build-only    build for sm_80 (no GPU needed), do not run
#   tests/gpu/run.sh --no-build      run what the build folder holds
#   tests/gpu/run.sh --only a,b      build and run those checkers only (kernels,dist, ...)
# Environment: NVCC, CC, CUDA_HOME, NCCL_HOME; KL_GPU_BUILD (build folder,
# default build/gpu, which make clean removes); OUT; KL_GPU_BUDGET_S;
# KL_GPU_TIMEOUT_S (every checker's timeout, for tests); KL_GPU_SANITIZE
# (auto, 0 or 1); KL_GPU_NCCL_DIRS (prefixes searched for NCCL before the
# Python packages; default CUDA_HOME /usr /usr/local); KL_CHECK_STALL_S
# (handed to the checkers: each sleeps that long after its first line).
# Exit: 0 when nothing failed or timed out (skips allowed), 1 otherwise,
# 2 when the build failed, 3 when nothing ran at all (no GPU answered).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

build_only=0 no_build=0 only=""
while (($#)); do
    case $1 in
        --build-only) build_only=1 ;;
        --no-build) no_build=1 ;;
        --only) only=${2:-}; shift ;;
        *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
CC=${CC:-gcc}
bdir=${KL_GPU_BUILD:-build/gpu}
budget=${KL_GPU_BUDGET_S:-450}
deadline=$((SECONDS + budget))
mkdir -p "$bdir"
if [[ -n ${OUT:-} ]]; then LOG=$OUT/gpu-run.log; else LOG=$bdir/gpu-run.log; fi
mkdir -p "$(dirname "$LOG")" && : >"$LOG" || exit 2

say() { echo "$*" | tee -a "$LOG"; }   # stdout and the log
log() { echo "$*" >>"$LOG"; }          # the log only
say "tests/gpu/run.sh: the whole log is $LOG"

# ---- what to build and run ----
all=(kernels montecarlo heat2d kmeans train_mlp allreduce dist soak fault)
declare -A limit=([kernels]=90 [montecarlo]=60 [heat2d]=45 [kmeans]=45 [train_mlp]=60 [allreduce]=45 [dist]=45
                  [soak]=60 [fault]=20)
sanitized=(kernels montecarlo heat2d kmeans train_mlp allreduce soak) # not dist (processes), not fault (planted)
wanted=("${all[@]}")
if [[ -n $only ]]; then IFS=, read -r -a wanted <<<"$only"; fi
for w in "${wanted[@]}"; do
    [[ -f tests/gpu/check_$w.cu ]] || { say "run.sh: no tests/gpu/check_$w.cu"; exit 2; }
done

# ---- where the libraries are ----
# find_lib NAME HEADER MODULE SONAME...: sets <NAME>_INC, <NAME>_LIBS (files)
# and <NAME>_WHERE from the first prefix (or Python package) that has the
# header and every library. MODULE is the wheel's package (nvidia.nccl).
find_lib() {
    local name=$1 hdr=$2 mod=$3 prefixes_var=$4; shift 4
    local -a sonames=("$@") prefixes dirs
    read -r -a prefixes <<<"${!prefixes_var}"
    local p d f inc libs
    for p in "${prefixes[@]}"; do
        [[ -f $p/include/$hdr ]] || continue
        libs=()
        for f in "${sonames[@]}"; do
            for d in lib64 lib lib/x86_64-linux-gnu targets/x86_64-linux/lib; do
                if [[ -e $p/$d/$f ]]; then libs+=("$p/$d/$f"); break; fi
            done
        done
        if ((${#libs[@]} == ${#sonames[@]})); then
            printf -v "${name}_INC" %s "$p/include"
            eval "${name}_LIBS=(\"\${libs[@]}\")"
            printf -v "${name}_WHERE" %s "$p (system)"
            return 0
        fi
    done
    # The wheels: nvidia/<lib>/{include,lib} (nvidia/nccl, nvidia/cublas;
    # CUDA 13's nvidia/cu13) under some python's site-packages or sys.path.
    local -a pys=() roots=() pkgdirs=()
    local py
    for py in python3 /opt/*/.venv/bin/python3 /opt/*/bin/python3 /usr/bin/python3 /usr/local/bin/python3; do
        command -v "$py" >/dev/null 2>&1 && pys+=("$py")
    done
    for py in "${pys[@]}"; do
        while IFS= read -r d; do [[ -n $d ]] && roots+=("$d"); done < <("$py" -c "import site, sys
print('\n'.join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))" 2>/dev/null)
    done
    for d in "${roots[@]}"; do
        for f in "$d"/nvidia/*/; do [[ -d $f ]] && pkgdirs+=("${f%/}"); done
    done
    # the package named first (nvidia.nccl for NCCL), then the others
    local first=() rest=()
    for d in "${pkgdirs[@]}"; do
        if [[ $d == */${mod//.//} ]]; then first+=("$d"); else rest+=("$d"); fi
    done
    pkgdirs=("${first[@]}" "${rest[@]}")
    for d in "${pkgdirs[@]}"; do
        [[ -f $d/include/$hdr ]] || continue
        libs=()
        for f in "${sonames[@]}"; do
            # a wheel has the versioned file only (libnccl.so.2)
            local hit
            hit=$(ls "$d"/lib/"$f" "$d"/lib/"$f".* 2>/dev/null | head -n 1)
            [[ -n $hit ]] && libs+=("$hit")
        done
        if ((${#libs[@]} == ${#sonames[@]})); then
            printf -v "${name}_INC" %s "$d/include"
            eval "${name}_LIBS=(\"\${libs[@]}\")"
            printf -v "${name}_WHERE" %s "$d (Python package)"
            return 0
        fi
    done
    return 1
}
SYSTEM_DIRS="${NCCL_HOME:-} $CUDA_HOME /usr /usr/local"
NCCL_DIRS="${NCCL_HOME:-} ${KL_GPU_NCCL_DIRS:-$CUDA_HOME /usr /usr/local}"
find_lib NCCL nccl.h nvidia.nccl NCCL_DIRS libnccl.so ||
    { say "run.sh: NCCL not found: no nccl.h with libnccl.so in ${NCCL_DIRS}, nor a Python package nvidia.nccl (nvidia-nccl-cu12/cu13); set NCCL_HOME"; exit 2; }
find_lib CUBLAS cublas_v2.h nvidia.cublas SYSTEM_DIRS libcublas.so libcublasLt.so ||
    { say "run.sh: cuBLAS not found in $SYSTEM_DIRS nor as a Python package nvidia.cublas"; exit 2; }
nccl_version=$(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{v=v (v?".":"") $3} END{print v}' "$NCCL_INC/nccl.h")
SAN=""
if [[ ${KL_GPU_SANITIZE:-auto} != 0 ]]; then
    SAN=$(command -v compute-sanitizer || ls "$CUDA_HOME"/bin/compute-sanitizer "$CUDA_HOME"/compute-sanitizer/compute-sanitizer \
          /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -n 1)
fi

say "== device and build facts"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,compute_cap,clocks.max.sm \
               --format=csv,noheader 2>&1 | tee -a "$LOG"
else
    say "nvidia-smi: not here"
fi
say "nvcc: $("$NVCC" --version 2>&1 | tail -n 1) ($NVCC)"
say "cc: $("$CC" --version 2>&1 | head -n 1)"
say "NCCL $nccl_version: ${NCCL_WHERE}"
say "cuBLAS: ${CUBLAS_WHERE}"
say "compute-sanitizer: ${SAN:-none (memcheck skipped)}"
say "host: $(uname -srm), $(nproc) CPUs; CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}"

# ---- build ----
arch=(-arch=native)
((build_only)) && arch=(-gencode arch=compute_80,code=sm_80)
cflags=(-std=c11 -D_GNU_SOURCE -DKL_NO_BLAS -O3 -march=native -Wall -Wextra -pthread -Ikernels -Ikernels/dist)
nvflags=(-O3 -std=c++17 "${arch[@]}" -Ikernels -Ikernels/dist -Ikernels/cuda -I"$NCCL_INC" -I"$CUBLAS_INC"
         --compiler-options -Wall,-Wextra)
libdirs=() linkargs=()
for f in "${NCCL_LIBS[@]}" "${CUBLAS_LIBS[@]}"; do
    libdirs+=("$(dirname "$f")")
    linkargs+=(-Xlinker "$f") # nvcc takes no .so.2 as an input; the linker does
done
rpath=$(printf '%s:' "${libdirs[@]}")
if ((!no_build)); then
    say "== build (${arch[*]}; warnings shown, not fatal)"
    t0=$SECONDS
    rm -rf "$bdir/obj" && mkdir -p "$bdir/obj/checks"
    pids=()
    for f in kernels/*.c kernels/cpu/*.c kernels/dist/comm_none.c; do
        "$CC" "${cflags[@]}" -c "$f" -o "$bdir/obj/$(basename "${f%.c}").o" >>"$LOG" 2>&1 & pids+=($!)
    done
    for f in kernels/cuda/*.cu; do
        "$NVCC" "${nvflags[@]}" -c "$f" -o "$bdir/obj/cu_$(basename "${f%.cu}").o" >>"$LOG" 2>&1 & pids+=($!)
    done
    for w in "${wanted[@]}"; do
        "$NVCC" "${nvflags[@]}" -c "tests/gpu/check_$w.cu" -o "$bdir/obj/checks/check_$w.o" >>"$LOG" 2>&1 & pids+=($!)
    done
    failed=0
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
    for w in "${wanted[@]}"; do
        ((failed)) && break
        "$NVCC" "${arch[@]}" -o "$bdir/check_$w" "$bdir"/obj/*.o "$bdir/obj/checks/check_$w.o" "${linkargs[@]}" \
            -Xlinker -rpath -Xlinker "${rpath%:}" -lpthread -lm >>"$LOG" 2>&1 || failed=1
    done
    if ((failed)); then
        errors=$(grep -E -a 'error|Error|fatal' "$LOG" | head -n 30)
        say "build FAILED; the errors:"
        say "$errors"
        exit 2
    fi
    say "built ${wanted[*]/#/check_} in $((SECONDS - t0)) s"
fi
((build_only)) && exit 0

export LD_LIBRARY_PATH="${rpath}$CUDA_HOME/lib64:$CUDA_HOME/lib:${LD_LIBRARY_PATH:-}"
results=() names=() status=0

# run_one LABEL CHECKER TIMEOUT COMMAND...: runs COMMAND with its output in
# the log, and records the checker's summary, or why there is none.
run_one() {
    local label=$1 checker=$2 lim=$3; shift 3
    [[ -n ${KL_GPU_TIMEOUT_S:-} ]] && lim=$KL_GPU_TIMEOUT_S
    local left=$((deadline - SECONDS)) verdict
    if ((left < 8)); then
        verdict="SKIPPED: no time left in the budget (KL_GPU_BUDGET_S=$budget)"
        log "SUMMARY $checker: $verdict"
    else
        ((lim > left - 3)) && lim=$((left - 3))
        log "" && log "== $label (timeout ${lim} s): $*"
        local off t0=$SECONDS rc
        off=$(stat -c %s "$LOG")
        timeout --kill-after=5 "$lim" "$@" >>"$LOG" 2>&1
        rc=$?
        local mine summary
        mine=$(tail -c +$((off + 1)) "$LOG")
        summary=$(grep -a "^SUMMARY $checker: " <<<"$mine" | tail -n 1)
        summary=${summary#"SUMMARY $checker: "}
        local m_all=0 m_nccl=0 m_ours=0
        [[ $label == memcheck* ]] && read -r m_all m_nccl m_ours < <(awk -f tests/gpu/memcheck_count.awk <<<"$mine")
        if ((rc == 124 || rc == 137)); then
            verdict="TIMED OUT after $lim s (its lines are in the log)"
            log "SUMMARY $checker: $verdict"
        elif [[ $label == memcheck* ]] && grep -aq 'not supported' <<<"$mine" && [[ $summary != PASS ]]; then
            verdict="SKIPPED: compute-sanitizer cannot run on this device ($(grep -a -m1 'not supported' <<<"$mine"))"
        elif [[ $label == memcheck* ]] && ((m_ours > 0)); then
            verdict="FAIL ($m_ours memcheck error(s) of ours; $m_nccl inside NCCL not counted; the report is in the log)"
        elif [[ $label == memcheck* && $summary == PASS* ]] && ((m_nccl > 0 && (rc == 0 || rc == 3))); then
            # --error-exitcode counts NCCL's reports too: the exit is not ours
            verdict="$summary ($m_nccl memcheck report(s) inside NCCL not counted: its probing, its leaks)"
        elif [[ -z $summary ]]; then
            if ((rc > 128)); then verdict="FAIL (killed by signal $((rc - 128)), no summary line)"
            else verdict="FAIL (exit $rc, no summary line)"; fi
        elif [[ $summary == PASS* && $rc != 0 ]]; then
            verdict="FAIL (said PASS, then exit $rc)"
        else
            verdict=$summary
        fi
        verdict="$verdict ($((SECONDS - t0)) s)"
    fi
    case $verdict in PASS*|SKIPPED*) ;; *) status=1 ;; esac
    names+=("$label")
    results+=("$verdict")
    say "$(printf '%-22s %s' "$label" "$verdict")"
}

say "== checkers (each one's lines: the log)"
export KL_CHECK_STALL_S=${KL_CHECK_STALL_S:-}
for w in "${wanted[@]}"; do
    [[ $w == fault ]] && continue
    run_one "check_$w" "check_$w" "${limit[$w]:-60}" "$bdir/check_$w"
done
# A process of its own loses its context; the device serves the next one.
[[ " ${wanted[*]} " == *" fault "* ]] && run_one check_fault check_fault "${limit[fault]}" "$bdir/check_fault"
if [[ -n $SAN ]]; then
    for w in "${sanitized[@]}"; do
        [[ " ${wanted[*]} " == *" $w "* ]] || continue
        run_one "memcheck check_$w" "check_$w" 45 "$SAN" --tool memcheck --leak-check full --error-exitcode 3 \
            --print-limit 10000 "$bdir/check_$w" --small
    done
fi

pass=0 fail=0 late=0 skip=0
for r in "${results[@]}"; do
    case $r in PASS*) pass=$((pass + 1)) ;; SKIPPED*) skip=$((skip + 1)) ;; TIMED*) late=$((late + 1)) ;;
        *) fail=$((fail + 1)) ;; esac
done
say "== summary: $pass passed, $fail failed, $late timed out, $skip skipped in $SECONDS s; log: $LOG"
if ((status == 0 && pass == 0)); then
    say "nothing ran: no GPU answered any checker (see the SKIPPED lines)"
    exit 3
fi
exit $status
