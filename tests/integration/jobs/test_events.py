"""Server-Sent Events of job state changes: GET /v1/jobs/{id}/events and
GET /v1/events against the real stack. Every stream is read raw (http.client)
so the tests see the wire format itself: `id:` is the job_events id,
`event: state`, `data:` one JSON object; Last-Event-ID resumes with no gap
and no repeat, also across gateways, restarts and concurrent writers."""

import http.client
import json
import threading
import time
import urllib.parse

import pytest

import stack as stk
from stack import TERMINAL, tensor  # noqa: F401


class Sse:
    """One event stream, read event by event."""

    def __init__(self, base, key, path, headers=None, timeout=15):
        u = urllib.parse.urlparse(base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        h = {"Accept": "text/event-stream"}
        if key:
            h["Authorization"] = f"Bearer {key}"
        h.update(headers or {})
        self.conn.request("GET", path, headers=h)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = self.resp.headers
        self.comments = []

    def body(self):
        return self.resp.read()

    def next(self):
        """The next event as {"id", "event", "data"}, or None at the end of
        the body. Comment lines go to self.comments."""
        ev, data = {}, []
        while True:
            line = self.resp.readline()
            if not line:
                return None
            line = line.decode().rstrip("\r\n")
            if line == "":
                if ev or data:
                    ev["data"] = json.loads("\n".join(data)) if data else None
                    return ev
                continue
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
                continue
            k, _, v = line.partition(":")
            v = v[1:] if v.startswith(" ") else v
            if k == "data":
                data.append(v)
            else:
                ev[k] = v

    def take(self, n):
        out = []
        while len(out) < n:
            ev = self.next()
            assert ev is not None, f"the stream ended after {out}"
            out.append(ev)
        return out

    def rest(self):
        out = []
        while (ev := self.next()) is not None:
            out.append(ev)
        return out

    def close(self):
        self.conn.close()


def job_event_ids(stack, job_id):
    rows = stack.psql(f"SELECT id, state FROM job_events WHERE job_id = '{job_id}' ORDER BY id")
    return [(str(i), s) for i, s in rows]


def tenant_event_ids(stack, tenant, after, upto):
    rows = stack.psql(
        "SELECT e.id FROM job_events e JOIN jobs j ON j.id = e.job_id JOIN tenants t"
        f" ON t.id = j.tenant_id WHERE t.name = '{tenant}' AND e.id > {after} AND e.id <= {upto}"
        " ORDER BY e.id")
    return [int(r[0]) for r in rows]


def job_stream(stack, job_id, who="A", base=None, **headers):
    return Sse(base or stack.base, stack.keys[who], f"/v1/jobs/{job_id}/events", headers)


@pytest.mark.timeout(40)
def test_job_stream_tells_every_state_change_with_its_event_id_and_ends(A, stack):
    j = A.submit("sleep", {"seconds": 0.3}, labels={"team": "ev"})
    s = job_stream(stack, j["id"])
    assert s.status == 200
    assert s.headers["Content-Type"].startswith("text/event-stream")
    assert s.headers["Cache-Control"] == "no-cache"
    evs = s.rest()  # the stream ends by itself after the terminal event
    s.close()
    assert [e["event"] for e in evs] == ["state"] * len(evs)
    assert [(e["id"], e["data"]["state"]) for e in evs] == job_event_ids(stack, j["id"])
    assert [e["data"]["state"] for e in evs] == ["queued", "running", "succeeded"]
    run = evs[1]["data"]
    assert run["job_id"] == j["id"] and run["attempt"] == 1 and run["node"] in stack.node_names
    assert run["id"] == int(evs[1]["id"]) and run["kernel"] == "sleep"
    assert run["labels"] == {"team": "ev"} and run["at"].endswith("Z")


@pytest.mark.timeout(40)
def test_last_event_id_resumes_a_job_stream_without_gap_or_repeat(A, stack):
    j = A.run("sleep", {"seconds": 0.1})
    full = job_stream(stack, j["id"]).rest()
    assert len(full) == 3
    # header and query parameter alike, from each point of the story
    for k in range(len(full)):
        after = full[k]["id"]
        by_header = job_stream(stack, j["id"], **{"Last-Event-ID": after}).rest()
        assert [e["id"] for e in by_header] == [e["id"] for e in full[k + 1:]]
        q = Sse(stack.base, stack.keys["A"], f"/v1/jobs/{j['id']}/events?last_event_id={after}")
        assert [e["id"] for e in q.rest()] == [e["id"] for e in full[k + 1:]]
    # resumed after the terminal event: an empty stream that ends at once
    t0 = time.monotonic()
    s = job_stream(stack, j["id"], **{"Last-Event-ID": full[-1]["id"]})
    assert s.status == 200 and s.rest() == []
    assert time.monotonic() - t0 < 3


@pytest.mark.timeout(40)
def test_bad_requests_are_refused_with_the_field(A, B, stack):
    j = A.submit("sleep", {"seconds": 0.1})
    cases = [
        (f"/v1/jobs/{j['id']}/events", {"Last-Event-ID": "abc"}, 400, "Last-Event-ID"),
        ("/v1/events", {"Last-Event-ID": ""}, 400, "Last-Event-ID"),
        (f"/v1/jobs/{j['id']}/events?last_event_id=-1", {}, 400, "last_event_id"),
        ("/v1/events?state=done", {}, 400, "state"),
        ("/v1/events?state=queued,", {}, 400, "state"),
        ("/v1/events?label=nocolon", {}, 400, "label"),
        ("/v1/events?kernel=", {}, 400, "kernel"),
        ("/v1/events?duration_s=0", {}, 400, "duration_s"),
        ("/v1/events?duration_s=86401", {}, 400, "duration_s"),
        (f"/v1/jobs/{j['id']}/events?duration_s=x", {}, 400, "duration_s"),
    ]
    for path, headers, status, field in cases:
        s = Sse(stack.base, stack.keys["A"], path, headers)
        body = json.loads(s.body())
        assert s.status == status, (path, body)
        assert body["error"]["code"] == "invalid_argument" and body["error"]["field"] == field
    # another tenant's job, an unknown one, no key
    for who, path, status in (("B", f"/v1/jobs/{j['id']}/events", 404),
                              ("A", "/v1/jobs/00000000-0000-4000-8000-000000000000/events", 404),
                              (None, "/v1/events", 401)):
        s = Sse(stack.base, stack.keys[who] if who else None, path)
        assert s.status == status
        s.body()


@pytest.mark.timeout(30)
def test_duration_s_ends_a_stream_that_resumes_where_it_stopped(A, stack):
    j = A.submit("sleep", {"seconds": 3})
    t0 = time.monotonic()
    s = Sse(stack.base, stack.keys["A"], f"/v1/jobs/{j['id']}/events?duration_s=1")
    first = s.rest()
    assert 0.8 < time.monotonic() - t0 < 3, "the stream did not end after its duration"
    assert [e["data"]["state"] for e in first] == ["queued", "running"]
    rest = job_stream(stack, j["id"], **{"Last-Event-ID": first[-1]["id"]}).rest()
    assert [e["data"]["state"] for e in rest] == ["succeeded"]


@pytest.mark.timeout(60)
def test_tenant_stream_sends_only_the_tenants_matching_events(A, B, stack):
    # a stream that has its headers starts after every event drawn so far
    # (api_events.c): what is submitted next reaches it, no wait needed
    s = Sse(stack.base, stack.keys["A"], "/v1/events?kernel=sleep&label=team:red&state=running,succeeded")
    assert s.status == 200
    want = A.submit("sleep", {"seconds": 0.1}, labels={"team": "red"})
    A.submit("sleep", {"seconds": 0.1}, labels={"team": "blue"})
    A.submit("saxpy", {"a": 1.0}, {"x": tensor([1.0]), "y": tensor([1.0])}, labels={"team": "red"})
    B.submit("sleep", {"seconds": 0.1}, labels={"team": "red"})
    last = A.submit("sleep", {"seconds": 0.1}, labels={"team": "red"})
    evs = s.take(4)
    s.close()
    got = [(e["data"]["job_id"], e["data"]["state"]) for e in evs]
    assert sorted(got) == sorted([(want["id"], "running"), (want["id"], "succeeded"),
                                  (last["id"], "running"), (last["id"], "succeeded")]), got
    assert [int(e["id"]) for e in evs] == sorted(int(e["id"]) for e in evs)


@pytest.mark.timeout(60)
def test_heartbeat_comment_and_stream_limit_per_tenant(A, stack):
    with stack.second_gateway("gateway-hb", KOWLOON_SSE_HEARTBEAT_S=1,
                              KOWLOON_MAX_STREAMS_PER_TENANT=2) as base:
        s1 = Sse(base, stack.keys["A"], "/v1/events")
        s2 = Sse(base, stack.keys["A"], "/v1/events")
        assert s1.status == 200 and s2.status == 200
        s3 = Sse(base, stack.keys["A"], "/v1/events")
        body = json.loads(s3.body())
        assert s3.status == 429 and body["error"]["code"] == "rate_limited", body
        assert int(s3.headers["Retry-After"]) >= 1
        # another tenant has streams of its own
        sb = Sse(base, stack.keys["B"], "/v1/events")
        assert sb.status == 200
        t0 = time.monotonic()
        while "ping" not in s1.comments:
            line_comments(s1)
            assert time.monotonic() - t0 < 5, "no heartbeat"
        s2.close()
        # a closed stream frees its place
        deadline = time.monotonic() + 5
        while True:
            s4 = Sse(base, stack.keys["A"], "/v1/events")
            if s4.status == 200:
                break
            s4.body()
            assert time.monotonic() < deadline, "the closed stream's place was never freed"
            time.sleep(0.3)
        for s in (s1, s4, sb):
            s.close()


def line_comments(s):
    """Reads one line of s, noting a comment."""
    line = s.resp.readline().decode().strip()
    if line.startswith(":"):
        s.comments.append(line[1:].strip())


@pytest.mark.timeout(60)
def test_event_recorded_on_one_gateway_reaches_a_stream_on_another_at_once(A, stack):
    # The second gateway reads the log only once a minute on its own: an
    # event that reaches it within seconds came by the Redis wake.
    with stack.second_gateway("gateway-ev", KOWLOON_EVENTS_POLL_MS=60000) as base:
        time.sleep(0.5)  # its subscriber is up
        j = A.submit("sleep", {"seconds": 0.1})
        t0 = time.monotonic()
        s = job_stream(stack, j["id"], base=base, **{"Last-Event-ID": "0"})
        evs = s.rest()
        assert [e["data"]["state"] for e in evs] == ["queued", "running", "succeeded"]
        assert time.monotonic() - t0 < 10
        # live: a tenant stream opened first sees a new job's events come
        t = Sse(base, stack.keys["A"], "/v1/events")
        assert t.status == 200
        j2 = A.submit("sleep", {"seconds": 0.1})
        t0 = time.monotonic()
        first = t.take(1)[0]
        assert first["data"]["job_id"] == j2["id"] and first["data"]["state"] == "queued"
        assert time.monotonic() - t0 < 3, "the wake did not come through Redis"
        t.close()


@pytest.mark.timeout(60)
def test_stopping_gateway_ends_its_streams_cleanly(A, stack):
    with stack.second_gateway("gateway-stop", KOWLOON_DRAIN_S=0) as base:
        s = Sse(base, stack.keys["A"], "/v1/events")
        assert s.status == 200
        stack.procs["gateway-stop"].stop()
        t0 = time.monotonic()
        assert s.rest() == []  # the body ends; no hang, no error
        assert time.monotonic() - t0 < 8


@pytest.mark.timeout(120)
def test_concurrent_writers_on_two_gateways_miss_no_event_and_repeat_none(A, stack):
    """Submits and runs on two gateways at once while one tenant stream,
    resumed several times, reads: the ids it gets are exactly the log's."""
    start = int(stack.psql_value("SELECT coalesce(max(id), 0) FROM job_events"))
    with stack.second_gateway("gateway-w") as base2:
        A2 = stack.client("A", base=base2)
        stop = threading.Event()
        jobs = []

        def writer(c):
            while not stop.is_set():
                jobs.append(c.submit("sleep", {"seconds": 0}, labels={"run": "conc"})["id"])

        ws = [threading.Thread(target=writer, args=(c,)) for c in (A, A, A2, A2)]
        got = []
        last = str(start)
        for w in ws:
            w.start()
        try:
            for k in range(4):  # reconnect now and then, alternately on each gateway
                s = Sse(stack.base if k % 2 == 0 else base2, stack.keys["A"],
                        "/v1/events?label=run:conc", {"Last-Event-ID": last})
                for ev in s.take(40):
                    got.append(int(ev["id"]))
                    last = ev["id"]
                s.close()
        finally:
            stop.set()
            for w in ws:
                w.join()
        for jid in jobs:
            A.wait(jid, 30)
        s = Sse(stack.base, stack.keys["A"], "/v1/events?label=run:conc", {"Last-Event-ID": last})
        want_end = tenant_event_ids(stack, "A", start, 1 << 62)
        while not got or got[-1] < want_end[-1]:
            got.append(int(s.next()["id"]))
        s.close()
    assert len(set(got)) == len(got), "an event came twice"
    assert got == want_end, "the stream and the log differ"


@pytest.mark.timeout(60)
def test_an_event_committed_late_with_a_lower_id_is_not_skipped(A, stack):
    """A transaction draws an event id and commits 2 s later, while events
    with higher ids commit at once: the stream still hands them out in id
    order, the late one included, so a resume from any id loses nothing."""
    j = A.run("sleep", {"seconds": 0})
    s = Sse(stack.base, stack.keys["A"], "/v1/events")
    assert s.status == 200
    held = stack.psql_background(
        "BEGIN; INSERT INTO job_events (job_id, state, attempt, detail)"
        f" VALUES ('{j['id']}', 'succeeded', 1, 'held back'); SELECT pg_sleep(2); COMMIT;")
    try:
        deadline = time.monotonic() + 5
        while stack.psql_value("SELECT count(*) FROM pg_stat_activity"
                               " WHERE query LIKE '%held back%' AND backend_xid IS NOT NULL"
                               " AND pid <> pg_backend_pid()") != "1":
            assert time.monotonic() < deadline, "the held transaction did not start"
            time.sleep(0.05)
        later = A.submit("sleep", {"seconds": 0})
        evs = s.take(4)  # held back, then the new job's queued, running, succeeded
    finally:
        held.wait(10)
    s.close()
    ids = [int(e["id"]) for e in evs]
    assert ids == sorted(ids), evs
    assert evs[0]["data"]["detail"] == "held back", evs
    assert [e["data"]["job_id"] for e in evs[1:]] == [later["id"]] * 3


def label_event_ids(stack, run):
    rows = stack.psql("SELECT e.id FROM job_events e JOIN jobs j ON j.id = e.job_id"
                      f" WHERE j.labels->>'run' = '{run}' ORDER BY e.id")
    return [int(r[0]) for r in rows]


@pytest.mark.timeout(120)
def test_tenant_stream_resumes_after_the_gateway_is_killed_and_restarted(A, stack):
    s = Sse(stack.base, stack.keys["A"], "/v1/events?label=run:restart")
    assert s.status == 200
    jobs = [A.submit("sleep", {"seconds": 0.5}, labels={"run": "restart"})["id"] for _ in range(3)]
    got = [int(e["id"]) for e in s.take(2)]
    stack.gateway.kill9()
    try:
        while (ev := s.next()) is not None:  # what was on the wire, until the cut
            got.append(int(ev["id"]))
    except (OSError, http.client.HTTPException):
        pass
    s.close()
    stack.gateway = stack.start_gateway("gateway", stack.gw_port)
    jobs += [A.submit("sleep", {"seconds": 0}, labels={"run": "restart"})["id"] for _ in range(2)]
    for j in jobs:
        assert A.wait(j, 40)["state"] == "succeeded"
    want = label_event_ids(stack, "restart")
    s = Sse(stack.base, stack.keys["A"], "/v1/events?label=run:restart",
            {"Last-Event-ID": str(got[-1])})
    while got[-1] < want[-1]:
        got.append(int(s.next()["id"]))
    s.close()
    assert got == want, "a gap or a repeat across the restart"
    stack.wait_nodes_up(stack.node_names, timeout=30)


def mlp_inputs(client):
    """The arrays as blobs (8 MiB of x: over what a JSON body may carry,
    --max-json-body-mb; large tensors travel as blobs)."""
    out = {}
    for k, v in mlp_arrays().items():
        r = client.post("/v1/blobs", data=v.tobytes(),
                        headers={"Content-Type": "application/octet-stream"})
        assert r.status_code in (200, 201), r.text
        out[k] = {"dtype": str(v.dtype), "shape": list(v.shape), "blob": r.json()["id"]}
    return out


def mlp_arrays(n=16000, d=128, classes=4):
    """Separable blobs big enough that train_mlp (hidden 256, batches of 16)
    takes a good part of a second an epoch on a CPU node, however fast it
    is: several progress reports get through."""
    import numpy as np
    rng = np.random.default_rng(3)
    y = (np.arange(n) % classes).astype(np.int32)
    x = rng.standard_normal((n, d)).astype(np.float32)
    x[np.arange(n), y] += 3.0
    return {"x": x, "y": y}


@pytest.mark.timeout(90)
def test_train_mlp_progress_streams_and_stays_on_the_job(A, stack):
    epochs = 8
    j = A.submit("train_mlp", {"hidden": 256, "classes": 4, "epochs": epochs, "batch_size": 16,
                               "lr": 0.01, "momentum": 0.9, "seed": 1}, mlp_inputs(A),
                 resources={"backend": "cpu"}, timeout_s=80)
    s = job_stream(stack, j["id"])
    evs = s.rest()
    s.close()
    states = [e["data"]["state"] for e in evs if e["event"] == "state"]
    assert states == ["queued", "running", "succeeded"], evs
    prog = [e for e in evs if e["event"] == "progress"]
    assert len(prog) >= 2, f"too few progress events: {evs}"
    # progress has no id: a resumed stream does not repeat it
    assert all("id" not in e for e in prog)
    kinds = [e["event"] for e in evs]
    assert kinds.index("progress") > kinds.index("state"), "progress before running"
    assert len(evs) - 1 - kinds[::-1].index("progress") < len(evs) - 1, "progress after the end"
    epochs_seen = [p["data"]["progress"]["epoch"] for p in prog]
    assert epochs_seen == sorted(epochs_seen) and len(set(epochs_seen)) == len(epochs_seen)
    for p in prog:
        d = p["data"]
        assert d["job_id"] == j["id"] and d["state"] == "running" and d["attempt"] == 1
        assert 0 <= d["progress"]["fraction"] <= 1 and d["progress"]["epochs"] == epochs
        assert d["progress"]["loss"] > 0
    last = prog[-1]["data"]["progress"]
    assert last["fraction"] == 1 and last["epoch"] == epochs and 0 <= last["accuracy"] <= 1
    job = A.job(j["id"])
    assert job["progress"] == last, job
    keys = list(job)
    assert keys.index("progress") == keys.index("info") + 1


@pytest.mark.timeout(60)
def test_tenant_stream_carries_progress_of_matching_jobs(A, stack):
    s = Sse(stack.base, stack.keys["A"], "/v1/events?kernel=train_mlp")
    assert s.status == 200
    j = A.submit("train_mlp", {"hidden": 256, "classes": 4, "epochs": 4, "batch_size": 16,
                               "lr": 0.01, "momentum": 0.9, "seed": 1}, mlp_inputs(A),
                 resources={"backend": "cpu"}, timeout_s=50)
    got = []
    while not got or got[-1]["data"].get("state") != "succeeded":
        got.append(s.next())
    s.close()
    prog = [e for e in got if e["event"] == "progress"]
    assert prog and all(e["data"]["job_id"] == j["id"] for e in prog)
    assert prog[-1]["data"]["kernel"] == "train_mlp"


@pytest.mark.timeout(30)
def test_node_progress_reports_are_checked(stack):
    import requests
    reg = stack.register_node("progress-checker")   # a node of its own, by hand
    assert reg.status_code == 200, reg.text
    url = f"{stack.cluster_base}/v1/cluster/nodes/{reg.json()['id']}/results"
    h = {"Authorization": f"Bearer {reg.json()['credential']}"}
    ok_job = "00000000-0000-4000-8000-000000000001"
    bad = [
        ({"progress": {}}, "progress"),
        ({"progress": [{"job_id": "x", "attempt": 1, "progress": {"fraction": 0.5}}]},
         "progress[0].job_id"),
        ({"progress": [{"job_id": ok_job, "attempt": 0, "progress": {"fraction": 0.5}}]},
         "progress[0].attempt"),
        ({"progress": [{"job_id": ok_job, "attempt": 1, "progress": {"fraction": 1.5}}]},
         "progress[0].progress"),
        ({"progress": [{"job_id": ok_job, "attempt": 1, "progress": {"fraction": 0.5, "x": "y"}}]},
         "progress[0].progress"),
    ]
    for body, field in bad:
        r = requests.post(url, json=dict(body, free=0, results=[]), headers=h, timeout=5)
        assert r.status_code == 400 and r.json()["error"]["field"] == field, (body, r.text)
    requests.delete(url.rsplit("/", 1)[0], headers=h, timeout=5)


# ---------------------------------------------------------------- the SDK and CLI

def sdk():
    import os
    import sys
    from stack import REPO
    src = os.path.join(REPO, "sdk", "python", "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    import kowloon
    return kowloon, src


@pytest.mark.timeout(120)
def test_sdk_events_resume_across_a_gateway_kill_without_gap_or_repeat(stack):
    kowloon, _ = sdk()
    with kowloon.Client(stack.base, stack.keys["A"]) as c:
        job = c.submit("train_mlp", hidden=256, classes=4, epochs=10, batch_size=16, lr=0.01,
                       momentum=0.9, seed=1, resources={"backend": "cpu"}, timeout_s=100,
                       **mlp_arrays())
        evs, killed = [], False
        for ev in job.events():
            evs.append(ev)
            if not killed and ev.event == "progress":
                stack.gateway.kill9()  # mid-stream, mid-run
                time.sleep(0.5)
                stack.gateway = stack.start_gateway("gateway", stack.gw_port)
                killed = True
        assert killed, [e.event for e in evs]
        assert job.state == "succeeded"
        state_ids = [(e.id, e.state) for e in evs if e.event == "state"]
        assert state_ids == job_event_ids(stack, job.id), "a gap or a repeat across the restart"
        assert job.progress and job.progress["fraction"] == 1 and "accuracy" in job.progress
    stack.wait_nodes_up(stack.node_names, timeout=30)


@pytest.mark.timeout(90)
def test_cli_watch_shows_a_live_progress_bar(A, stack):
    import os
    import subprocess
    import sys
    _, src = sdk()
    j = A.submit("train_mlp", {"hidden": 256, "classes": 4, "epochs": 8, "batch_size": 16,
                               "lr": 0.01, "momentum": 0.9, "seed": 1}, mlp_inputs(A),
                 resources={"backend": "cpu"}, timeout_s=80)
    env = dict(os.environ, KOWLOON_URL=stack.base, KOWLOON_API_KEY=stack.keys["A"],
               PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "kowloon", "watch", j["id"]], env=env,
                       capture_output=True, text=True, timeout=80)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    bars = [l for l in lines if "%" in l and "epoch=" in l]
    assert len(bars) >= 2, lines
    pct = [float(l.split("]")[1].split("%")[0]) for l in bars]
    assert pct == sorted(pct) and pct[-1] == 100.0, lines
    assert lines[-1].startswith(f"{j['id']} succeeded"), lines


@pytest.mark.timeout(60)
def test_a_gateway_without_redis_reads_the_log_by_polling(A, stack):
    import requests
    from stack import GATEWAY_BIN, free_port, wait_until
    port, dead = free_port(), free_port()
    env = stack.gateway_env(KOWLOON_LISTEN=f"127.0.0.1:{port}",
                            KOWLOON_REDIS_URL=f"redis://127.0.0.1:{dead}/0",
                            KOWLOON_EVENTS_POLL_MS=200)
    p = stack._proc("gateway-noredis", [GATEWAY_BIN, "serve"], env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: requests.get(base + "/healthz", timeout=2).status_code == 200, 20, 0.1,
                   "gateway-noredis /healthz")
        s = Sse(base, stack.keys["A"], "/v1/events")
        assert s.status == 200
        j = A.submit("sleep", {"seconds": 0})  # recorded by the gateway that has Redis
        t0 = time.monotonic()
        first = s.take(1)[0]
        assert first["data"]["job_id"] == j["id"] and first["data"]["state"] == "queued"
        assert time.monotonic() - t0 < 3
        s.close()
    finally:
        p.stop()
        stack.procs.pop("gateway-noredis", None)


@pytest.mark.timeout(40)
def test_a_job_named_in_capitals_streams_its_live_events(A, stack):
    """Ids are lower-cased as PostgreSQL writes them: the stream of a job
    named in capitals gets its live events, not only its past ones."""
    j = A.submit("sleep", {"seconds": 0.5})
    s = job_stream(stack, j["id"].upper())
    assert s.status == 200
    evs = s.rest()
    s.close()
    assert [e["data"]["state"] for e in evs] == ["queued", "running", "succeeded"]
    assert all(e["data"]["job_id"] == j["id"] for e in evs)
    assert A.get(f"/v1/jobs/{j['id'].upper()}").json()["id"] == j["id"]


@pytest.mark.timeout(60)
def test_a_revoked_key_ends_its_streams_and_waits(stack):
    """A stream and a held `Prefer: wait` outlive no revocation: within the
    key cache's period the stream ends with an `error` event and the wait
    is answered 401 (the CLI revokes in PostgreSQL only, so the gateway
    learns it by re-checking, not from its own admin API)."""
    key = stack.create_key("ev-revoke")
    c = stack.client(key=key)
    stream = Sse(stack.base, key, "/v1/events", timeout=10)
    assert stream.status == 200
    long = c.submit("sleep", {"seconds": 30})
    done = {}

    def wait():
        done["r"] = c.get(f"/v1/jobs/{long['id']}", headers={"Prefer": "wait=30"}, timeout=30)
    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.3)  # the wait is held (nothing to wait on but its answer)
    assert stack.revoke_key(key).returncode == 0
    t0 = time.monotonic()
    evs = stream.rest()  # the stream ends by itself
    took = time.monotonic() - t0
    stream.close()
    err = [e for e in evs if e.get("event") == "error"]
    assert len(err) == 1 and evs[-1] is err[0], evs
    assert err[0]["data"]["error"]["code"] == "unauthenticated", err
    assert "id" not in err[0], "an error event carries no id to resume from"
    t.join(30)
    r = done["r"]
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "unauthenticated"
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert took < 5, f"the stream outlived the revocation by {took:.1f} s"
    # nothing else of the tenant's was touched: the job runs on
    assert stack.admin.get("/v1/jobs/" + long["id"]).status_code in (200, 404)
    stack.psql(f"UPDATE jobs SET cancel_requested = true WHERE id = '{long['id']}'")


@pytest.mark.timeout(240)
def test_a_stream_resumed_from_the_start_of_a_million_events_stalls_no_other():
    """Four of tenant A's streams resume from 0 on a log of a million
    events that are nearly all B's: each is read a bounded slice at a time
    by the catch-up thread, so A's live stream gets the events of A's jobs
    posted meanwhile (one every 200 ms) long before the four are caught up;
    before, the one thread that hands out live events walked the whole log
    for each of them, and the live stream waited. Every resumed stream
    tells exactly A's story, in order. (Figures, not pass/fail: the test
    prints them; bench/events_catchup.py measures more.)"""
    s = stk.Stack(node_names=())
    try:
        s.start()
        A, B = s.client("A"), s.client("B")
        for who, n in ((A, 5), (B, 100)):
            for _ in range(n):
                assert who.post_job({"kernel": "sleep", "params": {"seconds": 0}}).status_code == 202
        s.psql("INSERT INTO job_events (job_id, state, attempt)"
               " SELECT j.id, 'running', g FROM jobs j CROSS JOIN generate_series(1, 10000) g"
               " WHERE j.tenant_id = (SELECT id FROM tenants WHERE name = 'B')", timeout=300)
        s.psql("ANALYZE job_events", timeout=300)
        last = int(s.psql_value("SELECT max(id) FROM job_events"))
        assert last > 1000000
        # a gateway started now reads the log from its end (one that saw
        # the insert with a stream open would hand the million out as live
        # events, which is not what is measured here)
        s.gateway.stop()
        s.gateway = s.start_gateway("gateway", s.gw_port)
        want = tenant_event_ids(s, "A", 0, last)  # the first j posted below comes after
        live = Sse(s.base, s.keys["A"], "/v1/events")
        live_seen = {}

        def read_live():
            try:
                while (ev := live.next()) is not None:
                    live_seen[ev["data"]["job_id"]] = time.monotonic()
            except (OSError, ValueError, AttributeError):
                pass  # closed at the end of the test
        threading.Thread(target=read_live, daemon=True).start()
        resumed = [Sse(s.base, s.keys["A"], "/v1/events", {"Last-Event-ID": "0"}, timeout=120)
                   for _ in range(4)]
        seen = [[] for _ in resumed]
        live_at = [None] * len(resumed)
        posted = []

        def read(i):
            while (ev := resumed[i].next()) is not None:
                seen[i].append(ev)
                if ev["data"]["job_id"] == posted[0][0]:
                    live_at[i] = time.monotonic()
                    return
        t0 = time.monotonic()
        # jobs of A every 200 ms while the four catch up: each one's event
        # on the live stream is timed
        posted.append((A.post_job({"kernel": "sleep", "params": {"seconds": 0}}).json()["id"],
                       time.monotonic()))
        readers = [threading.Thread(target=read, args=(i,)) for i in range(len(resumed))]
        for r in readers:
            r.start()
        while any(t is None for t in live_at) and time.monotonic() - t0 < 150:
            time.sleep(0.2)
            posted.append((A.post_job({"kernel": "sleep", "params": {"seconds": 0}}).json()["id"],
                           time.monotonic()))
        caught_up = max(live_at) - t0
        stk.wait_until(lambda: all(j in live_seen for j, _ in posted), 30, 0.05, "live events")
        lat = sorted(live_seen[j] - t for j, t in posted)
        print(f"4 streams resumed from 0 over {last} events live after {caught_up:.2f} s; "
              f"meanwhile {len(lat)} live events: median {lat[len(lat) // 2] * 1000:.0f} ms, "
              f"max {lat[-1] * 1000:.0f} ms")
        assert lat[-1] < caught_up / 4, (lat[-1], caught_up)
        for r in readers:
            r.join(60)
        # each resumed stream told A's story from the start, in order, with
        # no gap and no repeat, up to the first job posted after it opened
        want_ids = [int(i) for i in tenant_event_ids(s, "A", 0, last + 10**6)]
        for evs in seen:
            got = [int(e["id"]) for e in evs]
            assert got == want_ids[:len(got)] and len(got) == len(want) + 1, (got[:10], len(want))
        for x in [live] + resumed:
            x.close()
    finally:
        s.close()
        s.remove()
