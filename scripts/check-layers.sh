#!/usr/bin/env bash
# scripts/check-layers.sh [BUILD_DIR] — the layering the build promises
# (DESIGN.md "Layout"), read from what the compiler recorded: every object's
# .d file (-MMD) lists each header it saw, so a layer that reaches a higher
# one's header, even through the preprocessor, shows there. Fails when
#   - a service/ or kernels/ object names a gateway/ or compute/ header,
#   - a kernels/ object names a service/ header,
#   - a gateway/ object names a compute/ header or the other way round,
#   - a header of ours has the name of a system header, or of a header in
#     another of our folders (the -I order would decide which one a file gets),
#   - the gateway's binary loads OpenBLAS, or the node's does not.
# Run after a build (make all); `make test-unit` runs it first.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
B=${1:-build}
bad=0

# check LAYER FORBIDDEN_REGEX WHAT: each .d of build/LAYER naming a header
# that matches the regex is a failure.
check() {
    local layer=$1 re=$2 what=$3 d hits
    local files
    files=$(find "$B/$layer" -name '*.d' 2>/dev/null)
    if [ -z "$files" ]; then
        echo "check-layers: no .d files under $B/$layer (build first: make all)" >&2
        bad=1
        return
    fi
    for d in $files; do
        # an object of a source since removed or renamed is no evidence
        local src=${d#"$B"/}; src=${src%.d}
        [ -e "$src.c" ] || [ -e "$src.cc" ] || [ -e "$src.cu" ] || continue
        # the dependency list: every word but the target, without the line
        # continuations and the empty rules of -MP, each path made relative
        # to the tree ("service/../compute/x.h" is compute/x.h)
        hits=$(tr ' \\' '\n\n' < "$d" | grep -v -e ':$' -e '^$' |
               xargs -r realpath -m --relative-to="$ROOT" | grep -E "$re" | sort -u)
        if [ -n "$hits" ]; then
            echo "✗ ${d%.d}.o ($layer/) sees $what: $(echo $hits)"
            bad=1
        fi
    done
}
check service  '^(\./)?(gateway|compute)/'  'a daemon header'
check kernels  '^(\./)?(gateway|compute)/'  'a daemon header'
check kernels  '^(\./)?service/'            'a service header'
check gateway  '^(\./)?compute/'            'a compute header'
check compute  '^(\./)?gateway/'            'a gateway header'

# Header names: one name, one file. The system's include folders are the
# compiler's own (cc -E -v), plus libpq's and CUDA's when present.
sysdirs=$(echo | ${CC:-cc} -E -v - 2>&1 >/dev/null | sed -n '/^#include <...> search starts here:/,/^End of search list./p' | grep '^ ')
sysdirs="$sysdirs $(pkg-config --cflags-only-I libpq 2>/dev/null | sed 's/-I//g') /usr/include/postgresql /usr/local/cuda/include"
mapfile -t headers < <(find service kernels gateway compute -name '*.h' | sort)
for h in "${headers[@]}"; do
    n=$(basename "$h")
    for s in $sysdirs; do
        if [ -e "$s/$n" ]; then
            echo "✗ $h has the name of a system header ($s/$n)"
            bad=1
        fi
    done
done
dups=$(printf '%s\n' "${headers[@]}" | xargs -n1 basename | sort | uniq -d)
for n in $dups; do
    echo "✗ several headers named $n: $(printf '%s\n' "${headers[@]}" | grep "/$n\$" | tr '\n' ' ')"
    bad=1
done

# The gateway runs no kernel and loads no BLAS; the node does
# (kernels/cpu/kl_cpu.h, "BLAS"): the binaries' dynamic sections say it.
bin=${B/build/bin}
if [ -x "$bin/kowloon-gateway" ] &&
   readelf -d "$bin/kowloon-gateway" | grep -qE 'NEEDED.*(openblas|gfortran|quadmath)'; then
    echo "✗ $bin/kowloon-gateway loads OpenBLAS (and libquadmath's printf hook with it)"
    bad=1
fi
if [ -x "$bin/kowloon-compute" ] && ! readelf -d "$bin/kowloon-compute" | grep -q 'NEEDED.*openblas'; then
    echo "✗ $bin/kowloon-compute does not load OpenBLAS: its gemm would run on the C loops"
    bad=1
fi

if [ "$bad" = 0 ]; then
    echo "✓ layers: service/ and kernels/ see no daemon header, kernels/ no service header, the daemons not each other; no header name twice; the gateway loads no BLAS, the node does"
fi
exit "$bad"
