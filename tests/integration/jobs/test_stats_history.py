"""GET /v1/stats/history: a tenant's queue depth and throughput per minute
(submitted, started, finished; queued and running at each minute's end),
oldest first, with the counts now. Depth is derived by walking back from
the current counts, so jobs moved back in time (psql) must show in the
right buckets; other tenants' jobs never show; answers are cached per
tenant and window for --stats-cache-ms (the suite's gateway: 1 s, so that
tests poll for a fresh answer instead of sleeping out the default 5 s);
bad minutes/tenant get 400/403/404 naming the field."""

import datetime
import time
import uuid

import pytest

from stack import STATS_CACHE_MS, nodes_drained, wait_until

X = {"x": {"dtype": "float32", "shape": [4], "data": [1, 2, 3, 4]},
     "y": {"dtype": "float32", "shape": [4], "data": [5, 6, 7, 8]}}
TIME_FMT = "%Y-%m-%dT%H:%M:%SZ"


def history(client, **q):
    r = client.get("/v1/stats/history", params=q)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    return r.json()


def totals(h):
    return {k: sum(b[k] for b in h["buckets"]) for k in ("submitted", "started", "finished")}


def check_shape(h, minutes):
    b = h["buckets"]
    assert h["minutes"] == minutes and len(b) == minutes
    ts = [datetime.datetime.strptime(x["t"], TIME_FMT) for x in b]
    assert all(t.second == 0 for t in ts)
    assert all(b2 - b1 == datetime.timedelta(minutes=1) for b1, b2 in zip(ts, ts[1:]))
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    assert datetime.timedelta(0) <= now - ts[-1] < datetime.timedelta(minutes=2), (now, ts[-1])
    # the last bucket ends now
    assert (b[-1]["queued"], b[-1]["running"]) == (h["now"]["queued"], h["now"]["running"])


@pytest.mark.timeout(90)
def test_history_counts_finished_and_queued_jobs_of_the_tenant_only(stack, tenant, admin, A):
    name, T = tenant
    empty = history(T)
    check_shape(empty, 60)
    assert empty["tenant"] == name and empty["now"] == {"queued": 0, "running": 0}
    assert totals(empty) == {"submitted": 0, "started": 0, "finished": 0}
    assert all(b["queued"] == 0 and b["running"] == 0 for b in empty["buckets"])
    done = [T.run("saxpy", {"a": 2.0}, X) for _ in range(3)]
    assert all(j["state"] == "succeeded" for j in done)
    with nodes_drained(admin):
        queued = [T.submit("saxpy", {"a": 1.0}, X) for _ in range(2)]
        A.submit("saxpy", {"a": 1.0}, X)         # another tenant's: never counted
        time.sleep(0.5)
        assert all(T.job(j["id"])["state"] == "queued" for j in queued)
        h = history(T, minutes=5)                 # another window: not the cached one
        check_shape(h, 5)
        assert h["now"] == {"queued": 2, "running": 0}, h
        assert totals(h) == {"submitted": 5, "started": 3, "finished": 3}, h
        # the admin sees the same for tenant=name; B's key may not ask
        assert history(admin, minutes=5, tenant=name)["buckets"] == h["buckets"]
        r = A.get("/v1/stats/history", params={"tenant": name})
        assert r.status_code == 403 and r.json()["error"]["field"] == "tenant", r.text
        for j in queued:
            T.cancel(j["id"])
    # cancelled while queued: finished (throughput counts every end), not
    # started; seen once the cached answer (--stats-cache-ms) has expired
    h = wait_until(lambda: (lambda h: h if h["now"] == {"queued": 0, "running": 0} else None)(
        history(T, minutes=5)), 10 + STATS_CACHE_MS / 1000, 0.2, "the cancelled jobs in the history")
    assert totals(h) == {"submitted": 5, "started": 3, "finished": 5}, h


@pytest.mark.timeout(60)
def test_history_walks_back_to_earlier_minutes_and_is_cached(stack, tenant):
    name, T = tenant
    a = T.run("saxpy", {"a": 2.0}, X)
    b = T.run("saxpy", {"a": 3.0}, X)
    before = history(T)
    assert totals(before)["finished"] == 2
    with stack.second_gateway("gateway-stats", KOWLOON_STATS_CACHE_MS=60000) as base_url:
        # a gateway that keeps its answers a minute: asked before and after
        # the jobs move, it answers the same
        long = stack.client(key=T.key, base=base_url)
        first = history(long)
        assert totals(first)["finished"] == 2
        # move the jobs back: a created at -10 minutes, started at -9, ended
        # at -8; b created at -30 (before a 20-minute window), started at -4,
        # ended at -2 (found through its end only in that window)
        base = stack.psql_value("SELECT to_char(date_trunc('minute', now()) AT TIME ZONE 'UTC',"
                                " 'YYYY-MM-DD\"T\"HH24:MI:SS')")
        at = lambda m: f"'{base}Z'::timestamptz - interval '{m} minutes' + interval '10 seconds'"
        for j, (c, s, f) in ((a, (10, 9, 8)), (b, (30, 4, 2))):
            stack.psql(f"UPDATE jobs SET created_at = {at(c)}, started_at = {at(s)},"
                       f" finished_at = {at(f)} WHERE id = '{j['id']}'")
        assert history(long) == first
    # the suite's gateway forgets its answer after --stats-cache-ms
    h = wait_until(lambda: (lambda h: h if h != before else None)(history(T)),
                   10 + STATS_CACHE_MS / 1000, 0.2, "the moved jobs in the history")
    check_shape(h, 60)
    assert h["now"] == {"queued": 0, "running": 0}, h
    base_t = datetime.datetime.strptime(base, "%Y-%m-%dT%H:%M:%S")
    by_t = {datetime.datetime.strptime(x["t"], TIME_FMT): x for x in h["buckets"]}

    def row(m):
        x = by_t[base_t - datetime.timedelta(minutes=m)]
        return (x["submitted"], x["started"], x["finished"], x["queued"], x["running"])

    assert row(30) == (1, 0, 0, 1, 0)
    assert row(11) == (0, 0, 0, 1, 0)
    assert row(10) == (1, 0, 0, 2, 0)
    assert row(9) == (0, 1, 0, 1, 1)
    assert row(8) == (0, 0, 1, 1, 0)
    assert row(5) == (0, 0, 0, 1, 0)
    assert row(4) == (0, 1, 0, 0, 1)
    assert row(3) == (0, 0, 0, 0, 1)
    assert row(2) == (0, 0, 1, 0, 0)
    first = h["buckets"][0]
    assert (first["queued"], first["running"]) == (0, 0)
    assert totals(h) == {"submitted": 2, "started": 2, "finished": 2}, h
    # a 20-minute window starts after b was created: b is queued at its
    # first bucket's end already
    h20 = history(T, minutes=20)
    check_shape(h20, 20)
    assert (h20["buckets"][0]["queued"], h20["buckets"][0]["running"]) == (1, 0)
    assert totals(h20) == {"submitted": 1, "started": 2, "finished": 2}, h20


@pytest.mark.parametrize("minutes", ["0", "1441", "-1", "1.5", "abc", "", " 5", "99999999999", "1e2"])
def test_history_bad_minutes_is_400_naming_the_field(A, minutes):
    r = A.get("/v1/stats/history", params={"minutes": minutes})
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["code"] == "invalid_argument" and e["field"] == "minutes", r.text


def test_history_window_bounds_and_access(A, admin, anon):
    check_shape(history(A, minutes=1), 1)
    check_shape(history(A, minutes=1440), 1440)
    assert anon.get("/v1/stats/history").status_code == 401
    r = admin.get("/v1/stats/history", params={"tenant": f"nobody-{uuid.uuid4().hex[:8]}"})
    assert r.status_code == 404 and r.json()["error"]["field"] == "tenant", r.text
    r = admin.get("/v1/stats/history", params={"tenant": "x" * 200})
    assert r.status_code == 400 and r.json()["error"]["field"] == "tenant", r.text
