"""Redis and PostgreSQL trouble: Redis losing its data, Redis down and
PostgreSQL down, on a stack of the module's own; each test restores what it
broke."""

import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from stack import StackError, wait_until


pytestmark = pytest.mark.destructive


@pytest.fixture(scope="module")
def stack(own_stack):
    """These tests stop Redis and PostgreSQL and flush Redis: a stack of
    this module's own (conftest.py)."""
    return own_stack


def redis_cmd(stack, *args):
    """One Redis command over RESP; returns the first reply line."""
    return stack.redis_cmd(*args)


def pg_up(stack):
    try:
        return stack.psql_value("SELECT 1") == "1"
    except (StackError, OSError, subprocess.SubprocessError):
        return False


def readyz(anon):
    r = anon.get("/readyz", timeout=10)
    return r.status_code, r.json()


@pytest.mark.timeout(60)
def test_redis_flush_requeues_queued_jobs_from_postgres(A, stack):
    busy = [A.submit("sleep", {"seconds": 2}) for _ in stack.node_names]
    for b in busy:
        A.wait(b["id"], 10, states=("running",))
    queued = [A.submit("sleep", {"seconds": 0.1}, priority=p) for p in (3, 8)]
    assert redis_cmd(stack, "FLUSHALL") == "+OK"
    done = [A.wait(j["id"], 40) for j in busy + queued]
    assert [j["state"] for j in done] == ["succeeded"] * 4, done
    assert all(j["attempts"] >= 1 for j in done)


@pytest.mark.timeout(60)
def test_redis_down_makes_readyz_503_and_recovers(A, anon, stack):
    redis = stack.procs["redis"]
    redis.stop(signal.SIGTERM)
    try:
        code, body = wait_until(lambda: (lambda c, b: (c, b) if c == 503 else None)(*readyz(anon)),
                                10, 0.2, "readyz 503 with redis down")
        assert {k: body.get(k) for k in ("status", "postgres", "redis")} == \
            {"status": "unavailable", "postgres": "ok", "redis": "down"}, body
        assert anon.get("/healthz").status_code == 200, "liveness does not depend on redis"
        r = A.post_job({"kernel": "sleep", "params": {"seconds": 0}})
        assert r.status_code in (202, 503), r.text
        if r.status_code == 503:
            assert r.json()["error"]["code"] == "unavailable"
            assert r.headers.get("Retry-After"), "503 without Retry-After"
        pending = r.json()["id"] if r.status_code == 202 else None
    finally:
        redis.start()
    wait_until(lambda: readyz(anon)[0] == 200, 20, 0.2, "readyz 200 after redis is back")
    stack.wait_nodes_up(stack.node_names, timeout=20)
    if pending:
        j = A.wait(pending, 30)
        assert j["state"] == "succeeded", j
    j = A.run("sleep", {"seconds": 0}, timeout=30)
    assert j["state"] == "succeeded"


@pytest.mark.timeout(60)
def test_postgres_down_makes_readyz_and_submit_503_and_recovers(A, anon, stack):
    pg = stack.procs["postgres"]
    pg.stop(signal.SIGINT)  # fast shutdown: connections are closed
    try:
        code, body = wait_until(lambda: (lambda c, b: (c, b) if c == 503 else None)(*readyz(anon)),
                                10, 0.2, "readyz 503 with postgres down")
        assert body["status"] == "unavailable" and body["postgres"] == "down", body
        r = A.post_job({"kernel": "sleep", "params": {"seconds": 0}})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "unavailable"
        assert r.headers.get("Retry-After"), "503 without Retry-After"
    finally:
        pg.start()
        wait_until(lambda: pg_up(stack), 20, 0.2, "postgres back")
    wait_until(lambda: readyz(anon)[0] == 200, 20, 0.2, "readyz 200 after postgres is back")
    # once ready, every request is served: no pooled connection may still
    # be the one PostgreSQL closed (parallel requests touch the whole pool)
    clients = [stack.client("A") for _ in range(32)]
    with ThreadPoolExecutor(16) as ex:
        codes = list(ex.map(lambda c: c.list(limit=1).status_code, clients))
    assert codes == [200] * len(codes), f"after PostgreSQL came back and /readyz said ready: {codes}"
    stack.wait_nodes_up(stack.node_names, timeout=20)
    j = A.run("sleep", {"seconds": 0}, timeout=30)
    assert j["state"] == "succeeded"
