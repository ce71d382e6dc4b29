"""The stack of `make run` (scripts/lib.sh): its PostgreSQL trusts every
connection and its Redis has no password, so both must listen on 127.0.0.1
and nowhere else, and the PostgreSQL socket must be its own user's."""

import os
import subprocess
import tempfile

import pytest

import stack as stk

LIB = os.path.join(stk.REPO, "scripts", "lib.sh")


def listeners(port):
    """(address, port) of every TCP socket listening on port, IPv4 and
    IPv6, from /proc/net/tcp{,6}."""
    out = []
    for name in ("tcp", "tcp6"):
        with open(f"/proc/net/{name}") as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, p = local.split(":")
                if state == "0A" and int(p, 16) == port:
                    out.append(addr)
    return out


def pg_home(state):
    """Where lib.sh put the cluster: STATE/pg, or (as root, when the
    postgres user cannot reach STATE) the directory STATE/pg/home names."""
    try:
        with open(os.path.join(state, "pg", "home")) as f:
            return f.read().strip()
    except OSError:
        return os.path.join(state, "pg")


@pytest.mark.timeout(120)
def test_dev_postgres_and_redis_listen_on_loopback_only():
    state = tempfile.mkdtemp(prefix="kowloon-devstack-")
    os.chmod(state, 0o755)
    pg, rd = stk.free_port(), stk.free_port()
    sh = f'. "{LIB}"; set -e; kl_pg_start "{state}" {pg}; kl_redis_start "{state}" {rd}'
    try:
        r = subprocess.run(["bash", "-c", sh], capture_output=True, text=True, timeout=100)
        assert r.returncode == 0, r.stdout + r.stderr
        # 0100007F: 127.0.0.1 as /proc writes it; nothing on 0.0.0.0 or ::
        assert listeners(pg) == ["0100007F"], listeners(pg)
        assert listeners(rd) == ["0100007F"], listeners(rd)
        socks = [os.path.join(d, f) for d, _, fs in os.walk(pg_home(state)) for f in fs
                 if f == f".s.PGSQL.{pg}"]
        assert socks, "no Unix socket found"
        for s in socks:
            assert os.stat(s).st_mode & 0o077 == 0, f"{s} is open to other users"
        r = subprocess.run(["redis-cli", "-p", str(rd), "CONFIG", "GET", "protected-mode"],
                           capture_output=True, text=True, timeout=10)
        assert r.stdout.split() == ["protected-mode", "yes"], r.stdout
    finally:
        subprocess.run(["bash", "-c", f'. "{LIB}"; kl_redis_stop "{state}"; kl_pg_stop "{state}"'],
                       capture_output=True, timeout=60)
        subprocess.run(["rm", "-rf", pg_home(state), state])
