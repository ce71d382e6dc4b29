#!/usr/bin/env bash
# scripts/task-image.sh — the engine set-up tasks need on this host, cached:
#   1. a containers.conf for podman (runc, cgroupfs, no default ulimits,
#      events to a file) that nodes pass to the engine (--task-containers-conf),
#      because Debian's crun fails under hybrid cgroups and rlimits are refused;
#   2. a small local image with python3 and numpy (no registry is needed):
#      mmdebstrap builds a Debian rootfs tarball once, kept in the cache
#      directory, and `podman import` turns it into the image. A second run
#      finds the image (well under a second), or re-imports the tarball
#      (seconds) when the image store was wiped.
# Prints the containers.conf path on its last line of stdout.
#
# usage: scripts/task-image.sh [IMAGE|python|torch]
#   python (the default): localhost/kowloon-python:1, python3 and numpy;
#   torch: localhost/kowloon-torch:1, the same plus Debian's PyTorch (CPU,
#          torch.distributed with Gloo; ~1.5 GB, a few minutes the first time).
#   Any other IMAGE name is built as the python variant under that name.
# env:   KOWLOON_CACHE_DIR (default ${XDG_CACHE_HOME:-~/.cache}/kowloon)
#        KOWLOON_TASK_ENGINE (podman|docker, default podman)
set -euo pipefail

IMAGE=${1:-python}
PACKAGES=python3-minimal,python3-numpy
case $IMAGE in
    python) IMAGE=localhost/kowloon-python:1 ;;
    torch|localhost/kowloon-torch:*)
        [ "$IMAGE" = torch ] && IMAGE=localhost/kowloon-torch:1
        # libtorch1.13 links Debian's libgloo0: torch.distributed's gloo backend
        PACKAGES=python3-minimal,python3-numpy,python3-torch ;;
esac
ENGINE=${KOWLOON_TASK_ENGINE:-podman}
CACHE=${KOWLOON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kowloon}
SUITE=bookworm
# The tarball's name says what is in it, so a change of either builds anew.
TARBALL=$CACHE/rootfs-$SUITE-$(echo "$PACKAGES" | tr ',' '+').tar
CONF=$CACHE/containers.conf

log() { printf 'task-image: %s\n' "$*" >&2; }

command -v "$ENGINE" >/dev/null 2>&1 || { log "$ENGINE not found (scripts/install-deps.sh installs podman)"; exit 3; }
mkdir -p "$CACHE"

# ---------------------------------------------------------------- containers.conf
# Written atomically and only when it differs: running nodes read it at
# every engine call.
want=$(cat <<'EOF'
# Written by scripts/task-image.sh: how Kowloon's nodes run podman on this
# host (passed to podman as CONTAINERS_CONF by --task-containers-conf).
[containers]
# the runtime's setrlimit is refused in this kind of sandbox
default_ulimits = []

[engine]
# crun fails under hybrid cgroups (v1 controllers + a v2 mount); runc works
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
)
if [ "$ENGINE" = podman ] && { [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$want" ]; }; then
    printf '%s\n' "$want" >"$CONF.tmp.$$" && mv -f "$CONF.tmp.$$" "$CONF"
    log "wrote $CONF"
fi
[ "$ENGINE" = podman ] && export CONTAINERS_CONF=$CONF

# ---------------------------------------------------------------- the image
image_exists() {
    "$ENGINE" image inspect --format '{{.Id}}' "$IMAGE" >/dev/null 2>&1
}

if image_exists; then
    log "$IMAGE is there"
else
    if [ ! -s "$TARBALL" ]; then
        command -v mmdebstrap >/dev/null 2>&1 || { log "mmdebstrap not found (scripts/install-deps.sh installs it)"; exit 3; }
        log "building a $SUITE rootfs with $PACKAGES (once; kept in $CACHE: ~30 s-2 min for python, ~2-3 min for torch)"
        t0=$SECONDS
        # --variant=apt: apt and what it needs, nothing of an init system;
        # the apt lists and caches go, they are of no use to a task.
        # mmdebstrap picks the format by the name's ending: keep ".tar".
        tmp=$CACHE/.rootfs-$$.tar
        trap 'rm -rf "$tmp"' EXIT
        mmdebstrap --quiet --variant=apt --include="$PACKAGES" \
            --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
            "$SUITE" "$tmp" >&2
        mv -f "$tmp" "$TARBALL"
        log "rootfs built in $((SECONDS - t0)) s: $TARBALL"
    fi
    t0=$SECONDS
    "$ENGINE" import --quiet --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
        "$TARBALL" "$IMAGE" >/dev/null
    log "imported $IMAGE in $((SECONDS - t0)) s"
fi
[ "$ENGINE" = podman ] && echo "$CONF"
exit 0
