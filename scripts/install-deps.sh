#!/usr/bin/env bash
# scripts/install-deps.sh — installs what building and testing Kowloon needs:
# Debian packages (headers, PostgreSQL, Redis, tools) and the Python packages
# of tests/requirements.txt. Idempotent; when everything is present it only
# looks (well under a second). Works as root, or through sudo. `make deps`
# runs it.
#
# --check: installs nothing; says what is missing and fails, telling the
# user to run `make deps` (what `make test` does before it builds).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
case ${1:-} in
    --check) check=1 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

PACKAGES=(
    libmicrohttpd-dev libgnutls28-dev libjansson-dev libpq-dev libhiredis-dev libcurl4-openssl-dev libc-ares-dev
    libopenblas-dev libcmocka-dev libdouble-conversion-dev libssl-dev postgresql postgresql-contrib redis-server
    docker-compose g++ clang libclang-rt-14-dev wrk pkg-config curl
    openssl  # test_tls.py makes its certificates
    prometheus  # promtool, which checks /metrics in tests/integration/ops/test_metrics.py
    # the dashboard: Chart.js it serves, and what tests/integration/clients/test_ui.py
    # drives it with (headless Chromium through selenium) and runs its
    # JavaScript client in (Node >= 18)
    libjs-chart.js chromium chromium-driver nodejs
    # multi-node jobs on CPU nodes (Gloo's TCP collectives), and the Slurm
    # the tests start to run deploy/slurm/ for real
    libgloo-dev slurm-wlm
    # tasks (the user's programs in containers): the engine and the runtime
    # that works where crun does not (hybrid cgroups), the init that passes
    # SIGTERM on (podman --init), what scripts/task-image.sh builds the
    # test image with, and the firewall that keeps gang parts off the
    # cluster's services
    podman runc catatonit uidmap mmdebstrap iptables
)
REQUIREMENTS=tests/requirements.txt

export DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 "$@"
    else
        echo "install-deps: need root (or sudo) to run: $*" >&2
        return 1
    fi
}

# Prints the packages of the list that dpkg does not have installed.
missing_packages() {
    local installed
    # dpkg-query fails when any of them is unknown to it; its output still counts.
    installed=$({ dpkg-query -W -f='${Package} ${db:Status-Status}\n' "$@" 2>/dev/null || true; } |
                awk '$2 == "installed" { print $1 }')
    local p
    for p in "$@"; do
        grep -qx -- "$p" <<<"$installed" || echo "$p"
    done
}

# Runs apt-get with retries: mirrors of fresh CI machines are sometimes flaky.
apt_retry() {
    local i
    for i in 1 2 3; do
        as_root apt-get -o Acquire::Retries=3 -o Dpkg::Use-Pty=0 "$@" </dev/null && return 0
        echo "install-deps: apt-get $1 failed (try $i of 3)" >&2
        sleep $((i * 5))
    done
    return 1
}

# ---------------------------------------------------------------- Debian packages
want=("${PACKAGES[@]}")
python3 -m pip --version >/dev/null 2>&1 || want+=(python3-pip)
mapfile -t missing < <(missing_packages "${want[@]}")
if [ "$check" = 1 ]; then
    problem=
    [ "${#missing[@]}" -eq 0 ] || problem="Debian packages missing: ${missing[*]}"
fi
if [ "$check" = 0 ] && [ "${#missing[@]}" -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}"
    # Keep package scripts from starting system PostgreSQL/Redis services:
    # Kowloon runs its own private instances on other ports.
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ] && [ "$(id -u)" -eq 0 ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
        trap 'rm -f "$policy"' EXIT
    fi
    # One broken third-party source must not stop the install: warn, go on.
    apt_retry update -q || echo "install-deps: apt-get update failed; trying the install anyway" >&2
    apt_retry install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"
    mapfile -t still < <(missing_packages "${want[@]}")
    if [ "${#still[@]}" -gt 0 ]; then
        echo "install-deps: still missing after apt-get: ${still[*]}" >&2
        exit 1
    fi
fi

# ---------------------------------------------------------------- Python packages
# Checks every requirement of the file by distribution name (and version
# specifier when one is given), so adding a line to the file is enough.
python_ok() {
    python3 - "$REQUIREMENTS" <<'PY'
import re, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    try:
        from pip._vendor.packaging.requirements import Requirement
    except ImportError:
        Requirement = None
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line or line.startswith("-"):
        continue
    if Requirement:
        req = Requirement(line)
        name, spec = req.name, req.specifier
    else:
        name, spec = re.split(r"[<>=!~;\[ ]", line, 1)[0], None
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if spec and not spec.contains(version, prereleases=True):
        sys.exit(1)
PY
}

if [ "$check" = 1 ]; then
    if ! python_ok; then
        problem="${problem:+$problem; }Python packages of $REQUIREMENTS missing or too old"
    fi
    if [ -n "$problem" ]; then
        echo "install-deps: $problem" >&2
        echo "install-deps: run \`make deps\` (once; it installs them, as root or through sudo)" >&2
        exit 1
    fi
    exit 0
fi

if ! python_ok; then
    echo "install-deps: installing Python packages of $REQUIREMENTS"
    export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
    pip_install=(python3 -m pip install --quiet -r "$REQUIREMENTS")
    if ! err=$("${pip_install[@]}" 2>&1); then
        # A distribution's own python (PEP 668) refuses pip outside a venv.
        if grep -q externally-managed <<<"$err"; then
            "${pip_install[@]}" --break-system-packages
        else
            printf '%s\n' "$err" >&2
            exit 1
        fi
    fi
    python_ok || { echo "install-deps: Python requirements still not met" >&2; exit 1; }
fi
echo "install-deps: all dependencies present"
