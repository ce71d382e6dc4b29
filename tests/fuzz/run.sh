#!/usr/bin/env bash
# tests/fuzz/run.sh — `make fuzz`: builds the libFuzzer harnesses of
# tests/fuzz/fuzz_*.c with clang (AddressSanitizer + UndefinedBehavior-
# Sanitizer, every UB report fatal, leaks checked) into build-fuzz/, then
# runs each for FUZZ_SECONDS (default 60) seconds, FUZZ_JOBS (default: the
# number of cores) at a time.
#
#   tests/fuzz/run.sh [harness...]      job_req tensor b64 json npy multipart tstream
#                                       (default: all)
#   FUZZ_SECONDS=10 tests/fuzz/run.sh   the short run of `make test`
#
# Each harness starts from its seed corpus (tests/fuzz/corpus/<harness>/,
# read-only) plus what earlier runs found (build-fuzz/corpus/<harness>/,
# where new inputs go). A crash, a leak, a UB report, a timeout or an
# out-of-memory is saved under build-fuzz/artifacts/<harness>/ and printed
# with the command that reproduces it. Prints one line per harness:
#   fuzz job_req: executions=N crashes=0 corpus=M seconds=S
# and exits non-zero when any harness crashed or did not build or run.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1

SECONDS_EACH=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-$(nproc)}
CLANG=${FUZZ_CC:-$(command -v clang || command -v clang-14 || true)}
OUT=build-fuzz
[ -n "$CLANG" ] || { echo "fuzz: clang not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
case $SECONDS_EACH in ''|*[!0-9]*) echo "fuzz: FUZZ_SECONDS must be a number of seconds" >&2; exit 2 ;; esac
case $JOBS in ''|0|*[!0-9]*) echo "fuzz: FUZZ_JOBS must be a number of processes" >&2; exit 2 ;; esac

# The harness links only what it exercises, compiled here from the sources.
SRC_b64="service/svc_util.c"
SRC_json="service/data/svc_json.c service/svc_util.c service/data/svc_dtoa.cc"
SRC_tensor="service/data/svc_tensor.c service/data/svc_json.c service/svc_util.c service/svc_sha256.c
            service/data/svc_dtoa.cc"
SRC_job_req="gateway/api/request.c gateway/gw_verr.c gateway/blob.c service/data/svc_kargs.c service/data/svc_tensor.c service/data/svc_json.c service/svc_util.c
             service/svc_sha256.c service/data/svc_dtoa.cc kernels/kl.c $(ls kernels/cpu/*.c | tr '\n' ' ') kernels/dist/comm_none.c"
SRC_tstream="service/data/svc_tstream.c service/data/svc_tensor.c service/data/svc_json.c service/svc_util.c service/svc_sha256.c
             service/data/svc_dtoa.cc"
SRC_npy="service/data/svc_npy.c"
SRC_multipart="service/http/svc_multipart.c"
LIBS_b64=""
LIBS_json="-ljansson -lm -ldouble-conversion -lstdc++"
LIBS_tensor="-ljansson -lm -lcrypto -ldouble-conversion -lstdc++"
LIBS_job_req="-ljansson -lopenblas -lm -lpthread -lcrypto -ldouble-conversion -lstdc++"
LIBS_tstream="-ljansson -lm -lcrypto -ldouble-conversion -lstdc++"
LIBS_npy=""
# Long plain strings are kept from jansson's lexer only from 4096 bytes on;
# lowered here so that inputs of fuzzing size reach that path.
DEFS_json="-DSVC_JSON_STRING_MIN=24"
LIBS_multipart=""
ALL="job_req tensor b64 json npy multipart tstream"

CFLAGS="-std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -pthread -Wall -Wextra -Wno-unused-parameter
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
        -Iservice -Iservice/data -Iservice/http -Ikernels -Ikernels/dist -Igateway -Igateway/api"

# OpenBLAS starts a thread pool when it loads; the harnesses never run a
# kernel, so one thread is all they need.
export OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

build() {
    local h=$1 src libs bin=$OUT/fuzz_$h
    src="tests/fuzz/fuzz_$h.c $(eval echo "\$SRC_$h")"
    libs=$(eval echo "\$LIBS_$h")
    local defs
    defs=$(eval echo "\${DEFS_$h:-}")
    # Rebuilt when a source, a header or this script is newer than the binary.
    if [ -x "$bin" ] && [ -z "$(find $src service/*.h service/*/*.h kernels/*.h kernels/cpu/*.h kernels/dist/*.h gateway/*.h gateway/*/*.h \
                                    tests/fuzz/run.sh -newer "$bin" 2>/dev/null | head -n 1)" ]; then
        return 0
    fi
    echo "fuzz: building $bin"
    : >"$OUT/logs/build_$h.log"
    # C++ sources (svc_dtoa.cc) compile apart, with the same sanitizers.
    local f csrc="" objs=""
    for f in $src; do
        case $f in
            *.cc) "${CLANG}++" -std=c++17 -O1 -g -fno-omit-frame-pointer -Iservice -Iservice/data \
                      -fsanitize=fuzzer-no-link,address,undefined -c "$f" -o "$OUT/${h}_$(basename "$f").o" \
                      >>"$OUT/logs/build_$h.log" 2>&1 || { cat "$OUT/logs/build_$h.log" >&2; return 1; }
                  objs="$objs $OUT/${h}_$(basename "$f").o" ;;
            *) csrc="$csrc $f" ;;
        esac
    done
    # shellcheck disable=SC2086
    "$CLANG" $CFLAGS $defs -o "$bin.tmp" $csrc $objs $libs >>"$OUT/logs/build_$h.log" 2>&1 \
        && mv -f "$bin.tmp" "$bin" && return 0
    rm -f "$bin.tmp"
    cat "$OUT/logs/build_$h.log" >&2
    return 1
}

# Runs one harness; prints its line; returns 0 when it ran clean.
fuzz_one() {
    local h=$1 bin=$OUT/fuzz_$h log=$OUT/logs/$h.log
    local art=$OUT/artifacts/$h/ work=$OUT/corpus/$h seeds=tests/fuzz/corpus/$h
    mkdir -p "$art" "$work"
    local before
    before=$(find "$art" -type f | wc -l)
    local start=$SECONDS
    # -max_total_time bounds the fuzzing; timeout bounds everything else
    # (a hang in startup, a huge corpus to replay).
    timeout -k 10 $((SECONDS_EACH + 120)) "$bin" \
        -max_total_time="$SECONDS_EACH" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
        -max_len=16384 -dict="tests/fuzz/$h.dict" -artifact_prefix="$art" \
        "$work" "$seeds" >"$log" 2>&1
    local rc=$? took=$((SECONDS - start))
    local execs crashes corpus
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    crashes=$(( $(find "$art" -type f | wc -l) - before ))
    # A sanitizer report without an artifact (one in startup, say) counts too.
    if [ "$crashes" -eq 0 ] && grep -qE '^==[0-9]+==ERROR|runtime error:|deadly signal' "$log"; then
        crashes=1
    fi
    corpus=$(find "$work" -type f | wc -l)
    echo "fuzz $h: executions=${execs:-0} crashes=$crashes corpus=$corpus seconds=$took"
    if [ "$crashes" -gt 0 ] || [ "$rc" -ne 0 ] || [ -z "$execs" ]; then
        echo "fuzz $h: FAILED (exit $rc); log $log" >&2
        grep -E -A 40 '^==[0-9]+==ERROR|runtime error:|invariant broken|deadly signal|Test unit written' "$log" \
            | head -n 80 >&2
        local a
        for a in $(find "$art" -type f -newer "$bin"); do
            echo "fuzz $h: reproduce with: $bin $a" >&2
        done
        return 1
    fi
    return 0
}

harnesses=${*:-$ALL}
for h in $harnesses; do
    case " $ALL " in *" $h "*) ;; *) echo "fuzz: no harness '$h' (have: $ALL)" >&2; exit 2 ;; esac
done
mkdir -p "$OUT/logs"

# pool STEP: runs "STEP h" for every harness, FUZZ_JOBS at a time (each is
# one process on one core), then prints their output in harness order;
# fails when any step failed.
pool() {
    local step=$1 h running=0 status=0
    for h in $harnesses; do
        if [ "$running" -ge "$JOBS" ]; then
            wait -n
            running=$((running - 1))
        fi
        ( "$step" "$h" >"$OUT/logs/$step.$h.out" 2>&1; echo $? >"$OUT/logs/$step.$h.rc" ) &
        running=$((running + 1))
    done
    wait
    for h in $harnesses; do
        cat "$OUT/logs/$step.$h.out"
        [ "$(cat "$OUT/logs/$step.$h.rc")" = 0 ] || status=1
    done
    return "$status"
}
build_step() {
    build "$1" || { echo "fuzz $1: executions=0 crashes=0 (build FAILED)"; return 1; }
}
pool build_step || exit 1
pool fuzz_one
