# shellcheck shell=bash
# scripts/lib.sh — shell helpers shared by run.sh, stop.sh and test.sh:
# a private PostgreSQL and Redis under a state directory, free ports, waits,
# and pid-file process control. Source it; it sets no shell options.
#
# State layout for STATE (e.g. .run): STATE/pg (PostgreSQL), STATE/redis,
# STATE/log/<name>.log, STATE/pids/<name>.pid.

kl_info() { printf '%s\n' "$*"; }
kl_warn() { printf 'warning: %s\n' "$*" >&2; }
kl_die()  { printf 'error: %s\n' "$*" >&2; exit 1; }

# Prints the last N (default 40) lines of a log file, framed, on stderr.
kl_log_tail() {
    local f=$1 n=${2:-40}
    [ -e "$f" ] || { printf '(no log at %s)\n' "$f" >&2; return 0; }
    printf -- '--- last %s lines of %s ---\n' "$n" "$f" >&2
    tail -n "$n" "$f" >&2
    printf -- '--- end of %s ---\n' "$f" >&2
}

# Keeps the previous log of a restarted process as FILE.1, so that a log shows
# one run and the last one before it.
kl_log_rotate() {
    [ -s "$1" ] && mv -f "$1" "$1.1"
    return 0
}

# ---------------------------------------------------------------- ports, waits

# Returns 0 when something accepts TCP connections on HOST:PORT.
kl_port_open() {
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# Prints a TCP port on 127.0.0.1 that nothing listens on right now.
kl_free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
        return
    fi
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 40000))
        kl_port_open 127.0.0.1 "$p" || { echo "$p"; return 0; }
    done
    return 1
}

# Waits up to TIMEOUT seconds for HOST:PORT to accept connections.
# With PID, gives up early when that process has exited.
kl_wait_port() {
    local host=$1 port=$2 timeout=${3:-20} pid=${4:-}
    local deadline=$((SECONDS + timeout))
    while ! kl_port_open "$host" "$port"; do
        [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && return 1
        [ "$SECONDS" -ge "$deadline" ] && return 1
        sleep 0.2
    done
}

# Prints the HTTP status of GET URL (000 when nothing answers). Extra args go to curl.
kl_http_status() {
    local url=$1; shift
    curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$@" "$url" 2>/dev/null || true
}

# Waits up to TIMEOUT seconds for GET URL to answer 200. With PID, gives up
# early when that process has exited.
kl_wait_http() {
    local url=$1 timeout=${2:-20} pid=${3:-}
    local deadline=$((SECONDS + timeout))
    while [ "$(kl_http_status "$url")" != 200 ]; do
        [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && return 1
        [ "$SECONDS" -ge "$deadline" ] && return 1
        sleep 0.2
    done
}

# ---------------------------------------------------------------- pid files

# Prints the pid in PIDFILE and returns 0 when that process is alive and its
# command line contains PATTERN (a guard against a pid reused since).
kl_pidfile_alive() {
    local pidfile=$1 pattern=${2:-} pid
    [ -s "$pidfile" ] || return 1
    pid=$(tr -dc '0-9' <"$pidfile")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    if [ -n "$pattern" ] && [ -r "/proc/$pid/cmdline" ]; then
        local cmd
        cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)   # not piped into grep -q: pipefail + SIGPIPE
        grep -qF -- "$pattern" <<<"$cmd" || return 1
    fi
    echo "$pid"
}

# Sends SIGTERM to PID, waits up to TIMEOUT seconds, then SIGKILL.
kl_kill_wait() {
    local pid=$1 timeout=${2:-10}
    kill -TERM "$pid" 2>/dev/null || return 0
    local deadline=$((SECONDS + timeout))
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            kl_warn "pid $pid ignored SIGTERM for ${timeout}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null
            sleep 0.2
            return 0
        fi
        sleep 0.1
    done
}

# Stops the process of PIDFILE (SIGTERM, then SIGKILL after TIMEOUT s) if it is
# alive and matches PATTERN, and removes the pid file. Quiet no-op otherwise.
kl_stop_pidfile() {
    local pidfile=$1 name=$2 pattern=${3:-} timeout=${4:-10} pid
    if pid=$(kl_pidfile_alive "$pidfile" "$pattern"); then
        kl_info "stopping $name (pid $pid)"
        kl_kill_wait "$pid" "$timeout"
    else
        kl_info "$name: not running"
    fi
    rm -f "$pidfile"
}

# ---------------------------------------------------------------- PostgreSQL

# Prints the directory of initdb/pg_ctl/postgres (newest installed major),
# or KOWLOON_PG_BIN when set.
kl_pg_bindir() {
    if [ -n "${KOWLOON_PG_BIN:-}" ]; then echo "$KOWLOON_PG_BIN"; return 0; fi
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -n "$d" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
    d=$(dirname "$(command -v pg_ctl 2>/dev/null)" 2>/dev/null)
    if [ -n "$d" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
    return 1
}

# Runs a command as the user that owns the cluster: root may not run
# PostgreSQL, so as root it runs as the `postgres` system user, from / so that
# an unreadable working directory does not matter.
kl__pg_as() {
    if [ "$(id -u)" -eq 0 ]; then
        (cd / && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}

# Prints PATH made absolute (against the current directory).
kl__abs() {
    case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac
}

# Prints the directory holding the cluster of STATE (data/, sock/, postgres.log).
# It is STATE/pg unless that was not reachable by the postgres user (a repo
# under /root, say): then STATE/pg/home names a directory under /tmp.
kl__pg_home() {
    local state
    state=$(kl__abs "$1")
    if [ -s "$state/pg/home" ]; then cat "$state/pg/home"; else echo "$state/pg"; fi
}

# Returns 0 when the cluster of STATE is running.
kl_pg_running() {
    local state bindir home
    state=$(kl__abs "$1")
    bindir=$(kl_pg_bindir) || return 1
    home=$(kl__pg_home "$state")
    [ -f "$home/data/PG_VERSION" ] || return 1
    kl__pg_as "$bindir/pg_ctl" -D "$home/data" status >/dev/null 2>&1
}

# Starts (initialising on first use) a private PostgreSQL for STATE on
# 127.0.0.1:PORT with a trusted superuser `kowloon` and a database `kowloon`.
# Trusted means no password: any user of this host may connect on 127.0.0.1,
# so it listens there only (never on another address), and its Unix socket
# is its own user's alone. A development stack; README says so.
# Its log is STATE/log/postgres.log. Returns 0 when it is up (or already was).
kl_pg_start() {
    local state port=$2
    state=$(kl__abs "$1")
    local bindir home log sockdir root=0
    bindir=$(kl_pg_bindir) || kl_die "PostgreSQL server binaries not found (install postgresql, or set KOWLOON_PG_BIN)"
    mkdir -p "$state/pg" "$state/log"
    [ "$(id -u)" -eq 0 ] && root=1
    if [ "$root" = 1 ]; then
        id postgres >/dev/null 2>&1 || kl_die "running as root needs the 'postgres' system user (apt-get install postgresql)"
        if [ ! -s "$state/pg/home" ] && ! (cd / && runuser -u postgres -- test -x "$state/pg") 2>/dev/null; then
            mktemp -d /tmp/kowloon-pg.XXXXXX >"$state/pg/home"
        fi
    fi
    home=$(kl__pg_home "$state")
    mkdir -p "$home/data" "$home/sock"
    # The server writes its log as its own user, so a relocated cluster keeps
    # the log beside its data and STATE/log/postgres.log points there.
    log=$state/log/postgres.log
    if [ "$home" != "$state/pg" ]; then
        log=$home/postgres.log
        ln -sfn "$log" "$state/log/postgres.log"
    fi
    touch "$log"
    [ "$root" = 1 ] && chown postgres: "$home" "$home/data" "$home/sock" "$log"
    chmod 700 "$home/data"

    if kl_pg_running "$state"; then
        kl_info "postgres: already running ($home/data)"
        return 0
    fi
    if kl_port_open 127.0.0.1 "$port"; then
        kl_warn "postgres: port $port is taken by another process"
        return 1
    fi
    kl_log_rotate "$log" && touch "$log"
    [ "$root" = 1 ] && chown postgres: "$log"
    if [ ! -f "$home/data/PG_VERSION" ]; then
        kl_info "postgres: initdb $home/data"
        kl__pg_as "$bindir/initdb" -D "$home/data" -A trust -U kowloon -E UTF8 --no-locale >>"$log" 2>&1 \
            || { kl_log_tail "$log"; return 1; }
    fi
    # A Unix socket path must fit in 107 bytes; past that, TCP only.
    sockdir=$home/sock
    [ $(( ${#sockdir} + 20 )) -gt 100 ] && sockdir=
    kl_info "postgres: starting on 127.0.0.1:$port"
    if ! kl__pg_as "$bindir/pg_ctl" -D "$home/data" -l "$log" -w -t 60 \
            -o "-p $port -k '$sockdir' -c listen_addresses=127.0.0.1 -c unix_socket_permissions=0700 -c fsync=on ${KL_PG_EXTRA_OPTS:-}" \
            start >/dev/null; then
        kl_log_tail "$log"
        return 1
    fi
    if [ -z "$(kl__pg_as "$bindir/psql" -h 127.0.0.1 -p "$port" -U kowloon -d postgres -Atc \
                "SELECT 1 FROM pg_database WHERE datname = 'kowloon'" 2>>"$log")" ]; then
        kl__pg_as "$bindir/createdb" -h 127.0.0.1 -p "$port" -U kowloon kowloon >>"$log" 2>&1 \
            || { kl_log_tail "$log"; return 1; }
    fi
}

# Stops the PostgreSQL of STATE (fast shutdown). Quiet no-op when not running.
kl_pg_stop() {
    local state bindir home
    state=$(kl__abs "$1")
    bindir=$(kl_pg_bindir) || { kl_info "postgres: not running"; return 0; }
    home=$(kl__pg_home "$state")
    if ! kl_pg_running "$state"; then
        kl_info "postgres: not running"
        return 0
    fi
    kl_info "stopping postgres ($home/data)"
    kl__pg_as "$bindir/pg_ctl" -D "$home/data" -m fast -w -t 60 stop >/dev/null
}

# Removes STATE (its PostgreSQL stopped) and, where kl_pg_start put the
# cluster under /tmp because the postgres user could not reach STATE, that
# directory too.
kl_state_remove() {
    local state home
    state=$(kl__abs "$1")
    home=$(kl__pg_home "$state")
    [ "$home" != "$state/pg" ] && case $home in /tmp/kowloon-pg.*) rm -rf "$home" ;; esac
    rm -rf "$state"
}

# ---------------------------------------------------------------- Redis

# Starts a private, non-persistent Redis for STATE on 127.0.0.1:PORT
# (pid STATE/pids/redis.pid, log STATE/log/redis.log). It has no password:
# it listens on 127.0.0.1 only, in protected mode. Returns 0 when up.
kl_redis_start() {
    local state port=$2
    state=$(kl__abs "$1")
    local pidfile=$state/pids/redis.pid log=$state/log/redis.log
    command -v redis-server >/dev/null 2>&1 || kl_die "redis-server not found (apt-get install redis-server)"
    mkdir -p "$state/redis" "$state/pids" "$state/log"
    if kl_pidfile_alive "$pidfile" redis-server >/dev/null; then
        kl_info "redis: already running (pid $(cat "$pidfile"))"
        return 0
    fi
    if kl_port_open 127.0.0.1 "$port"; then
        kl_warn "redis: port $port is taken by another process"
        return 1
    fi
    rm -f "$pidfile"
    kl_log_rotate "$log"
    kl_info "redis: starting on 127.0.0.1:$port"
    redis-server --port "$port" --bind 127.0.0.1 --protected-mode yes --dir "$state/redis" \
        --daemonize yes --pidfile "$pidfile" --logfile "$log" \
        --save "" --appendonly no </dev/null >>"$log" 2>&1 \
        || { kl_log_tail "$log"; return 1; }
    if ! kl_wait_port 127.0.0.1 "$port" 10; then
        kl_warn "redis did not open port $port"
        kl_log_tail "$log"
        return 1
    fi
    # The daemon writes its pid file just after it forks; give it a moment.
    for _ in $(seq 50); do [ -s "$pidfile" ] && break; sleep 0.1; done
}

# Stops the Redis of STATE. Quiet no-op when not running.
kl_redis_stop() {
    kl_stop_pidfile "$1/pids/redis.pid" redis redis-server 10
}

# ---------------------------------------------------------------- test workers

# Prints how many pytest-xdist workers the integration suite gets here:
# PER_CORE (default 3) per core, at most 8. The tests mostly wait (on
# daemons, on each other's jobs): on 2 cores the suite used 56 % of the CPU
# with 4 workers (300 s) and took 249 s with 6. The sanitizer run, whose
# daemons spend far more CPU, keeps 2 a core (scripts/test-asan.sh).
kl_test_workers() {
    local n per=${1:-3}
    n=$(nproc 2>/dev/null || echo 2)
    n=$((n * per))
    [ "$n" -gt 8 ] && n=8
    echo "$n"
}

# Prints the pytest arguments that run the suite on N workers, one a line
# (mapfile -t ARGS < <(kl_pytest_workers N)): whole files per worker (a
# file's tests keep their order and module fixtures); none for N <= 1 (one
# process, no xdist).
kl_pytest_workers() {
    [ "${1:-1}" -gt 1 ] && printf '%s\n' -n "$1" --dist loadfile
    return 0
}

# ---------------------------------------------------------------- containment

# The parts of a test run and how each ended ("PASS ...", "FAIL ...",
# "SKIP ..."), in order, for kl_summary.
kl_parts=() kl_results=()
kl_record() { kl_parts+=("$1"); kl_results+=("$2"); }

# kl_summary TITLE: prints every part's result under "=== TITLE"; returns 1
# when any part failed.
kl_summary() {
    local status=0 i
    echo
    echo "=== $1"
    for i in "${!kl_parts[@]}"; do
        printf '  %-12s %s\n' "${kl_parts[$i]}" "${kl_results[$i]}"
        case ${kl_results[$i]} in FAIL*) status=1 ;; esac
    done
    [ "$status" = 0 ] && echo "  all passed" || echo "  FAILED"
    return "$status"
}

# Runs CMD... and returns its exit status; then stops every process it left
# behind, daemons that detached included (SIGTERM, SIGKILL after 10 s). The
# runner is a child subreaper (prctl), so orphans of CMD become its children
# instead of init's and stay findable. Stdin is passed through.
kl_run_contained() {
    python3 -c '
import ctypes, os, signal, subprocess, sys, time

PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
me = os.getpid()

def descendants():
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    # the command name may hold spaces: the ppid follows its ")"
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, todo = set(), [me]
    while todo:
        p = todo.pop()
        for c, pp in parent.items():
            if pp == p and c not in found:
                found.add(c)
                todo.append(c)
    return found

def reap():
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass

# Ctrl-C reaches the whole process group: the command handles it, we clean
# up, then die of the same signal so that the calling shell stops too.
interrupted = []
signal.signal(signal.SIGINT, lambda *_: interrupted.append(1))
child = subprocess.Popen(sys.argv[1:], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
signal.signal(signal.SIGTERM, lambda *_: child.terminate())
# reap the orphans adopted while CMD runs (the conmon of each container would
# stay a zombie, listed below as left running) until CMD itself ends
while True:
    try:
        pid, status = os.waitpid(-1, 0)
    except InterruptedError:
        continue
    if pid == child.pid:
        rc = os.waitstatus_to_exitcode(status)
        child.returncode = rc
        break

left = descendants()
if left:
    names = []
    for p in sorted(left):
        try:
            names.append("%d:%s" % (p, open("/proc/%d/comm" % p).read().strip()))
        except OSError:
            pass
    print("stopping processes left running: " + " ".join(names), file=sys.stderr)
    for p in left:
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + 10
    while left and time.time() < deadline:
        reap()
        time.sleep(0.1)
        left = descendants()
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.1)
    reap()
if interrupted or rc == -signal.SIGINT:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(me, signal.SIGINT)
sys.exit(rc if rc >= 0 else 128 - rc)
' "$@"
}
